//! Builds seed corpora for the fuzz targets from data PostgreSQL produced:
//! the WAL segments under `fixtures/wal/` and the stored datums of the type
//! test vectors (`replay/src/types/testdata/vectors.tsv`).
//!
//! ```text
//! walfill-fuzz-seedgen <repository root> <output directory>
//! ```
//!
//! writes `<output>/<target>/<name>` for the targets `wal_stream`,
//! `wal_record`, `tuple` and `datum`, then runs every harness over every
//! seed once (without the fuzzer) so that a harness that rejects real data
//! shows up here rather than as a fuzzer that never gets anywhere.

mod values;
mod wal;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Seeds per target, by file name.
#[derive(Default)]
pub(crate) struct Seeds {
    targets: BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>,
}

impl Seeds {
    /// Adds a seed; a name already taken is left as it was.
    pub(crate) fn add(&mut self, target: &'static str, name: String, bytes: Vec<u8>) {
        self.targets
            .entry(target)
            .or_default()
            .entry(name)
            .or_insert(bytes);
    }

    fn write(&self, out: &Path) -> std::io::Result<()> {
        for (target, seeds) in &self.targets {
            let dir = out.join(target);
            std::fs::create_dir_all(&dir)?;
            for (name, bytes) in seeds {
                std::fs::write(dir.join(name), bytes)?;
            }
        }
        Ok(())
    }

    /// Runs each target's harness over its seeds.
    fn check(&self) {
        for (target, seeds) in &self.targets {
            let run: fn(&[u8]) = match *target {
                "wal_stream" => walfill_fuzz::stream::run,
                "wal_record" => walfill_fuzz::record::run,
                "tuple" => walfill_fuzz::tuple::run,
                _ => walfill_fuzz::datum::run,
            };
            for (name, bytes) in seeds {
                if std::panic::catch_unwind(|| run(bytes)).is_err() {
                    eprintln!("the {target} harness panics on seed {name}");
                    std::process::exit(1);
                }
            }
            let total: usize = seeds.values().map(Vec::len).sum();
            println!("{target}: {} seeds, {total} bytes", seeds.len());
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, root, out] = &args[..] else {
        eprintln!("usage: walfill-fuzz-seedgen <repository root> <output directory>");
        return ExitCode::from(2);
    };
    match generate(Path::new(root), &PathBuf::from(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seedgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(root: &Path, out: &Path) -> Result<(), String> {
    let mut seeds = Seeds::default();
    let fixtures = root.join("fixtures/wal");
    for dir in fixture_dirs(&fixtures)? {
        let label = dir
            .strip_prefix(&fixtures)
            .map(|p| p.to_string_lossy().replace('/', "-"))
            .unwrap_or_default();
        let wal = wal::Fixture::load(&dir)?;
        wal.seeds(&label, &mut seeds);
    }
    let vectors = root.join("replay/src/types/testdata/vectors.tsv");
    let text = std::fs::read_to_string(&vectors)
        .map_err(|e| format!("reading {}: {e}", vectors.display()))?;
    values::vector_seeds(&text, &mut seeds)?;
    for (name, input) in walfill_fuzz::known::cases() {
        seeds.add("wal_stream", format!("known-{name}"), input);
    }
    seeds
        .write(out)
        .map_err(|e| format!("writing seeds: {e}"))?;
    seeds.check();
    Ok(())
}

/// Directories under `fixtures` holding `<segment>.zst` files.
fn fixture_dirs(fixtures: &Path) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    let mut stack = vec![fixtures.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        let mut has_segments = false;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
            } else if wal::segment_name(&path).is_some() {
                has_segments = true;
            }
        }
        if has_segments {
            found.push(dir);
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(format!("no WAL fixtures under {}", fixtures.display()));
    }
    Ok(found)
}
