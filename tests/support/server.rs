//! Running PostgreSQL's server programs for clusters a test starts itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory with PostgreSQL's server programs.
pub fn pg_bindir() -> PathBuf {
    let candidates = [
        std::env::var("WALFILL_PG_BINDIR").unwrap_or_default(),
        "/usr/lib/postgresql/15/bin".to_string(),
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("postgres").is_file())
        .unwrap_or_else(|| panic!("PostgreSQL server binaries not found; set WALFILL_PG_BINDIR"))
}

/// Whether the tests run as root (the server then runs as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A command running a server program, as `postgres` when the test runs as root.
pub fn server_command(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs a server program, as `postgres` when the test runs as root;
/// panics with its output when it fails.
pub fn as_server_owner(program: &Path, args: &[&str]) -> Output {
    let out = server_command(program)
        .args(args)
        .output()
        .expect("run a server program");
    assert!(
        out.status.success(),
        "{} {args:?} failed:\n{}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Gives `path` (recursively) to `postgres` when the test runs as root.
pub fn give_to_server(path: &Path) {
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(path)
            .status()
            .expect("chown");
        assert!(ok.success(), "chown {}", path.display());
    }
}
