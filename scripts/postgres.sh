#!/usr/bin/env bash
# A PostgreSQL server for Weir's connector tests: Debian's `postgresql` package, a cluster made
# by `initdb` in a directory of its own, served on 127.0.0.1 with what change-data-capture and
# two-phase commit need (wal_level=logical, prepared transactions, replication slots and WAL
# senders). Clients log in as `weir` with a password (SCRAM), over TCP only.
#
# Usage: scripts/postgres.sh install|start|stop|restart|status|url
#
#   install  apt-get installs Debian's postgresql package if missing
#   start    initdb on the first start (a free port is chosen then and kept), starts the server,
#            waits until it accepts connections and prints its URL,
#            postgres://weir:weir@127.0.0.1:PORT/weir
#   stop     stops the server at once, like a crash (`pg_ctl stop -m immediate`; the data stays)
#   restart  stop, then start on the same port with the same data
#   status   exits 0 if the server accepts connections, 1 otherwise
#   url      prints the URL
#
# State (the cluster, its log and port) lives in $WEIR_PG_DIR, which must be set: the tests get
# it from scripts/test.sh, which also exports WEIR_TEST_PG (the URL) for them. The server runs
# as the `postgres` user (PostgreSQL refuses to run as root), so $WEIR_PG_DIR is given to it.
set -euo pipefail

HOST=127.0.0.1
USER_NAME=weir
PASSWORD=weir
DATABASE=weir

die() {
  echo "postgres.sh: $*" >&2
  exit 1
}

bin_dir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] || return 1
  echo "$dir"
}

install() {
  bin_dir >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "installing postgresql (Debian) needs root"
  echo "postgres.sh: installing postgresql (Debian)" >&2
  # The package's own cluster is not used (the tests make theirs with initdb): the install
  # starts no service (policy-rc.d says no), so nothing else listens or runs.
  local policy_added=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  "$(dirname "$0")/apt-update.sh"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  [ -z "$policy_added" ] || rm -f /usr/sbin/policy-rc.d
  bin_dir >/dev/null || die "apt-get install postgresql did not provide initdb"
}

# Runs a command as the server's user (root runs it through runuser).
as_server_user() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

state_dir() {
  [ -n "${WEIR_PG_DIR:-}" ] || die "set WEIR_PG_DIR to a directory for the server's state"
  mkdir -p "$WEIR_PG_DIR"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$WEIR_PG_DIR"
  fi
  echo "$WEIR_PG_DIR"
}

port() {
  local dir
  dir=$(state_dir)
  if [ ! -s "$dir/port" ]; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' >"$dir/port"
  fi
  cat "$dir/port"
}

url() {
  echo "postgres://$USER_NAME:$PASSWORD@$HOST:$(port)/$DATABASE"
}

answers() {
  local bin
  bin=$(bin_dir) || return 1
  "$bin/pg_isready" -q -h "$HOST" -p "$(port)" -t 1
}

init_cluster() {
  local dir=$1 bin=$2
  as_server_user "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --no-sync -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  }
  # TCP with a password for everyone, replication included; the socket (in $dir) is for setup.
  cat >"$dir/data/pg_hba.conf" <<HBA
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
HBA
  touch "$dir/.initialised"
}

server_options() {
  local dir=$1
  echo "-c listen_addresses=$HOST -c port=$(port) -c unix_socket_directories=$dir \
-c wal_level=logical -c max_prepared_transactions=64 -c max_replication_slots=32 \
-c max_wal_senders=32 -c max_connections=200 -c fsync=on -c synchronous_commit=on \
-c wal_sender_timeout=60s -c logging_collector=off"
}

start() {
  install
  local dir bin
  dir=$(state_dir)
  bin=$(bin_dir)
  if answers; then
    url
    return
  fi
  [ -f "$dir/.initialised" ] || init_cluster "$dir" "$bin"
  as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "$(server_options "$dir")" start >/dev/null ||
    {
      tail -n 30 "$dir/server.log" >&2
      die "the server did not start (log above, full log in $dir/server.log)"
    }
  if [ ! -f "$dir/.user" ]; then
    as_server_user "$bin/psql" -q -h "$dir" -p "$(port)" -U postgres -d postgres -v ON_ERROR_STOP=1 <<SQL >/dev/null
CREATE ROLE $USER_NAME LOGIN REPLICATION SUPERUSER PASSWORD '$PASSWORD';
CREATE DATABASE $DATABASE OWNER $USER_NAME;
SQL
    touch "$dir/.user"
  fi
  url
}

# An immediate stop, like a crash: the server recovers from its WAL on the next start.
stop() {
  local dir bin
  dir=$(state_dir)
  bin=$(bin_dir) || return 0
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_server_user "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart)
    stop
    start
    ;;
  status) answers ;;
  url) url ;;
  *) die "usage: scripts/postgres.sh install|start|stop|restart|status|url" ;;
esac
