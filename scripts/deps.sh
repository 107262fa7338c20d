#!/usr/bin/env bash
# Installs what building and testing walfill needs and a fresh Debian machine may
# lack: PostgreSQL 15 server binaries with test_decoding, psql, and a C toolchain
# with cmake for the TLS crate, zstd, and GNU time for the benchmarks' memory
# figures; and for the tests of other tools' archive layouts, the compressors
# those tools use (gzip, lz4, bzip2, brotli, xz) and pgBackRest; and npm, which
# fetches the servers of PostgreSQL 16-18 (scripts/pg-dist.sh). Does nothing
# when everything is present.
. "$(dirname "$0")/lib.sh"

missing=()
pg_bindir >/dev/null || missing+=(postgresql-15 postgresql-contrib)
command -v psql >/dev/null || missing+=(postgresql-client-15)
command -v cc >/dev/null || missing+=(gcc)
command -v cmake >/dev/null || missing+=(cmake)
command -v zstd >/dev/null || missing+=(zstd)
command -v gzip >/dev/null || missing+=(gzip)
command -v lz4 >/dev/null || missing+=(lz4)
command -v bzip2 >/dev/null || missing+=(bzip2)
command -v brotli >/dev/null || missing+=(brotli)
command -v xz >/dev/null || missing+=(xz-utils)
command -v pgbackrest >/dev/null || missing+=(pgbackrest)
command -v runuser >/dev/null || missing+=(util-linux)
[ -x /usr/bin/time ] || missing+=(time)
command -v npm >/dev/null || missing+=(npm)

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian package may start its own cluster on 5432; ours never uses it.
pg_bindir >/dev/null || die "PostgreSQL 15 binaries not found after install (set WALFILL_PG_BINDIR)"
