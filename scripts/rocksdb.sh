#!/usr/bin/env bash
# Installs what the `rocksdb` feature of Weir needs to build: Debian's RocksDB library and
# headers (librocksdb-dev, linked rather than built from source: a bundled RocksDB build takes
# over a quarter of an hour on two cores) and libclang (for the crate's generated bindings).
# Idempotent, and quick when both are there. .cargo/config.toml points the build at them.
#
# Usage: scripts/rocksdb.sh install
set -euo pipefail

case "${1:-}" in
install)
  missing=()
  [ -f /usr/include/rocksdb/db.h ] || missing+=(librocksdb-dev)
  # libclang itself (libclang-NN.so), not libclang-cpp, which other packages bring.
  compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
    compgen -G '/usr/lib/*/libclang-[0-9]*.so*' >/dev/null || missing+=(libclang-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "rocksdb.sh: need root to apt-get install ${missing[*]}" >&2
      exit 1
    fi
    echo "rocksdb.sh: installing ${missing[*]} (Debian)" >&2
    "$(dirname "$0")/apt-update.sh"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  ;;
*)
  echo "usage: scripts/rocksdb.sh install" >&2
  exit 2
  ;;
esac
