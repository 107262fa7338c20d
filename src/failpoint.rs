//! Failpoints: named places where a test can make the process die on the
//! spot, as `kill -9` would, to check that every phase resumes.
//!
//! `WALFILL_FAILPOINTS=name[@n][,name[@n]...]` aborts the process the n-th
//! time (default: the first) execution reaches `name`. Two other kinds of
//! points are armed the same way: a *hold* ([`hold`]) waits there until
//! the file named by `WALFILL_FAILPOINT_RELEASE` exists, so that a test can
//! act at that moment; a *switch* ([`armed`]) changes a rule, so that a
//! test can show the rule matters. Nothing else changes when the variable
//! is unset. The names are listed in the README's section
//! on testing; `walfill` prints `failpoint NAME reached` on stderr just
//! before it aborts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The variable that arms failpoints.
pub const VARIABLE: &str = "WALFILL_FAILPOINTS";

struct Armed {
    /// Name, the hit that fires, and hits so far.
    points: HashMap<String, (u64, AtomicU64)>,
}

fn points() -> &'static Option<Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let text = std::env::var(VARIABLE).ok()?;
        let points = text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('@') {
                Some((name, n)) => (
                    name.to_string(),
                    (n.parse().unwrap_or(1), AtomicU64::new(0)),
                ),
                None => (p.to_string(), (1, AtomicU64::new(0))),
            })
            .collect();
        Some(Armed { points })
    })
}

/// The variable naming the file whose creation releases a held point.
pub const RELEASE: &str = "WALFILL_FAILPOINT_RELEASE";

/// Whether the failpoint `name` is armed (a switch).
pub fn armed(name: &str) -> bool {
    armed_points().is_some_and(|a| a.points.contains_key(name))
}

/// Waits here, the n-th time execution reaches `name` if it is armed,
/// until the file named by `WALFILL_FAILPOINT_RELEASE` exists.
pub async fn hold(name: &str) {
    let Some((due, count)) = armed_points().and_then(|a| a.points.get(name)) else {
        return;
    };
    if count.fetch_add(1, Ordering::SeqCst) + 1 != *due {
        return;
    }
    eprintln!("failpoint {name} holding");
    let Some(release) = std::env::var_os(RELEASE) else {
        return;
    };
    while !std::path::Path::new(&release).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eprintln!("failpoint {name} released");
}

fn armed_points() -> Option<&'static Armed> {
    points().as_ref()
}

/// Dies here if the failpoint `name` is armed and due.
pub fn hit(name: &str) {
    let Some((due, count)) = armed_points().and_then(|a| a.points.get(name)) else {
        return;
    };
    if count.fetch_add(1, Ordering::SeqCst) + 1 == *due {
        eprintln!("failpoint {name} reached");
        std::process::abort();
    }
}
