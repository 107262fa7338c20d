//! Damaged archives: truncated and flipped segments, wrong page magic, a
//! missing segment in the middle. Each is an error naming the LSN and the
//! file, a non-zero exit, and no output past the last good transaction.

use std::path::{Path, PathBuf};

use super::{archive_url, Oracle};

/// A private archive holding copies of the segments of `[from, to]`.
struct Copy {
    dir: PathBuf,
    files: Vec<String>,
}

impl Copy {
    fn new(o: &Oracle, to: &str) -> Copy {
        let source = archive_url();
        let source = Path::new(source.trim_start_matches("file://")).join("wal");
        let first =
            o.db.value(&format!("SELECT pg_walfile_name('{}')", o.restart))
                .unwrap();
        let last =
            o.db.value(&format!("SELECT pg_walfile_name('{to}')"))
                .unwrap();
        let dir = std::env::temp_dir().join(format!("walfill-damage-{}", o.db.name));
        let wal = dir.join("wal");
        std::fs::create_dir_all(&wal).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(&source)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 24 && *n >= first && *n <= last)
            .collect();
        files.sort();
        for f in &files {
            std::fs::copy(source.join(f), wal.join(f)).unwrap();
        }
        Copy { dir, files }
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    fn path(&self, i: usize) -> PathBuf {
        self.dir.join("wal").join(&self.files[i])
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three segments of work (WAL switched in between), decoded whole first.
fn three_segments(tag: &str) -> (Oracle, super::Expected, String) {
    let o = Oracle::new(tag, "CREATE TABLE t (id int PRIMARY KEY, v text);");
    for part in 0..3 {
        o.db.exec(&format!(
            "INSERT INTO t SELECT g, 'part {part} ' || g FROM generate_series({0}, {0} + 99) g;
             INSERT INTO t VALUES ({part} * 1000 + 999, 'single');",
            part * 1000
        ));
        if part < 2 {
            o.db.exec("SELECT pg_switch_wal()");
        }
    }
    let expected = o.expected();
    let good = o.decode(&archive_url(), &expected.to, &[]);
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let good = String::from_utf8_lossy(&good.stdout).into_owned();
    super::assert_same_text(&expected.text, good.trim_end_matches('\n'));
    (o, expected, good)
}

/// Runs the damaged decode and checks the failure: exit code, message, and
/// output that is a prefix of the good output ending with a whole transaction.
fn assert_fails_cleanly(o: &Oracle, copy: &Copy, to: &str, good: &str, needles: &[&str]) {
    let out = o.decode(&copy.url(), to, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "damage went unnoticed");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "the error should mention {needle:?}: {stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        good.starts_with(printed.as_ref()),
        "output differs from the good decoding"
    );
    assert!(
        printed.is_empty()
            || printed
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .starts_with("COMMIT "),
        "output must end with a whole transaction: {printed}"
    );
}

#[test]
fn damaged_segments_fail_cleanly() {
    let (o, expected, good) = three_segments("damage");
    let copy = Copy::new(&o, &expected.to);
    assert!(copy.files.len() >= 3, "the workload spans {:?}", copy.files);
    let middle = copy.files.len() / 2;

    // A flipped byte inside a record of the middle segment.
    let mut bytes = std::fs::read(copy.path(middle)).unwrap();
    let original = bytes.clone();
    bytes[8192 + 100] ^= 0x40;
    std::fs::write(copy.path(middle), &bytes).unwrap();
    assert_fails_cleanly(
        &o,
        &copy,
        &expected.to,
        &good,
        &[&copy.files[middle], " at "],
    );

    // Wrong page magic on the second page.
    let mut bytes = original.clone();
    bytes[8192] ^= 0xff;
    std::fs::write(copy.path(middle), &bytes).unwrap();
    assert_fails_cleanly(
        &o,
        &copy,
        &expected.to,
        &good,
        &[&copy.files[middle], "magic"],
    );

    // A truncated segment.
    std::fs::write(copy.path(middle), &original[..original.len() / 2]).unwrap();
    assert_fails_cleanly(
        &o,
        &copy,
        &expected.to,
        &good,
        &[&copy.files[middle], "corrupt"],
    );

    // The middle segment missing altogether.
    std::fs::remove_file(copy.path(middle)).unwrap();
    assert_fails_cleanly(
        &o,
        &copy,
        &expected.to,
        &good,
        &[&copy.files[middle], "missing"],
    );
}
