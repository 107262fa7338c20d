#!/usr/bin/env bash
# Checks the status page of `walfill serve` in a real browser: Debian's
# Chromium, headless (installed when missing). During a slow snapshot
# backfill, the page is loaded twice, a few seconds apart; each load must
# show the target, its version in phase "copying", a progress figure, the
# plot of the fill's rows/s and the target's schedule with its next due
# time, and both the figure and the plot's points must move between the
# loads. The second load is kept as a screenshot:
# target/page-check/status-page.png (and the DOM beside it).
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

if ! command -v chromium >/dev/null; then
  log "installing chromium"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
if ! command -v curl >/dev/null; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get install -y -qq --no-install-recommends curl >/dev/null
fi
"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
cargo build --quiet --bin walfill
WALFILL="$WALFILL_ROOT/target/debug/walfill"
OUT="$WALFILL_ROOT/target/page-check"
rm -rf "$OUT"; mkdir -p "$OUT"
DB=walfill_page_check
fresh_bench_db "$DB"
pg_psql -d "$DB" <<SQL
CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, total_cents bigint NOT NULL);
INSERT INTO orders SELECT g, 'open', g * 7 FROM generate_series(1, 100000) g;
ANALYZE orders;
SQL
PORT="${WALFILL_PAGE_PORT:-$((WALFILL_PG_PORT + 900))}"
cat >"$OUT/walfill.toml" <<TOML
[source]
url = "$(pg_url "$DB")"

[backfill]
chunk_rows = 500
max_rows_per_second = 4000

[serve]
listen = "127.0.0.1:$PORT"
archiver = false
poll_seconds = 1

[[target]]
name = "orders_summary"
source = "public.orders"
select = "id, upper(status) AS status, total_cents / 100.0 AS total"
version = "v1"
schema = "derived"
schedule = "0 3 * * *"
TOML
export WALFILL_CONFIG="$OUT/walfill.toml"
"$WALFILL" setup >/dev/null
"$WALFILL" serve 2>"$OUT/serve.log" &
SERVE=$!
# shellcheck disable=SC2064
trap "kill $SERVE 2>/dev/null || true; drop_bench_db $DB" EXIT

# The service builds v1 as soon as it starts (the configured version).
for _ in $(seq 1 100); do
  [ "$(pg_psql -d "$DB" -At -c "SELECT coalesce((SELECT rows_copied > 2000 FROM walfill.versions WHERE version = 'v1'), false)")" = t ] && break
  sleep 0.2
done

# The plots take a point every 5 s: wait for the fill's first rate.
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/history" | grep -q '"kind":"fill_rate","label":"orders_summary/v1","points":\[\[' && break
  sleep 0.2
done
browse() {
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --virtual-time-budget=3000 --window-size=1280,720 "$@" "http://127.0.0.1:$PORT/" 2>/dev/null
}
figure() {
  # The progress figure of orders_summary's v1 row: "N / M rows".
  grep -o 'data-target="orders_summary" data-version="v1">.*' "$1" \
    | grep -o 'class="progress-figure">[0-9]* / [0-9]* rows' | head -1 | grep -o '[0-9]* /' | tr -d ' /'
}
plotted() {
  # How many points the plot of orders_summary's v1 fill rate has.
  grep -o 'data-kind="fill_rate" data-label="orders_summary/v1" data-points="[0-9]*"' "$1" \
    | grep -o '[0-9]*"$' | tr -d '"'
}
browse --dump-dom >"$OUT/first.html"
sleep 6
browse --dump-dom >"$OUT/second.html"
(cd "$OUT" && browse --screenshot="$OUT/status-page.png") >/dev/null
for load in first second; do
  grep -q 'data-target="orders_summary"' "$OUT/$load.html" || die "the $load load does not show the target (see $OUT/$load.html)"
  grep -q 'class="phase">copying<' "$OUT/$load.html" || die "the $load load does not show phase copying (see $OUT/$load.html)"
  grep -Eq 'id="updated">updated [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC<' "$OUT/$load.html" \
    || die "the $load load does not say when it was updated, in UTC (see $OUT/$load.html)"
  grep -Eq '<td>orders_summary</td><td>0 3 \* \* \* \(UTC\)</td><td>[0-9]{4}-[0-9]{2}-[0-9]{2} 03:00:00 UTC</td>' "$OUT/$load.html" \
    || die "the $load load does not show the schedule's next due time (see $OUT/$load.html)"
done
points1=$(plotted "$OUT/first.html"); points2=$(plotted "$OUT/second.html")
[ -n "$points1" ] && [ -n "$points2" ] || die "no plot of the fill's rate on the page (see $OUT/*.html)"
[ "$points2" -gt "$points1" ] || die "the plot's points did not move: $points1 then $points2 points"
first=$(figure "$OUT/first.html"); second=$(figure "$OUT/second.html")
[ -n "$first" ] && [ -n "$second" ] || die "no progress figure on the page (see $OUT/*.html)"
[ "$second" -gt "$first" ] || die "the progress figure did not move: $first then $second rows"
[ -s "$OUT/status-page.png" ] || die "no screenshot"
log "the status page shows orders_summary v1 copying, $first then $second rows, its rate plotted with $points1 then $points2 points; screenshot: $OUT/status-page.png"
kill -TERM "$SERVE"; wait "$SERVE" || die "walfill serve did not stop cleanly (see $OUT/serve.log)"
