#!/usr/bin/env bash
# Starts a local S3-compatible server for the tests of archives on S3: moto's
# standalone server (PyPI `moto[server]`), on loopback only, objects in memory,
# with one bucket. moto is pure Python, installs from PyPI with pip alone (no
# binary download, no container) and implements the S3 calls walfill makes
# (put, get, ranged get, list with start-after, delete).
#
# Idempotent: installs moto when missing (into a virtualenv beside the server's
# log when the system Python cannot import it), starts the server if nothing
# answers on its port, creates the bucket if it is not there.
#
# Prints nothing on stdout but the environment the tests need, so callers can do
#   eval "$(scripts/s3-up.sh)"
#
# Settings (environment):
#   WALFILL_S3_HOME    where the server's log, pid file and virtualenv live (default .pg-s3)
#   WALFILL_S3_PORT    its TCP port on 127.0.0.1 (default 54390)
#   WALFILL_S3_BUCKET  the bucket to create (default walfill-test)
. "$(dirname "$0")/lib.sh"

WALFILL_S3_HOME="${WALFILL_S3_HOME:-$WALFILL_ROOT/.pg-s3}"
WALFILL_S3_PORT="${WALFILL_S3_PORT:-54390}"
WALFILL_S3_BUCKET="${WALFILL_S3_BUCKET:-walfill-test}"
ENDPOINT="http://127.0.0.1:$WALFILL_S3_PORT"
VENV="$WALFILL_S3_HOME/venv"

mkdir -p "$WALFILL_S3_HOME"

# A Python that can run moto's server, installing it if needed.
moto_python() {
  local py
  for py in python3 "$VENV/bin/python"; do
    if command -v "$py" >/dev/null && "$py" -c 'import moto.server' >/dev/null 2>&1; then
      command -v "$py"
      return 0
    fi
  done
  if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    log "installing python3 and venv"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
  fi
  log "installing moto[server] into $VENV"
  python3 -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'moto[server]' >&2
  "$VENV/bin/python" -c 'import moto.server' || die "moto's server cannot be imported after install"
  echo "$VENV/bin/python"
}

# Sends one unsigned request to the server; prints the HTTP status (000 when
# nothing answers). moto's server does not check signatures.
s3_request() {
  "$PY" - "$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
try:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
PY
}

PY="$(moto_python)"

if [ "$(s3_request GET "$ENDPOINT/")" = 000 ]; then
  log "starting moto S3 server on 127.0.0.1:$WALFILL_S3_PORT (log: $WALFILL_S3_HOME/server.log)"
  nohup "$PY" -m moto.server -H 127.0.0.1 -p "$WALFILL_S3_PORT" \
    >"$WALFILL_S3_HOME/server.log" 2>&1 </dev/null &
  echo $! >"$WALFILL_S3_HOME/server.pid"
  for _ in $(seq 1 100); do
    [ "$(s3_request GET "$ENDPOINT/")" != 000 ] && break
    kill -0 "$(cat "$WALFILL_S3_HOME/server.pid")" 2>/dev/null ||
      { tail -n 20 "$WALFILL_S3_HOME/server.log" >&2; die "the S3 server exited"; }
    sleep 0.2
  done
  [ "$(s3_request GET "$ENDPOINT/")" != 000 ] ||
    { tail -n 20 "$WALFILL_S3_HOME/server.log" >&2; die "the S3 server does not answer"; }
fi

status="$(s3_request HEAD "$ENDPOINT/$WALFILL_S3_BUCKET")"
if [ "$status" != 200 ]; then
  status="$(s3_request PUT "$ENDPOINT/$WALFILL_S3_BUCKET")"
  [ "$status" = 200 ] || die "creating bucket $WALFILL_S3_BUCKET failed (HTTP $status)"
fi

cat <<ENV
export AWS_ENDPOINT_URL=$ENDPOINT
export AWS_ENDPOINT=$ENDPOINT
export AWS_ACCESS_KEY_ID=walfill-test
export AWS_SECRET_ACCESS_KEY=walfill-test-secret
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export WALFILL_TEST_S3_BUCKET=$WALFILL_S3_BUCKET
ENV
