#!/usr/bin/env bash
# A throw-away PostgreSQL server for the backend tests (tests/test_backends.py).
#
#   eval "$(bash .ci/postgres.sh start)"   # prints `export DPSQL_TEST_POSTGRES_URL=...` lines
#   bash .ci/postgres.sh stop              # stops the server and removes its data
#
# `start` initdb's a cluster in $DPSQL_PG_DIR (default: a fresh directory under /tmp),
# starts it on 127.0.0.1 on a free port (never on a public address), and creates:
#   * database `dpsql_test`, owned by role `dpsql_owner` (loads the test tables), and
#   * role `dpsql_reader`: the least-privilege role dpsql connects as — it may CONNECT and
#     SELECT, nothing else, and every session of it is READ ONLY by default.
# It prints two URLs for SQLAlchemy (psycopg 3): DPSQL_TEST_POSTGRES_URL (reader) and
# DPSQL_TEST_POSTGRES_ADMIN_URL (owner). Everything else goes to stderr. Run as root it
# runs the server as the `postgres` user; otherwise as the current user. If the
# PostgreSQL server binaries are missing and we are root, it installs Debian's package.
set -euo pipefail

STATE=${DPSQL_PG_STATE:-/tmp/dpsql-pg.state}
log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
    local dir
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
        return 0
    fi
    if command -v pg_config >/dev/null 2>&1; then
        dir=$(pg_config --bindir)
        if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
    fi
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
    done
    return 1
}

as_server_user() {  # runs a command as the user that owns the cluster
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local bindir dir port owner_pw reader_pw super_pw psql
    if ! bindir=$(find_bindir); then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            log "installing PostgreSQL (apt-get install postgresql)"
            apt-get install -y -q postgresql >&2 || { apt-get update -q >&2 &&
                apt-get install -y -q postgresql >&2; }
            bindir=$(find_bindir)
        else
            log "PostgreSQL server binaries (initdb, pg_ctl) not found"
            return 1
        fi
    fi
    if [ -f "$STATE" ]; then stop; fi
    dir=${DPSQL_PG_DIR:-$(mktemp -d /tmp/dpsql-pg.XXXXXX)}
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    port=$(free_port)
    super_pw=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    owner_pw=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    reader_pw=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    printf '%s\n' "$super_pw" > "$dir/.pwfile"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/.pwfile"; fi
    as_server_user "$bindir/initdb" -D "$dir/data" -U postgres --pwfile="$dir/.pwfile" \
        --auth-local=scram-sha-256 --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
    rm -f "$dir/.pwfile"
    # Loopback only, a private socket directory, small footprint, fast (unsafe) commits.
    as_server_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off \
            -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB" \
        >&2 || { cat "$dir/server.log" >&2; return 1; }
    printf 'DIR=%q\nBINDIR=%q\n' "$dir" "$bindir" > "$STATE"
    psql=$bindir/psql
    [ -x "$psql" ] || psql=$(command -v psql)
    PGPASSWORD=$super_pw "$psql" -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" \
        -U postgres -d postgres >&2 <<SQL
CREATE ROLE dpsql_owner LOGIN PASSWORD '$owner_pw';
CREATE ROLE dpsql_reader LOGIN PASSWORD '$reader_pw'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS;
ALTER ROLE dpsql_reader SET default_transaction_read_only = on;
ALTER ROLE dpsql_reader SET statement_timeout = '10min';
CREATE DATABASE dpsql_test OWNER dpsql_owner;
REVOKE ALL ON DATABASE dpsql_test FROM PUBLIC;
GRANT CONNECT ON DATABASE dpsql_test TO dpsql_owner, dpsql_reader;
\c dpsql_test
REVOKE ALL ON SCHEMA public FROM PUBLIC;
ALTER SCHEMA public OWNER TO dpsql_owner;
GRANT USAGE ON SCHEMA public TO dpsql_reader;
-- tables the owner creates later are readable by the reader, and only readable
ALTER DEFAULT PRIVILEGES FOR ROLE dpsql_owner IN SCHEMA public GRANT SELECT ON TABLES
    TO dpsql_reader;
SQL
    echo "export DPSQL_TEST_POSTGRES_URL='postgresql+psycopg://dpsql_reader:$reader_pw@127.0.0.1:$port/dpsql_test'"
    echo "export DPSQL_TEST_POSTGRES_ADMIN_URL='postgresql+psycopg://dpsql_owner:$owner_pw@127.0.0.1:$port/dpsql_test'"
    log "PostgreSQL running on 127.0.0.1:$port (data in $dir)"
}

stop() {
    [ -f "$STATE" ] || { log "no server to stop"; return 0; }
    local DIR BINDIR
    # shellcheck disable=SC1090
    . "$STATE"
    as_server_user "$BINDIR/pg_ctl" -D "$DIR/data" -m fast -w stop >&2 || true
    rm -rf "$DIR" "$STATE"
    log "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
