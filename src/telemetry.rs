//! Logging: structured `tracing` events on stderr, text or JSON; colour
//! only when stderr is a terminal (a log file or PostgreSQL's server log,
//! for `wal-push` as `archive_command`, gets none).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber. `RUST_LOG` overrides the verbosity.
pub fn init(format: LogFormat, verbose: u8) {
    let default = match verbose {
        0 => "walfill=info,warn",
        1 => "walfill=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Reports the error that ends the command on stderr: `error: ...` lines
/// for people, or one JSON event in JSON mode (every stderr line is JSON).
pub fn report_error(format: LogFormat, message: &str, exit_code: u8) {
    match format {
        LogFormat::Text => eprintln!("error: {message}"),
        LogFormat::Json => tracing::error!(exit_code, "{message}"),
    }
}
