#!/usr/bin/env bash
# Build the e2e guest: a Debian kernel plus an initramfs made of two concatenated cpio archives.
#
#   build-guest.sh [--kernel KERNEL] [--rtgt BIN] [--scenarios DIR] [--config FILE] OUTDIR
#
# KERNEL is a Debian bookworm kernel: 6.1 (the default, what linux-image-amd64 depends on) or
# another MAJOR.MINOR that bookworm ships as linux-image-MAJOR.MINOR-amd64 (6.12, from
# bookworm-security), or an exact package name (linux-image-6.12.117+deb12-amd64).
#
# 1. The *base* archive (cached): busybox, the kernel modules (soft-RoCE, the NVMe/RDMA and SRP
#    initiators, the kernel targets nvmet-rdma and LIO ib_srpt, null_blk, 9p, virtio-net), and user-space
#    tools with their shared libraries (iproute2's ip and rdma, nvme-cli, fio, jq, sg3-utils,
#    libibverbs/librdmacm and the rxe provider, the ibverbs/rdmacm utilities). It is kept under
#    ${RTGT_E2E_CACHE:-$HOME/.cache/rtgt-e2e}/base-<kernel version>-<hash>, where the hash covers
#    this script and the versions of the Debian packages the files come from.
# 2. The *overlay* archive (fresh every run): the guest /init, lib.sh, the scenarios, the rtgt
#    binary, the e2e-rpc client, the with_src_addr shim (tools/bindsrc.c), and the extra
#    binaries listed in the scenario directory's guest-bins.txt and in $RTGT_E2E_BINS, each
#    with its shared libraries. A binary linked with librbd (rbd_bench, rtgt built with RBD)
#    brings librbd, librados and libceph-common (RUNPATH .../ceph) this way; a Ceph 16 client
#    loads no plugin at run time with auth none or cephx (checked with strace: only
#    openssl.cnf, which is optional): the compressor plugins are needed only with messenger
#    compression (ms_osd_compress_mode), which the scenarios do not use.
#
# Writes OUTDIR/vmlinuz and OUTDIR/initrd.img. Installs missing host packages with apt-get
# when it runs as root (CI does); otherwise it names what to install and fails.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$E2E_DIR/../.." && pwd)
CACHE=${RTGT_E2E_CACHE:-${HOME:-/root}/.cache/rtgt-e2e}
MULTIARCH=x86_64-linux-gnu

# Modules loaded at boot, in this order (crc32_generic must precede rdma_rxe).
BOOT_MODULES="virtio_pci 9pnet_virtio 9p configfs crc32_generic dummy veth rdma_rxe rdma_ucm
  ib_uverbs ib_umad nvme_rdma ib_srp sd_mod sg"
# Shipped too, loaded on demand (the kernel targets and their backing stores).
EXTRA_MODULES="null_blk brd loop nvmet_rdma nvmet_tcp nvme_tcp ib_srpt target_core_mod
  target_core_iblock target_core_file crc32c_generic virtio_net"
# Host commands copied into the guest with their libraries (the first found of each name).
GUEST_TOOLS="bash ip rdma bridge nvme fio jq ibv_devices ibv_devinfo ibv_rc_pingpong rping ucmatose
  rdma_server rdma_client sg_inq sg_vpd sg_readcap sg_luns sg_turs sg_raw sg_unmap sg_sync
  sg_modes sg_requests sg_write_same lsblk blkid"
# command-or-file -> Debian package that provides it on the host.
HOST_NEEDS="qemu-system-x86_64:qemu-system-x86 cpio:cpio ip:iproute2 rdma:iproute2 nvme:nvme-cli
  fio:fio jq:jq depmod:kmod modprobe:kmod ibv_devinfo:ibverbs-utils rping:rdmacm-utils
  sg_inq:sg3-utils lsblk:util-linux flock:util-linux dpkg-deb:dpkg xz:xz-utils
  /usr/lib/$MULTIARCH/libibverbs/librxe-rdmav*.so:ibverbs-providers
  /etc/libibverbs.d/rxe.driver:ibverbs-providers
  /usr/lib/$MULTIARCH/librdmacm.so.1:librdmacm1 /usr/lib/$MULTIARCH/libibverbs.so.1:libibverbs1
  /usr/lib/$MULTIARCH/libgcc_s.so.1:libgcc-s1"

