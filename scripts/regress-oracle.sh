#!/usr/bin/env bash
# The decoder against PostgreSQL's own logical decoding on PostgreSQL's own
# regression suite: a test_decoding slot and walfill's catalog journal are
# set up in a fresh database, the suite's SQL files run in it in schedule
# order (failures are part of the suite: they are ignored), and then
# `walfill decode --format test_decoding` of the archived WAL is compared
# with what the slot prints, table by table.
#
#   scripts/regress-oracle.sh [--tests N] [--check] [--outcomes]
#
#   --tests N   only the first N files of the schedule (default: all)
#   --check     exit 1 when a table differs, other than the tables with a
#               column whose text needs catalog lookups the journal does not
#               record (the reg* types, aclitem: see the README), or (with
#               --outcomes) when a statement's outcome differs
#   --outcomes  also run the files in a database without the journal and
#               compare every statement's errors: the journal must change
#               no statement's outcome
#   WALFILL_BIN=path  decode with this walfill binary instead of building
#               a release one
#
# The suite's files come from Debian's source package of the server that
# runs (postgresql-15), fetched with apt-get into .pg-src/ through a
# sources list of its own (the machine's apt configuration is untouched).
# Prints: tables whose change lines are identical, of all tables the slot
# or walfill printed, and change lines identical; the differing tables go
# to $WALFILL_PG_HOME/regress-oracle/differing.txt.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

limit=0
check=""
outcomes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) limit="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --outcomes) outcomes=1; shift ;;
    *) die "unknown argument $1 (see the comment at the top of $0)" ;;
  esac
done

DB=walfill_regress_oracle
SLOT=walfill_regress_oracle
OUT="$WALFILL_PG_HOME/regress-oracle"
SRC_CACHE="$WALFILL_ROOT/.pg-src"
rm -rf "$OUT"
mkdir -p "$OUT" "$SRC_CACHE"

"$WALFILL_ROOT/scripts/deps.sh"
"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
version="$(pg_psql -d postgres -At -c "SELECT split_part(current_setting('server_version'), ' ', 1)")"

# The suite's SQL, from the Debian source package of this server.
regress="$SRC_CACHE/postgresql-$version/src/test/regress"
if [ ! -f "$regress/parallel_schedule" ]; then
  command -v dpkg-source >/dev/null || {
    log "installing dpkg-dev (to unpack the source package)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends dpkg-dev >/dev/null
  }
  codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  apt_dir="$SRC_CACHE/apt"
  mkdir -p "$apt_dir/lists/partial" "$SRC_CACHE/dl"
  echo "deb-src http://deb.debian.org/debian $codename main" >"$apt_dir/sources.list"
  apt_opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt_dir/lists")
  log "fetching the source package postgresql-15 ($codename)"
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$SRC_CACHE/dl" && apt-get "${apt_opts[@]}" source --download-only postgresql-15 >/dev/null 2>&1)
  orig="$(ls "$SRC_CACHE"/dl/postgresql-15_*.orig.tar.* | head -1)"
  [ -n "$orig" ] || die "the source package postgresql-15 could not be downloaded"
  got="$(basename "$orig" | sed -E 's/postgresql-15_([0-9.]+)\.orig.*/\1/')"
  [ "$got" = "$version" ] || log "note: the source package is $got, the server $version"
  tar -xf "$orig" -C "$SRC_CACHE" "postgresql-$got/src/test/regress"
  regress="$SRC_CACHE/postgresql-$got/src/test/regress"
fi

if [ -n "${WALFILL_BIN:-}" ]; then
  WALFILL="$WALFILL_BIN"
else
  log "building walfill (release)"
  cargo build --quiet --release --bin walfill
  WALFILL="$WALFILL_ROOT/target/release/walfill"
fi

fresh_bench_db "$DB"
pg_psql -d postgres -q -c "ALTER DATABASE $DB SET lc_messages = 'C'" >/dev/null
url="$(pg_url "$DB")"
cat >"$OUT/walfill.toml" <<TOML
[source]
url = "$url"

