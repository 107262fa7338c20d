#!/usr/bin/env bash
# Starts what the integration tests need (the private PostgreSQL clusters
# and the S3 test server) and prints the environment they read, so callers
# can do
#   eval "$(scripts/test-env.sh)"
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

primary="$("$WALFILL_ROOT/scripts/pg-up.sh")"
replica="$(WALFILL_PG_HOME="$WALFILL_PG_HOME-replica" \
  WALFILL_PG_PORT=$((WALFILL_PG_PORT + 1)) WALFILL_PG_WAL_LEVEL=replica \
  "$WALFILL_ROOT/scripts/pg-up.sh")"
echo "export WALFILL_TEST_PG_URL='$primary'"
echo "export WALFILL_TEST_PG_REPLICA_URL='$replica'"
echo "export WALFILL_TEST_ARCHIVE_URL='file://$WALFILL_PG_ARCHIVE'"
# A local S3-compatible server for the tests of S3 archives.
"$WALFILL_ROOT/scripts/s3-up.sh"
