//! Whether the versions that should follow the live stream do: the
//! readiness `status`, `/ready` and the metrics report.
//!
//! A version should be followed when it is built (`ready`, `active` or
//! `previous`), unless its view was published knowing it does not follow
//! (`swap --force`: the view is marked stale, and says so). Such a version
//! is followed when a process holds its lock. One that nobody holds is not
//! followed when its follower failed (its last error is recorded), when it
//! lost changes for good, or when nothing touched it for
//! [`UNFOLLOWED_AFTER_SECONDS`]: a version a backfill has just built waits
//! that long for a `sync` or `serve` to pick it up.

use super::VersionStatus;
use crate::control::state::Phase;

/// Seconds a built version may go unheld before it counts as not followed.
pub const UNFOLLOWED_AFTER_SECONDS: f64 = 30.0;

/// Sets `v.following` and `v.not_followed`; `idle_seconds`: since its
/// state last changed.
pub(super) fn judge(v: &mut VersionStatus, idle_seconds: f64) {
    let built = matches!(
        v.phase.phase(),
        Some(Phase::Ready | Phase::Active | Phase::Previous)
    );
    if !built || v.stale.is_some() {
        return;
    }
    let held = v.held_by_pid.is_some();
    v.following = Some(held && v.lost.is_none());
    v.not_followed = if let Some(lost) = &v.lost {
        Some(format!(
            "it lost changes for good and must be rebuilt: {lost}"
        ))
    } else if held {
        None
    } else if let Some(error) = &v.last_error {
        Some(format!("its follower failed: {error}"))
    } else if idle_seconds >= UNFOLLOWED_AFTER_SECONDS {
        Some(format!(
            "no process follows it (for {idle_seconds:.0} s): run `walfill sync` or `walfill \
             serve` with a configuration that has target {}",
            v.target
        ))
    } else {
        None
    };
}

/// Why the service is not ready, from the versions' judgement: one line
/// per version that should be followed and is not.
pub fn not_ready(versions: &[VersionStatus]) -> Vec<String> {
    versions
        .iter()
        .filter_map(|v| {
            v.not_followed
                .as_ref()
                .map(|why| format!("{} version {} ({}): {why}", v.target, v.version, v.phase))
        })
        .collect()
}
