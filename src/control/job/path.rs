//! Choosing how a planned version is filled.

use tokio_postgres::Client;

use super::Context;
use crate::control::route::{self, PathChoice};
use crate::control::state::{Path, VersionState};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::Plan;

/// Decides the path of a planned version (unless a fallback already did)
/// and records it with the reason.
pub(super) async fn choose(
    cx: &Context<'_>,
    dest: &mut Client,
    plan: &Plan,
    state: &mut VersionState,
    choice: PathChoice,
) -> Result<Path> {
    // A version that fell back to a snapshot keeps it, unless asked to
    // replay.
    if state.path_reason.is_some() && state.path == Path::Snapshot && choice != PathChoice::Replay {
        return Ok(Path::Snapshot);
    }
    let (path, reason, start) = match choice {
        PathChoice::Snapshot => (
            Path::Snapshot,
            "asked for with --path snapshot".to_string(),
            None,
        ),
        PathChoice::Auto | PathChoice::Replay => {
            let rates = route::Rates::measured(dest).await?;
            let decision =
                route::decide_now(cx.config, cx.source, plan, &rates, choice, cx.cancel).await?;
            let path = decision.path;
            if path != Path::Replay && choice == PathChoice::Replay {
                return Err(Error::refused(
                    format!(
                        "{} cannot be built by replay: {}",
                        plan.def.target, decision.reason
                    ),
                    "run without --path replay to build it from a snapshot",
                ));
            }
            (path, decision.reason, decision.start)
        }
    };
    let start = start
        .map(|s| serde_json::to_value(&s))
        .transpose()
        .map_err(|e| Error::Internal(format!("recording the replay's start: {e}")))?;
    state.choose_path(dest, path, &reason, start).await?;
    tracing::info!(target = %state.target, version = %state.version, %path, %reason, "path chosen");
    Ok(path)
}
