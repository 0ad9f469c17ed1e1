#!/usr/bin/env bash
# Runs the fabric conformance suite (fabric/tests/conformance.rs) against the `rdma` provider
# on soft-RoCE (rdma_rxe) inside a QEMU guest, the same suite `cargo test -p fabric` runs
# against `sim` on the host.
#
# Usage: fabric/tests/guest-conformance.sh [WORKDIR] [-- extra test args]
#   WORKDIR    scratch directory outside the repository (default /tmp/fabric-guest)
#   env KERNEL_DIR   an extracted Debian linux-image tree to reuse (with boot/ and lib/modules/)
#   env CARGO_TARGET_DIR   honoured when building the test binary
#   env GUEST_TEST_THREADS  test threads inside the guest (default 2)
#
# Exit status 0 only if every test passed in the guest. Needs qemu-system-x86, busybox-static,
# iproute2 (ip, rdma), rdma-core and ibverbs-providers on the host, and apt access for the
# kernel package the first time. The guest boots with TCG (KVM guests hang on this host).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-/tmp/fabric-guest}
shift || true
[ "${1:-}" = "--" ] && shift
EXTRA_ARGS=("$@")
THREADS=${GUEST_TEST_THREADS:-2}
ADDR=10.77.0.1
mkdir -p "$W"
W=$(cd "$W" && pwd)
case "$W/" in "$REPO"/*) echo "WORKDIR must be outside the repository" >&2; exit 2;; esac

need() { command -v "$1" >/dev/null || { echo "missing host tool: $1" >&2; exit 2; }; }
for t in qemu-system-x86_64 busybox ip rdma cpio gzip modprobe depmod ldd; do need "$t"; done

# 1. The test binary (built on the host, run in the guest).
echo "== building the conformance test binary"
BIN=$(cd "$REPO" && cargo test -p fabric --test conformance --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$BIN" ] || { echo "could not build the conformance test binary" >&2; exit 1; }
echo "   $BIN"

# 2. A Debian kernel with rdma_rxe.
if [ -n "${KERNEL_DIR:-}" ]; then
  K=$KERNEL_DIR
else
  K=$W/k
  if [ ! -d "$K/boot" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    (cd "$W" && apt-get download "$KPKG" >/dev/null)
    rm -rf "$K" && mkdir -p "$K" && dpkg -x "$W/${KPKG}"_*.deb "$K"
  fi
fi
KVER=$(ls "$K/lib/modules" | head -1)
VMLINUZ=$K/boot/vmlinuz-$KVER
[ -f "$VMLINUZ" ] || { echo "no kernel image in $K" >&2; exit 1; }
[ -f "$K/lib/modules/$KVER/modules.dep" ] || depmod -b "$K" "$KVER"

# 3. The initramfs.
R=$W/root
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,etc/libibverbs.d,proc,sys,dev,tmp,run,lib/modules/$KVER}
cp "$(command -v busybox)" "$R/bin/busybox"
for a in $(busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
copy_libs() {
  for l in $(ldd "$1" | grep -o '/[^ ]*'); do
    mkdir -p "$R$(dirname "$l")"
    cp -L "$l" "$R$l"
  done
}
copy_bin() { rm -f "$R/bin/$(basename "$1")"; cp -L "$1" "$R/bin/"; copy_libs "$1"; }
copy_bin "$(command -v ip)"
copy_bin "$(command -v rdma)"
command -v ibv_devices >/dev/null && copy_bin "$(command -v ibv_devices)"
copy_bin "$BIN"
TESTBIN=/bin/$(basename "$BIN")
GCC_S=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/{print $NF; exit}')
mkdir -p "$R$(dirname "$GCC_S")" && cp -L "$GCC_S" "$R$GCC_S"
P=/usr/lib/x86_64-linux-gnu/libibverbs
mkdir -p "$R$P"
cp -L $P/librxe-rdmav*.so "$R$P/"
copy_libs "$(ls $P/librxe-rdmav*.so | head -1)"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"

MODS="crc32_generic dummy rdma_rxe rdma_ucm ib_uverbs"
for m in $MODS; do modprobe -d "$K" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'; done \
  | sort -u | while read -r f; do
    rel=${f#*/lib/modules/$KVER/}
    mkdir -p "$R/lib/modules/$KVER/$(dirname "$rel")"
    cp "$f" "$R/lib/modules/$KVER/$rel"
  done
cp "$K/lib/modules/$KVER"/modules.order "$K/lib/modules/$KVER"/modules.builtin* "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

cat > "$R/init" <<GUEST
#!/bin/sh
export PATH=/bin:/sbin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $MODS; do modprobe \$m || echo "modprobe \$m FAILED"; done
ip link set lo up
ip link add d0 type dummy && ip addr add $ADDR/24 dev d0 && ip link set d0 up
rdma link add rxe0 type rxe netdev d0 || echo "rdma link add FAILED"
ibv_devices 2>/dev/null
echo "== running $TESTBIN"
RTGT_FABRIC=rdma RTGT_FABRIC_ADDR=$ADDR RUST_BACKTRACE=1 $TESTBIN --test-threads=$THREADS ${EXTRA_ARGS[*]:-}
rc=\$?
if [ \$rc -eq 0 ]; then echo "FABRIC-CONFORMANCE: PASS"; else echo "FABRIC-CONFORMANCE: FAIL (rc=\$rc)"; fi
poweroff -f
GUEST
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$W/initrd.gz")

# 4. Boot.
echo "== booting the guest (kernel $KVER)"
LOG=$W/guest.log
timeout 1200 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 2048 -smp 2 \
  -kernel "$VMLINUZ" -initrd "$W/initrd.gz" -append "console=ttyS0 panic=-1 quiet" \
  -nographic -no-reboot </dev/null | tr -d '\r' > "$LOG" || true
sed -n '/== running/,$p' "$LOG" | grep -v '^\s*$' | grep -v 'reboot: Power down' || true
if grep -q '^FABRIC-CONFORMANCE: PASS' "$LOG"; then
  exit 0
fi
echo "guest log: $LOG" >&2
exit 1
