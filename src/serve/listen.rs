//! Wakes the service when a request, cancel, pause or resume is announced
//! on channel `walfill` (LISTEN/NOTIFY), instead of at its next poll.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::control::state::requests::CHANNEL;
use crate::db;

/// Listens until `cancel`, reconnecting after a lost connection.
pub(super) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut wait = Duration::from_secs(1);
    while !cancel.is_cancelled() {
        match listen_once(&shared, &cancel).await {
            Ok(()) => return,
            Err(why) => {
                tracing::warn!(%why, retry_in = wait.as_secs(), "not listening for requests; polling meanwhile");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

async fn listen_once(shared: &Shared, cancel: &CancellationToken) -> Result<(), String> {
    let config = shared.config();
    let mut pg = config.destination.client_config();
    pg.options(db::options());
    pg.connect_timeout(Duration::from_secs(10));
    let (client, mut connection) = pg
        .connect(NoTls)
        .await
        .map_err(|e| walfill_core::sql::describe_pg_error(&e))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n.payload().to_string());
                }
                Ok(_) => {}
                Err(e) => return walfill_core::sql::describe_pg_error(&e),
            }
        }
        "the connection closed".to_string()
    });
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(|e| walfill_core::sql::describe_pg_error(&e))?;
    // Whatever came before the LISTEN is found by a look now.
    shared.wake.notify_one();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => {
                driver.abort();
                return Ok(());
            }
            payload = rx.recv() => match payload {
                Some(payload) => {
                    tracing::debug!(%payload, "woken");
                    shared.wake.notify_one();
                }
                None => {
                    return Err(driver.await.unwrap_or_else(|e| e.to_string()));
                }
            }
        }
    }
}
