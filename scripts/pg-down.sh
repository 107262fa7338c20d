#!/usr/bin/env bash
# Stops the private PostgreSQL cluster. With --purge, also deletes its data,
# WAL archive and logs.
. "$(dirname "$0")/lib.sh"

if BIN="$(pg_bindir)" && [ -s "$WALFILL_PG_DATA/PG_VERSION" ]; then
  as_pg_owner "$BIN/pg_ctl" -D "$WALFILL_PG_DATA" -m fast -w stop >/dev/null 2>&1 || true
fi
if [ "${1:-}" = "--purge" ]; then
  rm -rf "$WALFILL_PG_HOME"
  log "removed $WALFILL_PG_HOME"
fi
