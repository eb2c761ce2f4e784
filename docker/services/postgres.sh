#!/usr/bin/env bash
# PostgreSQL in the foreground (exec: the caller stops it by this script's pid), the
# backend store of the MLflow server. Used as is by docker-compose.yml and by
# tests/stack.py (CI without Docker).
#
#   PGDATA             data directory; created and initialised on first start (required)
#   PGPORT             TCP port (default 5432)
#   PG_LISTEN          listen_addresses (default 127.0.0.1; 0.0.0.0 inside a container)
#   POSTGRES_USER      superuser and owner of the database (default mlflow)
#   POSTGRES_PASSWORD  password of that user (default: none, host connections trusted;
#                      set it whenever the port is reachable from another machine)
#   POSTGRES_DB        database created on first start (default mlflow)
#   PG_BIN             directory of initdb/postgres (default: newest /usr/lib/postgresql/*/bin)
#   PG_RUN_AS          unprivileged user to run as when started as root (default postgres)
set -euo pipefail
cd /  # the unprivileged user may not be able to enter the caller's directory

: "${PGDATA:?set PGDATA to the data directory}"
export PGDATA
export PGPORT="${PGPORT:-5432}"
PG_LISTEN="${PG_LISTEN:-127.0.0.1}"
POSTGRES_USER="${POSTGRES_USER:-mlflow}"
POSTGRES_DB="${POSTGRES_DB:-mlflow}"
PG_RUN_AS="${PG_RUN_AS:-postgres}"

if [[ -z "${PG_BIN:-}" ]]; then
    # Debian keeps the server binaries out of PATH, one directory per major version
    PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    [[ -n "$PG_BIN" ]] || PG_BIN="$(dirname "$(command -v postgres 2>/dev/null || echo /nonexistent/x)")"
fi
if [[ ! -x "$PG_BIN/postgres" || ! -x "$PG_BIN/initdb" ]]; then
    echo "postgres.sh: no PostgreSQL server binaries in '$PG_BIN' (apt-get install postgresql, or set PG_BIN)" >&2
    exit 127
fi

# PostgreSQL refuses to run as root: hand the data directory to an unprivileged user and
# run initdb/postgres as that user. setpriv execs in place, so the pid stays the same.
as_pg=()
if [[ "$(id -u)" == 0 ]]; then
    mkdir -p "$PGDATA"
    chown "$PG_RUN_AS:" "$PGDATA"
    as_pg=(setpriv --reuid="$PG_RUN_AS" --regid="$(id -g "$PG_RUN_AS")" --init-groups)
fi
chmod 700 "$PGDATA" 2>/dev/null || true

if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
    pwfile=""
    auth=(--auth-local=trust --auth-host=trust)
    if [[ -n "${POSTGRES_PASSWORD:-}" ]]; then
        pwfile="$(mktemp)"
        printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
        auth=(--auth-local=trust --auth-host=scram-sha-256 --pwfile="$pwfile")
    fi
    if [[ -n "$pwfile" && ${#as_pg[@]} -gt 0 ]]; then chown "$PG_RUN_AS:" "$pwfile"; fi
    log="$(mktemp)"
    "${as_pg[@]}" "$PG_BIN/initdb" -D "$PGDATA" --username="$POSTGRES_USER" --encoding=UTF8 \
        --locale=C.UTF-8 "${auth[@]}" > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
    rm -f "$log"
    [[ -z "$pwfile" ]] || rm -f "$pwfile"
    # initdb's pg_hba.conf only admits loopback; a container's peers come from elsewhere
    if [[ "$PG_LISTEN" != 127.0.0.1 && "$PG_LISTEN" != localhost ]]; then
        method=trust; [[ -z "${POSTGRES_PASSWORD:-}" ]] || method=scram-sha-256
        echo "host all all all $method" | "${as_pg[@]}" tee -a "$PGDATA/pg_hba.conf" > /dev/null
    fi
    # single-user mode creates the database without opening any port
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
        | "${as_pg[@]}" "$PG_BIN/postgres" --single -D "$PGDATA" template1 > /dev/null
fi

# TCP only (no Unix socket: its default directory may not exist or be writable here)
exec "${as_pg[@]}" "$PG_BIN/postgres" -D "$PGDATA" -p "$PGPORT" -c listen_addresses="$PG_LISTEN" \
    -c unix_socket_directories= -c max_connections=50
