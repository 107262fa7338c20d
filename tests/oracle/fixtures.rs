//! The committed WAL fixtures decode, with no server at all, to exactly
//! what a test_decoding slot printed when they were made
//! (`scripts/gen-wal-fixtures.sh`).

use std::path::PathBuf;

fn fixture(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/wal/pg15")
        .join(case)
}

fn lsn(case_toml: &str, key: &str) -> String {
    case_toml
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("case.toml has no {key}"))
        .to_string()
}

#[test]
fn basic_fixture_decodes_like_test_decoding() {
    let dir = fixture("basic");
    let case = std::fs::read_to_string(dir.join("case.toml")).unwrap();
    let expected =
        zstd::decode_all(&std::fs::read(dir.join("expected.txt.zst")).unwrap()[..]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walfill"))
        .args(["decode", "--format", "test_decoding"])
        .arg("--archive")
        .arg(format!("file://{}", dir.display()))
        .arg("--catalog")
        .arg(dir.join("catalog.json"))
        .args(["--restart-from", &lsn(&case, "restart_from")])
        .args(["--from", &lsn(&case, "from")])
        .args(["--to", &lsn(&case, "to")])
        .env_remove("WALFILL_CONFIG")
        .output()
        .expect("run walfill decode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let expected = String::from_utf8(expected).unwrap();
    super::assert_same_text(
        expected.trim_end_matches('\n'),
        printed.trim_end_matches('\n'),
    );
}
