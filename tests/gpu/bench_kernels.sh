#!/bin/bash
# The multi-backend INT4 MoE sweep (SGLang Marlin, SGLang Triton int4_w4a16, torch bf16) through the
# gpu_benchmark role on the lent H200, for docs/benchmarks.md. Test-machine tooling, not CI.
#   device run (carry [".sglsrv", ".gpuwheels"]):  OUT=$OUT STAGE=smoke bash tests/gpu/bench_kernels.sh
# STAGE cost: one shape (tp 1), one routing, the module's default 20 samples, after a small warm-up run.
# STAGE smoke: the GPU tests (each kernel vs fp32, Marlin vs Triton on the same weights, the stop's GPU wait on the
#   real nvidia-smi) and a small sweep of all three backends through the role. STAGE full: the role twice (run1, run2) on
#   inventory/h200 (K2.6 shape at tp 1 and 8, M 1..4096, uniform and Zipf routing): fidelity is the
#   agreement of the two runs. Everything lands in $OUT/summary.txt and $OUT/bench.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/bench-out}; W=/tmp/bench; ARCHIVE=bench.tar.gz
STAGE=${STAGE:-smoke}
# shellcheck source=tests/gpu/setup.sh
source tests/gpu/setup.sh
mkdir -p "$W/res"
export PYTHONPATH="/tmp/ansible-site:$PYTHONPATH"
log "python3 $(python3 -c 'import sys, torch, sglang, triton; print(sys.version.split()[0], "torch", torch.__version__, "sglang", sglang.__version__, "triton", triton.__version__)' 2>&1 | tail -1)"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$W/summary.txt"

PY3=$(command -v python3)  # the venv's own path: the module wants an absolute interpreter
play() {  # $1: a name; the rest: ansible-playbook's arguments
  local name=$1 t; shift; t=$(date +%s.%N)
  ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0 python3 /tmp/ansible-site/bin/ansible-playbook -e bc_sweep_python="$PY3" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(since "$t") s; $(grep -E '^[a-z0-9]+ +: ok=' "$W/$name.log" | tail -1 | tr -s ' ')"
  [ $rc = 0 ] || tail -40 "$W/$name.log" | tee -a "$W/summary.txt"
  return $rc
}
digest() {  # one line per result: wall, prepare, peak vs estimate, checks; the fastest backend per M
  python3 - "$@" <<'PY' | tee -a "$W/summary.txt"
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/**/sweep-tp*.json", recursive=True)):
    r = json.load(open(path))
    checks = ", ".join("%s %.4f" % (b["name"], b["check"]["relative_error"]) for b in r.get("backends", []) if b.get("check"))
    print("%s: wall %ss, prepare %ss (%s), peak %s GiB vs estimate %s GiB (%+.1f%%), copy %s GB/s, bf16 %s TFLOP/s, compute bound from M=%s; check %s"
          % (path.split("/res/")[-1], r.get("wall_s"), r.get("prepare_s"),
             ", ".join("%s %ss" % (b["name"], b.get("prepare_s")) for b in r.get("backends", [])),
             r.get("peak_memory_gib"), r.get("estimate_peak_gib"), 100 * (r.get("estimate_error") or 0),
             r.get("copy_bandwidth_gbs"), r.get("dense_tflops"), r.get("bound_knee_m"), checks))
    for w in r.get("winners", []):
        print("  %-10s M=%-5d fastest %-6s %s" % (w["routing"], w["m"], w["fastest"],
              "  ".join("%s %.4f ms (x%s)" % (b, v["ms"], v["to_floor"]) for b, v in w["backends"].items())))
PY
}

if [ "$STAGE" = smoke ]; then
  t=$(date +%s.%N)
  [ "${SKIP_TESTS:-0}" = 1 ] || timeout 420 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_marlin_gpu.py tests/gpu/test_gpu_stop.py > "$W/pytest.log" 2>&1
  [ "${SKIP_TESTS:-0}" = 1 ] || log "gpu tests: rc=$? in $(since "$t") s; $(tail -1 "$W/pytest.log")"
  [ "${SKIP_TESTS:-0}" = 1 ] || grep -E "relative (error|difference)" "$W/pytest.log" | tee -a "$W/summary.txt"
  play smoke playbooks/gpu_benchmark.yml -i inventory/h200 -e bc_results_dir="$W/res" -e gpu_benchmark_stamp=smoke \
    -e '{"bc_sweep_tp_sizes": [8], "bc_sweep_batch_sizes": [1, 16, 256], "bc_sweep_iters": 5}'
  digest "$W/res"
