#!/usr/bin/env bash
# A standalone ZooKeeper for Weir's high-availability tests: Debian's `zookeeper` package run on
# 127.0.0.1 (or $WEIR_ZK_HOST), with its data directory kept across restarts so that sessions
# and znodes survive a stop/start exactly as they do on a real server.
#
# Usage: scripts/zookeeper.sh install|start|stop|restart|status|address
#
#   install  apt-get installs Debian's zookeeper package (and a Java runtime) if missing
#   start    starts the server (a free port is chosen on the first start and kept after that),
#            waits until it serves requests and prints its address, host:port
#   stop     stops the server at once, like a crash (its data directory stays)
#   restart  stop, then start on the same port with the same data
#   status   exits 0 if the server answers, 1 otherwise
#   address  prints host:port
#
# State (zoo.cfg, data, log, pid, port) lives in $WEIR_ZK_DIR, which must be set: the tests get
# it from scripts/test.sh, which also exports WEIR_TEST_ZK (the address) for them.
#
# WEIR_ZK_HOST binds the server to another address than 127.0.0.1: the network-partition tests
# run one per test inside a network namespace of its own, at that namespace's address.
set -euo pipefail

ZK_JAR=/usr/share/java/zookeeper.jar
ZK_CONF=/etc/zookeeper/conf
HOST=${WEIR_ZK_HOST:-127.0.0.1}

die() {
  echo "zookeeper.sh: $*" >&2
  exit 1
}

install() {
  local packages=()
  [ -f "$ZK_JAR" ] || packages+=(zookeeper)
  command -v java >/dev/null || packages+=(default-jre-headless)
  [ ${#packages[@]} -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || die "installing ${packages[*]} (Debian) needs root"
  echo "zookeeper.sh: installing ${packages[*]} (Debian)" >&2
  "$(dirname "$0")/apt-update.sh"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  [ -f "$ZK_JAR" ] || die "apt-get install zookeeper did not provide $ZK_JAR"
}

state_dir() {
  [ -n "${WEIR_ZK_DIR:-}" ] || die "set WEIR_ZK_DIR to a directory for the server's state"
  mkdir -p "$WEIR_ZK_DIR/data"
  echo "$WEIR_ZK_DIR"
}

port() {
  local dir
  dir=$(state_dir)
  if [ ! -s "$dir/port" ]; then
    python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1]); s.close()' "$HOST" >"$dir/port"
  fi
  cat "$dir/port"
}

# Whether the server on $1 answers `srvr` as a serving instance.
answers() {
  local reply
  reply=$(exec 2>/dev/null; exec 3<>"/dev/tcp/$HOST/$1" && printf srvr >&3 && timeout 2 cat <&3) || return 1
  [[ "$reply" == *"Mode:"* ]]
}

# Whether process $1 runs (a zombie, killed but not yet reaped, does not).
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

running_pid() {
  local dir pid
  dir=$(state_dir)
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  if [ -n "$pid" ] && alive "$pid"; then
    echo "$pid"
  fi
}

start() {
  install
  local dir p pid
  dir=$(state_dir)
  p=$(port)
  if [ -n "$(running_pid)" ]; then
    answers "$p" && { echo "$HOST:$p"; return; }
  fi
  # tickTime 500 ms lets sessions be as short as 1 s (2 ticks) and at most 10 s (20 ticks).
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$p
clientPortAddress=$HOST
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=srvr,ruok
CFG
  # Small heap and quick start: the server holds a few hundred znodes at most.
  nohup java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dzookeeper.log.dir="$dir" -Dzookeeper.root.logger=INFO,CONSOLE \
    -cp "$ZK_CONF:$ZK_JAR" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" \
    >>"$dir/server.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 300); do
    if answers "$p"; then
      echo "$HOST:$p"
      return
    fi
    if ! alive "$pid"; then
      tail -n 30 "$dir/server.log" >&2
      die "ZooKeeper exited during start (log above, full log in $dir/server.log)"
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die "ZooKeeper did not answer on $HOST:$p within 30 s (log: $dir/server.log)"
}

# A hard stop, like a crash: the server fsyncs its transaction log before it acknowledges a
# write, so nothing acknowledged is lost, and a test's restart takes a second, not three.
stop() {
  local pid
  pid=$(running_pid)
  [ -n "$pid" ] || return 0
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.02; done
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart)
    stop
    start
    ;;
  status) answers "$(port)" ;;
  address) echo "$HOST:$(port)" ;;
  *) die "usage: scripts/zookeeper.sh install|start|stop|restart|status|address" ;;
esac