say() { echo "build-guest: $*" >&2; }
die() { echo "build-guest: error: $*" >&2; exit 1; }

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# Host packages
# ---------------------------------------------------------------------------------------------
have() { case $1 in /*) compgen -G "$1" >/dev/null ;; *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ] ;; esac; }

static_busybox() {
  local b
  b=$(command -v busybox 2>/dev/null) || return 1
  file -L "$b" 2>/dev/null | grep -q 'statically linked' || ! ldd "$b" >/dev/null 2>&1
}

APT_UPDATED=0
apt_install() {
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ]; then
    die "missing host packages: $* (run as root, or: sudo apt-get install --no-install-recommends $*)"
  fi
  say "installing: $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq >&2; APT_UPDATED=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >&2
}

ensure_host_packages() {
  local pkgs="" entry
  for entry in $HOST_NEEDS; do
    have "${entry%%:*}" || pkgs="$pkgs ${entry##*:}"
  done
  static_busybox || pkgs="$pkgs busybox-static"
  # file(1) is used to recognise static binaries; cheap and usually present.
  have file || pkgs="$pkgs file"
  # shellcheck disable=SC2046,SC2086
  apt_install $(printf '%s\n' $pkgs | sort -u)
}

# ---------------------------------------------------------------------------------------------
# Copying files with their shared libraries into a staging root (merged-/usr layout)
# ---------------------------------------------------------------------------------------------
# The guest root has /lib -> usr/lib, /lib64 -> usr/lib64, /sbin -> bin is NOT merged (busybox
# lives in /bin); libraries are stored under their canonical host path.
canon() { local d; d=$(cd "$(dirname "$1")" && pwd -P); echo "$d/$(basename "$1")"; }

# copy_file SRC DEST_IN_ROOT: copy dereferenced, creating directories.
copy_file() {
  local root=$1 src=$2 dest=$3
  mkdir -p "$root$(dirname "$dest")"
  cp -L --remove-destination "$src" "$root$dest"
}

# copy_libs ROOT FILE: the shared libraries FILE needs (recursively, as ldd reports them).
copy_libs() {
  local root=$1 f=$2 lib canonlib out
  out=$(ldd "$f" 2>/dev/null) || return 0   # static binaries: nothing to copy
  if grep -q 'not found' <<<"$out"; then
    die "$f needs libraries that are not installed: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')"
  fi
  for lib in $(grep -o '/[^ ]*' <<<"$out"); do
    canonlib=$(canon "$lib")
    canonlib=${canonlib#/usr}; canonlib=/usr$canonlib    # /lib/... and /usr/lib/... are one dir
    [ -e "$root$canonlib" ] || copy_file "$root" "$lib" "$canonlib"
  done
}

# copy_bin ROOT SRC DESTDIR: a binary and its libraries.
copy_bin() {
  local root=$1 src=$2 destdir=$3
  [ -f "$src" ] || die "no such file: $src"
  copy_file "$root" "$src" "$destdir/$(basename "$src")"
  chmod 0755 "$root$destdir/$(basename "$src")"
  copy_libs "$root" "$src"
}

find_tool() {
  local t=$1 d
  for d in /usr/sbin /usr/bin /sbin /bin; do [ -x "$d/$t" ] && { echo "$d/$t"; return 0; }; done
  command -v "$t"
}

# ---------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------
# apt_resolve META: the linux-image-<version> package a meta-package depends on.
apt_resolve() {
  apt-cache depends "$1" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}

# kernel_package KERNEL -> the linux-image package to boot (see the header for KERNEL).
kernel_package() {
  local want=$1 meta k
  case $want in
    linux-image-[0-9]*) echo "$want"; return ;;
    6.1) meta=linux-image-amd64 ;;                  # bookworm's default kernel
    [0-9]*.[0-9]*) meta=linux-image-$want-amd64 ;;  # e.g. linux-image-6.12-amd64
    *) die "unknown kernel '$want': give MAJOR.MINOR (6.1, 6.12) or a linux-image-* package name" ;;
  esac
  k=$(apt_resolve "$meta")
  if [ -z "$k" ] && [ "$(id -u)" = 0 ] && [ "$APT_UPDATED" = 0 ]; then
    apt-get update -qq >&2; APT_UPDATED=1
    k=$(apt_resolve "$meta")
  fi
  [ -n "$k" ] || die "apt-cache cannot resolve $meta (Debian bookworm ships linux-image-6.12-amd64 in bookworm-security: is that suite in the apt sources? run apt-get update)"
  [[ $k == "linux-image-$want."* ]] || die "$meta depends on $k, not a $want kernel (a Debian bookworm host is needed)"
  echo "$k"
}

# fetch_kernel PKG -> prints the directory the package is unpacked in (cached).
fetch_kernel() {
  local pkg=$1 ver dir tmp
  ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/{print $2}')
  dir="$CACHE/kernel/$pkg${ver:+_$ver}"
  if [ ! -f "$dir/.done" ]; then
    say "downloading $pkg ${ver:-}"
    tmp=$(mktemp -d "$CACHE/kernel/.tmp.XXXXXX"); chmod 755 "$tmp"
    local sandbox=()
    [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)   # _apt cannot write to $tmp
    (cd "$tmp" && apt-get download "${sandbox[@]}" "$pkg" >&2) || die "apt-get download $pkg failed"
    mkdir "$tmp/x"
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    rm -rf "$dir"; mv "$tmp/x" "$dir"; rm -rf "$tmp"
    touch "$dir/.done"
  fi
  echo "$dir"
}

# ---------------------------------------------------------------------------------------------
# Base archive
# ---------------------------------------------------------------------------------------------
pkg_versions() {
  # The Debian packages the base is made of: a change of any of them rebuilds the base.
  local f p
  for f in /usr/bin/busybox $(for t in $GUEST_TOOLS; do find_tool "$t" 2>/dev/null || true; done) \
           /usr/lib/$MULTIARCH/libibverbs.so.1 /usr/lib/$MULTIARCH/librdmacm.so.1 \
           /etc/libibverbs.d/rxe.driver; do
    p=$(dpkg -S "$(canon "$f")" 2>/dev/null | head -1 | cut -d: -f1) || true
    [ -n "$p" ] || p=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1) || true
    [ -n "$p" ] && dpkg-query -W -f '${Package}=${Version}\n' "$p" 2>/dev/null || echo "$f"
  done | sort -u
}

build_base() {
  local kdir=$1 kver=$2 dest=$3 root mods m f rel t
  root=$(mktemp -d "$CACHE/.base-root.XXXXXX")
  say "building base initramfs for $kver in $dest"
  mkdir -p "$root"/{bin,usr/lib,usr/lib64,usr/bin,usr/sbin,etc/libibverbs.d,etc/nvme,proc,sys,dev,tmp,run,var/tmp,out,opt/rtgt/bin,root}
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"; ln -s bin "$root/sbin"
  # busybox and its applets
  copy_bin "$root" "$(command -v busybox)" /bin
  for a in $("$root/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"; done
  # user-space tools (real ones in /usr/{s,}bin shadow busybox applets: PATH puts them first)
  for t in $GUEST_TOOLS; do
    f=$(find_tool "$t") || die "host tool '$t' not found"
    case $f in */sbin/*) copy_bin "$root" "$f" /usr/sbin ;; *) copy_bin "$root" "$f" /usr/bin ;; esac
  done
  ln -sf /usr/bin/bash "$root/bin/bash"
  # verbs: libibverbs finds providers through /etc/libibverbs.d/*.driver
  cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
  for f in /usr/lib/"$MULTIARCH"/libibverbs/librxe-rdmav*.so; do
    copy_file "$root" "$f" "/usr/lib/$MULTIARCH/libibverbs/$(basename "$f")"
    copy_libs "$root" "$f"
  done
  copy_file "$root" /usr/lib/$MULTIARCH/librdmacm.so.1 /usr/lib/$MULTIARCH/librdmacm.so.1
  copy_libs "$root" /usr/lib/$MULTIARCH/librdmacm.so.1
  # Rust binaries and threaded C programs dlopen libgcc_s for unwinding
  copy_file "$root" /usr/lib/$MULTIARCH/libgcc_s.so.1 /usr/lib/$MULTIARCH/libgcc_s.so.1
  # modules with their dependencies
  mods=$(for m in $BOOT_MODULES $EXTRA_MODULES; do
           modprobe -d "$kdir" -S "$kver" --show-depends "$m" || die "module $m not in $kver"
         done | awk '$1=="insmod"{print $2}' | sort -u)
  # Compressed modules (6.12 ships .ko.xz) are stored decompressed: busybox's modprobe loads
  # plain .ko files, and decompressing at build time costs the TCG guest nothing at boot.
  for f in $mods; do
    rel=${f#*/lib/modules/"$kver"/}
    mkdir -p "$root/usr/lib/modules/$kver/$(dirname "$rel")"
    case $rel in
      *.ko) cp "$f" "$root/usr/lib/modules/$kver/$rel" ;;
      *.ko.xz) xz -dc "$f" > "$root/usr/lib/modules/$kver/${rel%.xz}" ;;
      *.ko.gz) gzip -dc "$f" > "$root/usr/lib/modules/$kver/${rel%.gz}" ;;
      *) die "module $f: unsupported compression" ;;
    esac
  done
  cp "$kdir/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/usr/lib/modules/$kver/"
  depmod -b "$root" "$kver"
  # small config files
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
  printf 'root:x:0:\n' > "$root/etc/group"
  printf '127.0.0.1 localhost\n10.77.0.1 rtgt-e2e\n' > "$root/etc/hosts"
  echo rtgt-e2e > "$root/etc/hostname"
  echo "$kver" > "$root/etc/rtgt-e2e-kernel"
  # Uncompressed: under TCG, decompressing costs the guest more time than QEMU spends loading
  # the larger file. cpio pads to 512 bytes, so the overlay archive can follow directly.
  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet) > "$dest/base.cpio"
  rm -rf "$root"
}

