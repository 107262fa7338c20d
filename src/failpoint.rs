//! Failpoints: named places where a test can make the process die on the
//! spot, as `kill -9` would, to check that every phase resumes.
//!
//! `WALFILL_FAILPOINTS=name[@n][,name[@n]...]` aborts the process the n-th
//! time (default: the first) execution reaches `name`. Nothing else changes
//! when the variable is unset. The names are listed in the README's section
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

fn armed() -> &'static Option<Armed> {
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

/// Dies here if the failpoint `name` is armed and due.
pub fn hit(name: &str) {
    let Some(armed) = armed() else {
        return;
    };
    let Some((due, count)) = armed.points.get(name) else {
        return;
    };
    if count.fetch_add(1, Ordering::SeqCst) + 1 == *due {
        eprintln!("failpoint {name} reached");
        std::process::abort();
    }
}