[archive]
url = "file://$WALFILL_PG_ARCHIVE"
TOML
log "installing the catalog journal (walfill setup)"
WALFILL_CONFIG="$OUT/walfill.toml" "$WALFILL" setup >/dev/null
pg_psql -d "$DB" -q -c "SELECT pg_create_logical_replication_slot('$SLOT', 'test_decoding')" >/dev/null
cleanup_slot() {
  pg_psql -d "$DB" -q -c "SELECT pg_drop_replication_slot('$SLOT')" >/dev/null 2>&1 || true
  drop_bench_db "$DB"
}
[ -n "${KEEP:-}" ] || trap cleanup_slot EXIT
from="$(pg_psql -d "$DB" -At -c "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$SLOT'")"

# The schedule's files in order, each run in a session of its own as
# pg_regress would, with the variables its files read.
mapfile -t tests < <(sed -n 's/^test: //p' "$regress/parallel_schedule" | tr ' ' '\n' | sed '/^$/d')
[ "$limit" -gt 0 ] && tests=("${tests[@]:0:$limit}")
mkdir -p "$OUT/results" "$OUT/testtablespace"
# The suite's server-side COPY and large-object files land in results/, and
# its tablespace in testtablespace/: both the server's to write.
[ "$(id -u)" != 0 ] || chown -R postgres:postgres "$OUT"
export PG_ABS_SRCDIR="$regress" PG_ABS_BUILDDIR="$OUT" PG_LIBDIR="$OUT" PG_DLSUFFIX=".so"
export PGPASSWORD="$WALFILL_PG_PASSWORD" PGTZ=PST8PDT PGDATESTYLE="Postgres, MDY"
# run_suite DB DIR: runs the files in database DB, outputs into DIR.
run_suite() {
  local t
  for t in "${tests[@]}"; do
    [ -f "$regress/sql/$t.sql" ] || continue
    psql -X -q -h 127.0.0.1 -p "$WALFILL_PG_PORT" -U "$WALFILL_PG_SUPERUSER" -d "$1" \
      -v HIDE_TABLEAM=on -v HIDE_TOAST_COMPRESSION=on \
      -f "$regress/sql/$t.sql" >"$2/$t.out" 2>&1 || true
  done
}
log "running ${#tests[@]} files of the regression suite"
started=$SECONDS
run_suite "$DB" "$OUT/results"
log "suite done in $((SECONDS - started)) s"
# CLUSTER and VACUUM FULL moved tables' files without a journal message:
# any walfill command that connects to the source journals them.
log "letting walfill journal the tables whose files moved (walfill setup)"
WALFILL_CONFIG="$OUT/walfill.toml" "$WALFILL" setup >"$OUT/setup-after.out" 2>&1 ||
  log "walfill setup after the suite failed (see $OUT/setup-after.out)"
# The slot's output is read with default settings (as walfill prints):
# the suite's DateStyle and time zone were its own.
unset PGTZ PGDATESTYLE

to="$(pg_psql -d "$DB" -At -c "SELECT pg_current_wal_lsn()")"
log "reading the slot's changes up to $to"
# (Not COPY: its text format would escape backslashes.)
pg_psql -d "$DB" -At -o "$OUT/slot.txt" \
  -c "SELECT data FROM pg_logical_slot_peek_changes('$SLOT', '$to', NULL)"
segment="$(pg_psql -d "$DB" -At -c "SELECT pg_walfile_name(pg_switch_wal())")"
until [ "$(pg_psql -d postgres -At -c "SELECT coalesce(last_archived_wal >= '$segment', false) FROM pg_stat_archiver")" = t ]; do
  sleep 0.2
done
wal_mb="$(pg_psql -d postgres -At -c "SELECT round(('$to'::pg_lsn - '$from'::pg_lsn) / 1048576.0)")"
log "decoding $wal_mb MiB of WAL with walfill"
WALFILL_CONFIG="$OUT/walfill.toml" "$WALFILL" decode --from "$from" --to "$to" \
  --format test_decoding --source "$url" >"$OUT/walfill.txt" 2>"$OUT/walfill.err" || true
grep -c "^warning" "$OUT/walfill.err" >/dev/null && grep "^warning" "$OUT/walfill.err" | sort | uniq -c | sort -rn | head -5 || true

# Change lines, numbered within their table: identical tables have the
# same lines in the same order.
by_table() {
  awk '/^table / { t = substr($0, 7); t = substr(t, 1, index(t, ": ") - 1); n[t]++;
                   print t "\t" n[t] "\t" $0 }' "$1" | LC_ALL=C sort
}
by_table "$OUT/slot.txt" >"$OUT/slot.tsv"
by_table "$OUT/walfill.txt" >"$OUT/walfill.tsv"
LC_ALL=C comm -3 "$OUT/slot.tsv" "$OUT/walfill.tsv" | sed 's/^\t//' | cut -f1 | LC_ALL=C sort -u \
  >"$OUT/differing.txt"