# ensure_base -> prints the base directory (vmlinuz, base.cpio, kver)
ensure_base() {
  local kpkg kdir kver key dest tmp
  mkdir -p "$CACHE/kernel"
  kpkg=$(kernel_package "$KERNEL")
  kver=${kpkg#linux-image-}
  kdir=$(fetch_kernel "$kpkg")
  [ -d "$kdir/lib/modules/$kver" ] || die "$kpkg has no /lib/modules/$kver"
  key=$( { echo "$kpkg"; cat "${BASH_SOURCE[0]}"; pkg_versions; } | sha256sum | cut -c1-12)
  dest="$CACHE/base-$kver-$key"
  if [ ! -f "$dest/.done" ]; then
    exec 9>"$CACHE/.lock"
    flock 9
    if [ ! -f "$dest/.done" ]; then
      local t0=$SECONDS
      [ -f "$kdir/lib/modules/$kver/modules.dep" ] || depmod -b "$kdir" "$kver"
      tmp=$(mktemp -d "$CACHE/.base.XXXXXX"); chmod 755 "$tmp"
      build_base "$kdir" "$kver" "$tmp"
      cp "$kdir/boot/vmlinuz-$kver" "$tmp/vmlinuz"
      echo "$kver" > "$tmp/kver"
      rm -rf "$dest"; mv "$tmp" "$dest"; touch "$dest/.done"
      say "base built in $((SECONDS - t0))s ($(du -sh "$dest/base.cpio" | cut -f1))"
      # keep the two most recent bases of this kernel and the four most recent in all, and the
      # three most recently used unpacked kernel packages
      find "$CACHE" -maxdepth 1 -name "base-$kver-*" -printf '%T@ %p\n' | sort -rn | tail -n +3 \
        | cut -d' ' -f2- | xargs -r rm -rf
      find "$CACHE" -maxdepth 1 -name 'base-*' -printf '%T@ %p\n' | sort -rn | tail -n +5 \
        | cut -d' ' -f2- | xargs -r rm -rf
      find "$CACHE/kernel" -mindepth 1 -maxdepth 1 -name 'linux-image-*' -printf '%T@ %p\n' \
        | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
    fi
    flock -u 9
  fi
  touch "$dest" "$kdir"
  echo "$dest"
}

# ---------------------------------------------------------------------------------------------
# Small tools compiled from tests/e2e/tools/ (cached by source hash)
# ---------------------------------------------------------------------------------------------
# cached_compile SRC STEM SUFFIX COMPILER [ARGS...]: runs `COMPILER ARGS... -o OUT SRC` once per
# source hash, OUT being $CACHE/tools/STEM-<hash>SUFFIX; prints OUT.
cached_compile() {
  local src=$1 stem=$2 suffix=$3 h out
  shift 3
  h=$(sha256sum "$src" | cut -c1-12)
  out="$CACHE/tools/$stem-$h$suffix"
  if [ ! -e "$out" ]; then
    mkdir -p "$CACHE/tools"
    "$@" -o "$out.tmp.$$" "$src" >&2 || die "compiling $src failed"
    mv "$out.tmp.$$" "$out"
  fi
  echo "$out"
}

# The e2e-rpc client.
ensure_rpc_client() {
  cached_compile "$E2E_DIR/tools/e2e-rpc.rs" e2e-rpc "" \
    "${RUSTC:-rustc}" --edition 2021 -C opt-level=2 -C strip=symbols
}

# The LD_PRELOAD shim behind lib.sh's with_src_addr (tools/bindsrc.c; dlsym is in glibc >= 2.34).
ensure_bindsrc() {
  cached_compile "$E2E_DIR/tools/bindsrc.c" libe2e-bindsrc .so \
    "${CC:-cc}" -shared -fPIC -O2 -Wall -Werror
}

# ---------------------------------------------------------------------------------------------
# Extra guest binaries: <scenario dir>/guest-bins.txt and $RTGT_E2E_BINS
# ---------------------------------------------------------------------------------------------
# Each non-comment line of guest-bins.txt is either a path (absolute, or relative to the
# repository root; $VARS are expanded) or "$ COMMAND", run with bash from the repository root,
# that prints paths one per line. Every path must name an existing file.
list_extra_bins() {
  local list="$1/guest-bins.txt" line p
  if [ -f "$list" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      line=${line%%[[:space:]]#*}                     # strip trailing comments
      line=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<<"$line")
      case $line in
        ''|'#'*) continue ;;
        '$ '*|'$'*)
          (cd "$ROOT" && bash -euo pipefail -c "${line#\$}") || die "guest-bins.txt: command failed: ${line#\$}" ;;
        *) (cd "$ROOT" && eval "printf '%s\n' \"$line\"") ;;
      esac
    done < "$list"
  fi
  for p in ${RTGT_E2E_BINS:-}; do echo "$p"; done
}

