#!/usr/bin/env bash
# Installs the outside tools the REST tests drive: Debian's Chromium (the dashboard is checked in
# a real headless browser), and Flink's own command line and jars from the apache-flink package
# on PyPI with a JDK (Flink's client must list, checkpoint, savepoint, stop and cancel a Weir
# job, and Flink's own REST classes must read every answer). Idempotent, and quick when all are
# there.
#
# Usage: scripts/install-test-tools.sh
# Flink goes to $WEIR_FLINK_HOME (default /opt/weir-flink): the tests run $WEIR_FLINK_HOME/flink
# (or $WEIR_FLINK_CLI) and read the jars under the directory named in $WEIR_FLINK_HOME/home.
set -euo pipefail

FLINK_VERSION=2.3.0
FLINK_DIR=${WEIR_FLINK_HOME:-/opt/weir-flink}

apt_updated=
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "install-test-tools.sh: need root to apt-get install $*" >&2
    exit 1
  fi
  if [ -z "$apt_updated" ]; then
    "$(dirname "$0")/apt-update.sh"
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v chromium >/dev/null; then
  echo "install-test-tools.sh: installing chromium (Debian)" >&2
  apt_install chromium
fi

if ! command -v java >/dev/null || ! command -v javac >/dev/null; then
  echo "install-test-tools.sh: installing a JDK for Flink's CLI and classes" >&2
  apt_install openjdk-17-jdk-headless
fi

if [ ! -x "$FLINK_DIR/flink" ] || [ ! -f "$FLINK_DIR/home" ] ||
  [ "$(cat "$FLINK_DIR/VERSION" 2>/dev/null)" != "$FLINK_VERSION" ]; then
  echo "install-test-tools.sh: installing Flink's CLI (apache-flink $FLINK_VERSION from PyPI, ~330 MB)" >&2
  rm -rf "$FLINK_DIR"
  python3 -m venv "$FLINK_DIR"
  # Only the command line is needed: Flink's jars and scripts, not PyFlink's Python libraries
  # (Beam, pandas, pyarrow …), hence --no-deps.
  "$FLINK_DIR/bin/pip" install -q --disable-pip-version-check --no-deps \
    "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION"
  home=$(echo "$FLINK_DIR"/lib/python3*/site-packages/pyflink)
  if [ ! -f "$home/bin/flink" ]; then
    echo "install-test-tools.sh: no bin/flink in $home" >&2
    exit 1
  fi
  chmod +x "$home"/bin/*
  cat >"$FLINK_DIR/flink" <<SCRIPT
#!/bin/sh
# Flink's command line, as installed by scripts/install-test-tools.sh.
export FLINK_HOME="$home"
exec "\$FLINK_HOME/bin/flink" "\$@"
SCRIPT
  chmod +x "$FLINK_DIR/flink"
  echo "$home" >"$FLINK_DIR/home"
  echo "$FLINK_VERSION" >"$FLINK_DIR/VERSION"
fi