all_tables="$(cat "$OUT/slot.tsv" "$OUT/walfill.tsv" | cut -f1 | LC_ALL=C sort -u | wc -l)"
differing="$(wc -l <"$OUT/differing.txt")"
slot_lines="$(wc -l <"$OUT/slot.tsv")"
same_lines="$(LC_ALL=C comm -12 "$OUT/slot.tsv" "$OUT/walfill.tsv" | wc -l)"
echo "regress-oracle: ${#tests[@]} files, $wal_mb MiB of WAL"
echo "regress-oracle: tables with identical change lines: $((all_tables - differing)) of $all_tables"
echo "regress-oracle: change lines identical: $same_lines of $slot_lines the slot printed"
echo "regress-oracle: differing tables: $OUT/differing.txt"

# Tables with a column whose text needs the catalog at the time (an OID's
# name): walfill prints the number, test_decoding the name.
grep -E '\[(reg[a-z]+|aclitem)(\[\])?\]:' "$OUT/slot.txt" |
  sed -E 's/^table ([^:]+): .*/\1/' | LC_ALL=C sort -u >"$OUT/needs-catalog.txt"
LC_ALL=C comm -23 "$OUT/differing.txt" "$OUT/needs-catalog.txt" >"$OUT/unexplained.txt"
echo "regress-oracle: differing tables whose columns need the catalog (reg*, aclitem): $(LC_ALL=C comm -12 "$OUT/differing.txt" "$OUT/needs-catalog.txt" | wc -l)"
echo "regress-oracle: other differing tables: $(wc -l <"$OUT/unexplained.txt")"
failed=""
if [ -n "$check" ] && [ -s "$OUT/unexplained.txt" ]; then
  echo "regress-oracle: these tables differ from test_decoding:" >&2
  head -20 "$OUT/unexplained.txt" >&2
  failed=1
fi

# The same files in a database without the journal: every statement's
# errors (by file and line; numbers, which hold OIDs, and the database's
# name left out) must be the same.
if [ -n "$outcomes" ]; then
  PLAIN=walfill_regress_plain
  fresh_bench_db "$PLAIN"
  [ -n "${KEEP:-}" ] || trap 'cleanup_slot; drop_bench_db '"$PLAIN" EXIT
  pg_psql -d postgres -q -c "ALTER DATABASE $PLAIN SET lc_messages = 'C'" >/dev/null
  mkdir -p "$OUT/results-plain"
  log "running the files again in a database without the journal"
  export PGTZ=PST8PDT PGDATESTYLE="Postgres, MDY"
  run_suite "$PLAIN" "$OUT/results-plain"
  unset PGTZ PGDATESTYLE
  errors() {
    sed -n -E 's/^psql:[^:]*:([0-9]+): (ERROR|FATAL|PANIC): +(.*)$/\1 \2 \3/p' "$1" |
      sed -E "s/$DB|$PLAIN/DB/g; s/[0-9]+/N/g"
  }
  : >"$OUT/outcomes.txt"
  for t in "${tests[@]}"; do
    [ -f "$OUT/results/$t.out" ] || continue
    if ! diff <(errors "$OUT/results/$t.out") <(errors "$OUT/results-plain/$t.out") \
      >"$OUT/outcome-$t.diff"; then
      echo "$t" >>"$OUT/outcomes.txt"
    else
      rm -f "$OUT/outcome-$t.diff"
    fi
  done
  statements="$(cat "$OUT"/results/*.out | grep -c -E '^psql:[^:]*:[0-9]+: ERROR' || true)"
  echo "regress-oracle: files whose statements' errors differ without the journal: $(wc -l <"$OUT/outcomes.txt") ($statements errors with it)"
  if [ -s "$OUT/outcomes.txt" ]; then
    for t in $(cat "$OUT/outcomes.txt"); do
      echo "--- $t (< with the journal, > without)" >&2
      head -10 "$OUT/outcome-$t.diff" >&2
    done
    [ -n "$check" ] && failed=1
  fi
fi
[ -z "$failed" ] || exit 1
