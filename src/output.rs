//! What commands print on stdout, for people and scripts.
//!
//! A stdout closed early (`walfill status --json | head`) ends the command
//! quietly, as `ls | head` does: writing reports [`Error::Output`], which
//! `main` turns into a clean exit.

use std::fmt;
use std::io::Write;

use crate::error::{Error, Result};

/// Writes one line to stdout.
pub fn line(args: fmt::Arguments<'_>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(Error::Output)
}

/// `say!("...", args)?`: one line on stdout, like `println!` but an error
/// instead of a panic when stdout is closed.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

/// Whether an error only says that stdout was closed by its reader.
pub fn is_closed_stdout(e: &Error) -> bool {
    matches!(e, Error::Output(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
}
