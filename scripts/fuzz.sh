#!/usr/bin/env bash
# Builds and runs the libFuzzer targets in fuzz/ for a bounded time.
#
# usage: scripts/fuzz.sh [TARGET|all] [SECONDS]    fuzz each target for SECONDS (default 60)
#        scripts/fuzz.sh TARGET FILE               run TARGET once on FILE (reproduce a crash)
#
# Targets: wal_stream, wal_record, tuple, datum (see fuzz/src/lib.rs).
#
# Works on the stable toolchain: cargo-fuzz passes nightly-only compiler flags
# (-Zsanitizer=address), which stable rustc accepts with RUSTC_BOOTSTRAP=1.
# Cargo caches rustc's answers in the target directory without noting that
# variable, so a failed attempt made without it would keep failing; the cache
# is turned off here (CARGO_CACHE_RUSTC_INFO=0).
#
# Seeds are rebuilt on every run from the WAL fixtures and the type test
# vectors (fuzz/seeds/, not committed); what the fuzzer finds accumulates in
# fuzz/corpus/<target>/, crashing inputs land in fuzz/artifacts/<target>/, and
# each run's log in fuzz/logs/<target>.log.
#
# Environment:
#   CARGO_TARGET_DIR   build directory (default fuzz/target)
#   FUZZ_SANITIZER     address (default) or none (faster, no memory checks)
#   FUZZ_JOBS          parallel fuzzing processes per target (default 1)
#   FUZZ_ARGS          extra libFuzzer options, e.g. "-seed=1"
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
fuzz="$root/fuzz"
all_targets=(wal_stream wal_record tuple datum)

target=${1:-all}
arg=${2:-60}
if [[ $target == all ]]; then
  targets=("${all_targets[@]}")
elif [[ " ${all_targets[*]} " == *" $target "* ]]; then
  targets=("$target")
else
  echo "unknown target '$target'; one of: all ${all_targets[*]}" >&2
  exit 2
fi

export RUSTC_BOOTSTRAP=1
export CARGO_CACHE_RUSTC_INFO=0
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$fuzz/target}
sanitizer=${FUZZ_SANITIZER:-address}
jobs=${FUZZ_JOBS:-1}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install --locked cargo-fuzz
fi

# Largest input libFuzzer generates, per target (seeds are cut to fit).
max_len() {
  case $1 in
    wal_stream) echo 40000 ;;
    wal_record) echo 20000 ;;
    tuple) echo 32768 ;;
    datum) echo 4096 ;;
  esac
}

cd "$root"

if [[ -f $arg ]]; then
  # Reproduce: run the target once on one input; the panic and backtrace are printed.
  cargo fuzz build -s "$sanitizer" "$target"
  exec cargo fuzz run -s "$sanitizer" "$target" "$arg"
fi
if ! [[ $arg =~ ^[0-9]+$ ]]; then
  echo "SECONDS must be a number or an input file, got '$arg'" >&2
  exit 2
fi
secs=$arg

echo "generating seeds" >&2
rm -rf "$fuzz/seeds"
# The generator needs no nightly flags, and a change of RUSTC_BOOTSTRAP makes
# cargo rebuild every crate: built without it, as `cargo test` in fuzz/ and
# scripts/test.sh build it, it is built once for all of them.
env -u RUSTC_BOOTSTRAP cargo run --quiet --manifest-path "$fuzz/Cargo.toml" -p walfill-fuzz-seedgen -- \
  "$root" "$fuzz/seeds"

mkdir -p "$fuzz/logs"
failed=()
summary=()
for t in "${targets[@]}"; do
  echo "building $t" >&2
  cargo fuzz build -s "$sanitizer" "$t"
  mkdir -p "$fuzz/corpus/$t"
  log="$fuzz/logs/$t.log"
  echo "fuzzing $t for ${secs}s (log: ${log#"$root"/})" >&2
  fork=()
  if ((jobs > 1)); then fork=(-fork="$jobs"); fi
  # shellcheck disable=SC2086 # FUZZ_ARGS is split on purpose.
  if cargo fuzz run -s "$sanitizer" "$t" "$fuzz/corpus/$t" "$fuzz/seeds/$t" -- \
    -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 "${fork[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    grep -E "panicked at|^thread|ERROR: |SUMMARY|Test unit written" "$log" | head -n 20 >&2 || true
  fi
  # The last status line carries coverage (cov: edges, ft: features) and corpus size.
  last=$(grep -E "^#[0-9]+.* cov: " "$log" | tail -n 1 | sed -E 's/ +/ /g; s/ (lim|L|MS):.*//' || true)
  execs=$(grep -E "^stat::number_of_executed_units" "$log" | tail -n 1 | awk '{print $2}' || true)
  summary+=("$t: $status; executions ${execs:-?}; last status: ${last:-none}")
done

echo
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "crashing targets: ${failed[*]}; inputs in fuzz/artifacts/<target>/;" \
    "reproduce with scripts/fuzz.sh <target> <input>" >&2
  exit 1
fi
