#!/usr/bin/env bash
# Starts what the integration tests need (the private PostgreSQL clusters:
# PostgreSQL 15 with wal_level=logical and with replica, and one each of
# the newer majors in WALFILL_TEST_PG_MAJORS, default "16 17 18"; and the
# S3 test server) and prints the environment they read, so callers
# can do
#   eval "$(scripts/test-env.sh)"

# Small WAL segments: the tests switch segments often, and every switch
# archives a whole segment, so 16 MiB ones make a full run's archives
# several GiB. Small ones also make records cross segment boundaries more
# often. (A cluster keeps the size it was created with.)
export WALFILL_PG_SEGSIZE="${WALFILL_PG_SEGSIZE:-4}"

. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

primary="$("$WALFILL_ROOT/scripts/pg-up.sh")"
replica="$(WALFILL_PG_HOME="$WALFILL_PG_HOME-replica" \
  WALFILL_PG_PORT=$((WALFILL_PG_PORT + 1)) WALFILL_PG_WAL_LEVEL=replica \
  "$WALFILL_ROOT/scripts/pg-up.sh")"
echo "export WALFILL_TEST_PG_URL='$primary'"
echo "export WALFILL_TEST_PG_REPLICA_URL='$replica'"
echo "export WALFILL_TEST_ARCHIVE_URL='file://$WALFILL_PG_ARCHIVE'"
# One cluster of each newer major version (server binaries from npm:
# scripts/pg-dist.sh), on the ports after the replica's, each archiving
# into its own directory.
port=$((WALFILL_PG_PORT + 2))
for major in ${WALFILL_TEST_PG_MAJORS-16 17 18}; do
  home="$WALFILL_PG_HOME-$major"
  url="$(WALFILL_PG_BINDIR="$("$WALFILL_ROOT/scripts/pg-dist.sh" "$major")" \
    WALFILL_PG_HOME="$home" WALFILL_PG_PORT="$port" "$WALFILL_ROOT/scripts/pg-up.sh")"
  echo "export WALFILL_TEST_PG${major}_URL='$url'"
  echo "export WALFILL_TEST_PG${major}_ARCHIVE_URL='file://$home/archive'"
  port=$((port + 1))
done
echo "export WALFILL_TEST_PG_MAJORS='${WALFILL_TEST_PG_MAJORS-16 17 18}'"
# A local S3-compatible server for the tests of S3 archives.
"$WALFILL_ROOT/scripts/s3-up.sh"
