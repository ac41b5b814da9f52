#!/usr/bin/env bash
# One command (section 13) under each cgroup layout a host can have, in a
# guest of its own: a Debian system booted with QEMU whose init mounts
#   hybrid  the controllers on v1 hierarchies, v2 holding none (as the
#           development VM is; tetherd makes five cgroups per command),
#   v2      one cgroup v2 hierarchy with every controller (tetherd makes one
#           cgroup per command, with memory, cpu, pids and io),
#   none    no cgroup at all, tetherd with --containment=session,
# then runs `tether-bench command` ROUNDS times and powers off. The same
# kernel and the same binaries in each, so the layouts compare with each
# other; docs/BENCHMARKS.md ("Session 14") says what the figures can and
# cannot stand for.
#
# Not run by CI: it downloads a Debian system (about 900 MB, from Debian's
# package mirror) and, under emulation, takes about 7 minutes per layout
# and round pair.
#
#   bench/guest.sh SCRATCH_DIR [LAYOUT...]
#
# Environment: ACCEL=tcg (default; emulation) or kvm (where the host's
# KVM can run a 64-bit guest; on the development VM it cannot: the guest
# hangs on entering long mode); ROUNDS (default 2); MIRROR.
# Needs root, debootstrap and qemu-system-x86 (apt-get install), and the
# release binaries (cargo build --release -p tether-server -p tether-bench
# -p tether-cli).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${1:?usage: bench/guest.sh SCRATCH_DIR [hybrid|v2|none...]}
shift
layouts=("$@")
[[ $# -eq 0 ]] && layouts=(hybrid v2 none)
accel=${ACCEL:-tcg}
rounds=${ROUNDS:-2}
mirror=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$scratch"
rootfs=$scratch/rootfs

if [[ ! -x $rootfs/usr/bin/true ]]; then
  debootstrap --variant=minbase \
    --include=linux-image-amd64,python3,iproute2,procps \
    bookworm "$rootfs" "$mirror"
fi
mkdir -p "$rootfs/opt/tether"
for bin in tetherd tether tether-bench; do
  cp "target/release/$bin" "$rootfs/opt/tether/"
done

cat >"$rootfs/init.sh" <<'EOF'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
ip link set lo up
# The harness's open-file limit, as on the host (init starts with 4096).
ulimit -Hn 65536; ulimit -n 65536
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p"; }
layout=$(arg layout); rounds=$(arg rounds)
extra=
case "$layout" in
  v2) mount -t cgroup2 none /sys/fs/cgroup ;;
  hybrid)
    mount -t tmpfs cgroup /sys/fs/cgroup
    for c in cpu cpuacct cpuset memory devices freezer blkio pids; do
      mkdir /sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
    done
    mkdir /sys/fs/cgroup/unified; mount -t cgroup2 none /sys/fs/cgroup/unified ;;
  none) extra=--tetherd-arg=--containment=session ;;
esac
echo "=== guest: layout $layout, kernel $(uname -r), $(nproc) CPUs"
cd /tmp
# What tetherd makes of the layout, from its own start-up log.
/opt/tether/tetherd --listen 127.0.0.1:7421 --no-token ${extra#--tetherd-arg=} >/tmp/td.out 2>/tmp/td.err &
n=0
until grep -q listening /tmp/td.out || [ "$n" -ge 300 ]; do sleep 0.1; n=$((n + 1)); done
kill $!
grep -o 'containment=.*' /tmp/td.err | head -1
i=1
while [ "$i" -le "$rounds" ]; do
  /opt/tether/tether-bench command --no-build --tetherd /opt/tether/tetherd $extra \
    --markdown /tmp/table.md >/tmp/bench.log 2>&1 || tail -20 /tmp/bench.log
  echo "=== round $i"; cat /tmp/table.md
  i=$((i + 1))
done
echo "=== end"
echo o >/proc/sysrq-trigger
sleep 60
EOF
chmod +x "$rootfs/init.sh"

image=$scratch/root.img
rm -f "$image"
mkfs.ext4 -q -d "$rootfs" "$image" 3G
kernel=$(ls "$rootfs"/boot/vmlinuz-* | tail -1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | tail -1)
case "$accel" in
  kvm) accel_args=(-enable-kvm -cpu host) ;;
  *) accel_args=(-accel tcg -cpu max) ;;
esac
for layout in "${layouts[@]}"; do
  log=$scratch/$layout.log
  timeout $((900 * rounds)) qemu-system-x86_64 "${accel_args[@]}" -smp 2 -m 4096 \
    -nographic -no-reboot -kernel "$kernel" -initrd "$initrd" \
    -drive "file=$image,format=raw,if=virtio,snapshot=on" \
    -append "root=/dev/vda rw console=ttyS0 quiet init=/init.sh layout=$layout rounds=$rounds" \
    </dev/null >"$log" 2>&1 || true
  tr -d '\033' <"$log" | sed -n '/^=== guest/,/^=== end/p'
done
