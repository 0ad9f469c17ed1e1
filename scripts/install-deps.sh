#!/usr/bin/env bash
# Installs what building and testing rtgt needs on Debian/Ubuntu: the RDMA and clang headers
# rdma-sys builds against, librbd and librados (the Ceph RBD backend links them), the Ceph
# monitor and OSD the RBD tests start (scripts/ceph-cluster.sh), QEMU and the guest tools for
# the end-to-end suite, tmux for the `rtgt top` terminal test (cli/tests/top_tmux.rs), and the
# Python packages of the compatibility and Ansible tests. Safe to run again; installs only
# what is missing.
#
# Usage: scripts/install-deps.sh [--build-only]
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_PKGS="libibverbs-dev librdmacm-dev libclang-dev pkg-config librbd-dev librados-dev"
TEST_PKGS="tmux qemu-system-x86 busybox-static cpio iproute2 rdma-core ibverbs-providers ibverbs-utils rdmacm-utils nvme-cli fio kmod xz-utils python3 nftables ceph-mon ceph-osd ceph-common"
pkgs="$BUILD_PKGS"
[ "${1:-}" = "--build-only" ] || pkgs="$pkgs $TEST_PKGS"

missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install-deps: installing:$missing"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "install-deps: cargo not found; install Rust from https://rustup.rs (1.87 or newer)" >&2
  exit 1
fi

# The fuzz stage of scripts/test.sh (fuzz/run.sh) runs the targets with cargo-fuzz.
if [ "${1:-}" != "--build-only" ] && ! command -v cargo-fuzz >/dev/null; then
  echo "install-deps: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

if [ "${1:-}" != "--build-only" ] && [ -f tests/python/requirements.txt ]; then
  python3 -m pip install -q -r tests/python/requirements.txt
fi
