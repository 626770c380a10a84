#!/usr/bin/env bash
# Refreshes Debian's package lists before an install, unless they were refreshed within the
# hour (the test command's installs run one after another: one refresh serves them all).
set -euo pipefail
lists=/var/lib/apt/lists
if [ -n "$(find "$lists" -maxdepth 1 -name '*_Packages*' -mmin -60 -print -quit 2>/dev/null)" ]; then
  exit 0
fi
apt-get update -qq
