//! History sources: everything a version can be filled from, each yielding
//! the same [`Batch`](crate::pipeline::apply::Batch)es for the one apply loop.
//!
//! - [`copy`]: a snapshot of the source table, in keyset chunks;
//! - [`chunked`]: the same chunks, each read in a snapshot of its own;
//! - [`replay`]: archived WAL (after a base snapshot's rows, when it starts
//!   from one), decoded outside the server;
//! - [`live`]: the version's logical slot, which never ends;
//! - [`evaluate`]: whether a copy's transform runs on the source;
//! - [`letters`]: a version's dead letters, applied again;
//! - [`absent`]: the keys a scoped refresh found the source lost.

pub mod absent;
pub mod chunked;
pub mod copy;
pub mod evaluate;
mod feed;
pub mod letters;
pub mod live;
pub mod replay;

use tokio_postgres::Client;
use walfill_snapshot::CopyFormat;

use crate::config::CopyFormatSetting;
use crate::error::{Error, Result};
use crate::pipeline::version_sql::Plan;

/// How a snapshot copy of `plan`'s table moves its rows: binary when the
/// configuration allows it, every copied column's type travels in binary
/// between the two databases and both store text as UTF-8 (see
/// [`walfill_snapshot::format`]); text otherwise, and when the rows must
/// be read as text anyway (`need_text`: a base snapshot keeps them so).
/// The choice and its reason are logged.
pub async fn copy_format(
    setting: CopyFormatSetting,
    source: &Client,
    dest: &Client,
    plan: &Plan,
    need_text: bool,
) -> Result<CopyFormat> {
    let text = |why: &str| {
        tracing::info!(format = "text", why, "copy format");
        Ok(CopyFormat::Text)
    };
    if setting == CopyFormatSetting::Text {
        return text("backfill.copy_format = \"text\"");
    }
    if need_text {
        return text("a base snapshot keeps the copied rows as text");
    }
    for (client, which) in [(source, "source"), (dest, "destination")] {
        let encoding: String = client
            .query_one("SELECT current_setting('server_encoding')", &[])
            .await
            .map_err(|e| match which {
                "source" => Error::source_query("reading the source's encoding", e),
                _ => Error::destination("reading the destination's encoding", e),
            })?
            .get(0);
        if !walfill_snapshot::format::encoding_allows_binary(&encoding) {
            return text(&format!(
                "the {which} database's encoding is {encoding}, not UTF8"
            ));
        }
    }
    let unsafe_columns =
        walfill_snapshot::format::binary_unsafe_columns(source, &plan.source).await?;
    if !unsafe_columns.is_empty() {
        return text(&format!(
            "the values of {} do not travel in binary between databases",
            unsafe_columns.join(", ")
        ));
    }
    tracing::info!(format = "binary", "copy format");
    Ok(CopyFormat::Binary)
}

/// Opens a read-only repeatable-read transaction on `client` (a source
/// session), for a snapshot's reads; `what` it is for names it in errors.
pub(super) async fn read_only_transaction<'c>(
    client: &'c mut Client,
    what: &str,
) -> Result<tokio_postgres::Transaction<'c>> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| Error::source_query(format!("opening {what}"), e))
}