# ---------------------------------------------------------------------------------------------
# Overlay archive
# ---------------------------------------------------------------------------------------------
build_overlay() {
  local out=$1 rtgt=$2 scen=$3 config=$4 root rpc p
  root="$out/overlay-root"
  rm -rf "$root"; mkdir -p "$root"/{bin,opt/rtgt/bin,opt/rtgt/e2e}
  install -m 0755 "$E2E_DIR/guest/init" "$root/init"
  install -m 0644 "$E2E_DIR/lib.sh" "$root/opt/rtgt/e2e/lib.sh"
  cp -rL "$scen" "$root/opt/rtgt/e2e/scenarios"   # -L: a suite may link scenarios of another
  [ -n "$config" ] && install -m 0644 "$config" "$root/opt/rtgt/e2e/config"
  rpc=$(ensure_rpc_client)
  copy_bin "$root" "$rpc" /bin && mv "$root/bin/$(basename "$rpc")" "$root/bin/e2e-rpc"
  mkdir -p "$root/opt/rtgt/lib"
  install -m 0644 "$(ensure_bindsrc)" "$root/opt/rtgt/lib/libe2e-bindsrc.so"
  if [ -n "$rtgt" ]; then
    copy_bin "$root" "$rtgt" /bin
    [ "$(basename "$rtgt")" = rtgt ] || mv "$root/bin/$(basename "$rtgt")" "$root/bin/rtgt"
  fi
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    case $p in /*) ;; *) p="$ROOT/$p" ;; esac
    [ -f "$p" ] || die "extra guest binary not found: $p"
    copy_bin "$root" "$p" /opt/rtgt/bin
  done < <(list_extra_bins "$scen")
  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/overlay.cpio"
  rm -rf "$root"
}

KERNEL=6.1
main() {
  local rtgt="" scen="$E2E_DIR/scenarios" config="" out="" base t0=$SECONDS
  while [ $# -gt 0 ]; do
    case $1 in
      --kernel) KERNEL=$2; shift 2 ;;
      --rtgt) rtgt=$2; shift 2 ;;
      --scenarios) scen=$2; shift 2 ;;
      --config) config=$2; shift 2 ;;
      -h|--help) usage ;;
      -*) die "unknown option $1" ;;
      *) out=$1; shift ;;
    esac
  done
  [ -n "$out" ] || usage
  [ -z "$rtgt" ] || [ -x "$rtgt" ] || die "rtgt binary not executable: $rtgt"
  [ -d "$scen" ] || die "no scenario directory $scen"
  mkdir -p "$out" "$CACHE"
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}   # for guest-bins.txt entries
  ensure_host_packages
  base=$(ensure_base)
  build_overlay "$out" "$rtgt" "$scen" "$config"
  cat "$base/base.cpio" "$out/overlay.cpio" > "$out/initrd.img"
  ln -sf "$base/vmlinuz" "$out/vmlinuz"
  cp "$base/kver" "$out/kver"
  say "guest ready in $((SECONDS - t0))s: $out/vmlinuz $out/initrd.img (kernel $(cat "$base/kver"))"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
