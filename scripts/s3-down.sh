#!/usr/bin/env bash
# Stops the local S3 server started by scripts/s3-up.sh (its objects are in
# memory and go with it). With --purge, also deletes its log and virtualenv.
. "$(dirname "$0")/lib.sh"

WALFILL_S3_HOME="${WALFILL_S3_HOME:-$WALFILL_ROOT/.pg-s3}"
PID_FILE="$WALFILL_S3_HOME/server.pid"

if [ -s "$PID_FILE" ]; then
  pid="$(cat "$PID_FILE")"
  # Only the process this script family started, and only if it is still moto.
  if kill -0 "$pid" 2>/dev/null && grep -q moto "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$PID_FILE"
fi
if [ "${1:-}" = "--purge" ]; then
  rm -rf "$WALFILL_S3_HOME"
  log "removed $WALFILL_S3_HOME"
fi