elif [ "$STAGE" = tune ]; then  # #32: the tuned Triton beside Marlin, the server's Triton and bf16, M 256..4096 (TUNE_SIZES),
  # both routings, tp 1 and the TP8 shard (TUNE_TP), TUNE_BUDGET s of tuning per shape; the configs written are kept
  routing=${TUNE_ROUTING:-'[{"kind": "uniform"}, {"kind": "zipf", "skew": 1.0}]'}
  extra=$(printf '{"bc_sweep_backends": ["sglang", "triton", "triton_tuned", "torch"], "bc_sweep_tp_sizes": %s, "bc_sweep_batch_sizes": %s, "bc_sweep_iters": %s, "bc_sweep_routing": %s, "bc_sweep_tune_budget_s": %s, "bc_sweep_timeout_s": 540}' \
    "${TUNE_TP:-[1, 8]}" "${TUNE_SIZES:-[256, 512, 1024, 2048, 4096]}" "${TUNE_ITERS:-10}" "$routing" "${TUNE_BUDGET:-100}")
  log "tune: $extra"
  play tune playbooks/gpu_benchmark.yml -i inventory/h200 -e bc_results_dir="$W/res" -e gpu_benchmark_stamp=tune -e "$extra"
  digest "$W/res"
  python3 - "$W" <<'PY' | tee -a "$W/summary.txt"
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/res/**/sweep-tp*.json", recursive=True)):
    r = json.load(open(path))
    for b in r.get("backends", []):
        t = b.get("tuning")
        if t:
            print("%s tp%s: tuned %s configs (%s failed) of %s in %ss (%s build processes: %s built ahead in %ss, timing %ss%s); "
                  "speedup over the server's config %s; file %s, read back %s, %s packaged configs alongside"
                  % (path.split("/res/")[-1], r.get("tp_size"), t["configs_tried"], t["configs_failed"], t["space"], t["spent_s"],
                     t.get("build_processes"), t.get("built_ahead"), t.get("build_s"), t.get("time_s"),
                     "; " + " ".join(t["notes"]) if t.get("notes") else "", t["speedup"], t["file"], t.get("loader_read_back"),
                     t.get("packaged_copied")))
            for m, c in sorted(t["configs"].items(), key=lambda kv: int(kv[0])):
                print("  M=%-5s %s" % (m, c))
PY
  for d in $(find /var/lib/benchmark-cycle /tmp -maxdepth 4 -type d -name moe-config 2>/dev/null); do find "$d" -name '*.json' | tee -a "$W/summary.txt"; cp -r "$d" "$W/"; done
elif [ "$STAGE" = cost ]; then  # the issue's cost target: 3 backends x 13 points, one shape, one routing, warm JIT caches
  play cost-warmup playbooks/gpu_benchmark.yml -i inventory/h200 -e bc_results_dir="$W/warm" -e gpu_benchmark_stamp=warmup \
    -e '{"bc_sweep_tp_sizes": [8], "bc_sweep_batch_sizes": [1, 64, 4096], "bc_sweep_iters": 3, "bc_sweep_routing": [{"kind": "uniform"}]}'
  play cost playbooks/gpu_benchmark.yml -i inventory/h200 -e bc_results_dir="$W/res" -e gpu_benchmark_stamp=cost \
    -e '{"bc_sweep_tp_sizes": [1], "bc_sweep_iters": 20, "bc_sweep_routing": [{"kind": "uniform"}]}'
  digest "$W/res" | grep wall
else
  for run in run1 run2; do
    play "$run" playbooks/gpu_benchmark.yml -i inventory/h200 -e bc_results_dir="$W/res" -e gpu_benchmark_stamp="$run" || break
  done
  digest "$W/res"
  python3 bench/compare_runs.py --fidelity "$W"/res/*/run1/sweep-tp1-*.json "$W"/res/*/run2/sweep-tp1-*.json >> "$W/summary.txt" 2>&1
  python3 bench/compare_runs.py --fidelity "$W"/res/*/run1/sweep-tp8-*.json "$W"/res/*/run2/sweep-tp8-*.json >> "$W/summary.txt" 2>&1
fi
log "done"
