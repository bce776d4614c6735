#!/bin/bash
# Sourced by the device scripts (e2e_cycle.sh, bench_kernels.sh): the work folder $W, the log of the
# run ($W/summary.txt), everything under $W archived into $OUT/$ARCHIVE on exit, ansible-core from
# the carried wheels (.gpuwheels) into /tmp/ansible-site, and the carried SGLang 0.5.16 (.sglsrv)
# unpacked and on the path. Test-machine tooling: a real GPU host has its own ansible and SGLang.
# Before sourcing: OUT, W and ARCHIVE.
mkdir -p "$OUT"; rm -rf "$W"; mkdir -p "$W"  # a warm machine keeps /tmp
T0=$(date +%s.%N)
since() { awk -v a="$(date +%s.%N)" -v b="${1:-$T0}" 'BEGIN{printf "%.1f", a-b}'; }
log() { echo "[$(since)s] $*" | tee -a "$W/summary.txt"; }
finish() { cp "$W/summary.txt" "$OUT/"; cp /tmp/sd-console.log "$W/" 2>/dev/null; tar -C "$W" -czf "$OUT/$ARCHIVE" . 2>/dev/null; }
trap finish EXIT

python3 -m pip install -q --no-index --find-links .gpuwheels --target /tmp/ansible-site ansible-core > "$W/pip.log" 2>&1 \
  || { log "ansible-core did not install"; exit 1; }
python3 .sglsrv/carry/unpack.py --dest /tmp/sglsrv/site > "$W/unpack.log" 2>&1
# shellcheck source=/dev/null
source .sglsrv/carry/env.sh 2>> "$W/unpack.log"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
