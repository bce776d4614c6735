#!/bin/sh
# mmdebstrap customize hook: runs on the build host with the rootfs at $1.
# Makes a systemd-as-PID-1 lab host reachable by ssh with a key mounted at run time,
# and gives it a venv with CPU torch for the sweep (from the wheelhouse at $2).
set -eu
ROOT="$1"; WHEELS="$2"
# ssh: root by key only; the key is bind-mounted read-only when the container starts
sed -i 's/^#\?PermitRootLogin.*/PermitRootLogin prohibit-password/; s/^#\?UseDNS.*/UseDNS no/' "$ROOT/etc/ssh/sshd_config"
printf 'PasswordAuthentication no\nMaxStartups 100:30:200\n' > "$ROOT/etc/ssh/sshd_config.d/lab.conf"
# units a container has no use for
for u in getty@tty1.service console-getty.service systemd-logind.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
done
echo 'lab' > "$ROOT/etc/hostname"
# torch single-threaded in every ssh session (pam_env reads /etc/environment): the lab runs 3-9 hosts on a 2-core
# machine, and torch's default (an OpenMP thread per core, spinning between the sweep's tiny ops) made one lab sweep
# 31-39 s of CPU and 82-139 s of wall time beside a loaded suite, against 3.4-4.1 s and 11-18 s with one thread
# (docs/timings.md, "The lab's torch single-threaded"). The sweep and its kernels are unchanged; its lab timings are
# single-threaded ones.
echo 'OMP_NUM_THREADS=1' >> "$ROOT/etc/environment"
# the sweep's Python: a venv with CPU torch, installed offline from the wheelhouse
mkdir -p "$ROOT/tmp/wheelhouse"
cp "$WHEELS"/*.whl "$ROOT/tmp/wheelhouse/"
chroot "$ROOT" python3 -m venv /opt/bench-venv
chroot "$ROOT" /opt/bench-venv/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheelhouse torch
rm -rf "$ROOT/tmp/wheelhouse" "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"*
