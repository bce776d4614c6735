#!/bin/bash
# What SGLang 0.5.16's memory release really does, on the REAL server on the lent H200 (tiny
# Kimi-architecture INT4 model, CUDA graphs): the facts the engine profile's `release` data and the
# SGLang double's release endpoints claim, read from the server they are about. Test-machine tooling.
#   device run (carry [".sglsrv"]): OUT=$OUT bash tests/gpu/probe_release.sh
# 1. --enable-memory-saver: /server_info, a fixed load (throughput), pause with a request in flight, a
#    request sent while paused, release, nvidia-smi while released, resume, continue, the answer after;
#    then a resume of what is not released and a release while busy (what the source says crashes).
# 2. the same server without the saver: the same load (what the saver costs), a release (a no-op?).
# 3. nvidia-smi -q and -q -x of the GPU (fixtures for the GPU health check).
# Writes release.log (one line per fact), raw.txt, server-saver.log, server-plain.log, nvidia-smi-q.tar.gz
set -uo pipefail
OUT=${OUT:-/tmp/release-out}; mkdir -p "$OUT"
PORT=30001; URL="http://127.0.0.1:$PORT"; KEY=sk-release-probe-77a1
T0=$(date +%s.%N)
since() { awk -v a="$(date +%s.%N)" -v b="${1:-$T0}" 'BEGIN{printf "%.2f", a-b}'; }
log() { echo "[$(since)s] $*" | tee -a "$OUT/release.log"; }
raw() { { echo "== [$(since)s] $1"; shift; "$@" 2>&1 | head -c 6000; echo; } >> "$OUT/raw.txt"; }
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }
post() {  # $1 path, $2 JSON body -> "code seconds body"
  curl -s -m "${3:-60}" -o /tmp/rp-body -w '%{http_code} %{time_total}s' -H "Authorization: Bearer $KEY" \
    -H 'Content-Type: application/json' -d "$2" "$URL$1"; echo " $(head -c 300 /tmp/rp-body)"
}
get() { curl -s -m "${2:-30}" -H "Authorization: Bearer $KEY" "$URL$1"; }
answer() { curl -s -m "${1:-30}" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-kimi","prompt":"2+2=","max_tokens":4,"temperature":0}' "$URL/v1/completions" | head -c 400; }

python3 .sglsrv/carry/unpack.py --dest /tmp/sglsrv/site > "$OUT/unpack.log" 2>&1
# shellcheck source=/dev/null
source .sglsrv/carry/env.sh 2>> "$OUT/unpack.log"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 .sglsrv/make_tiny_model.py --out /tmp/sglsrv/model-kimi --kind kimi > "$OUT/model.log" 2>&1
# torch_memory_saver preloads a hook into the scheduler: its libcudart.so.13 must resolve at exec
CUDART_DIR=$(python3 -c 'import glob,site,os; c=[p for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/**/libcudart.so.13*", recursive=True)]; print(os.path.dirname(c[0]) if c else "")' 2>/dev/null)
log "model: $(tail -1 "$OUT/model.log" | head -c 200); libcudart: ${CUDART_DIR:-none}; GPU used $(used) MiB"

start() {  # $1 name, then extra flags
  local name=$1; shift
  LD_LIBRARY_PATH="$CUDART_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" setsid python3 -m sglang.launch_server \
    --model-path /tmp/sglsrv/model-kimi --served-model-name tiny-kimi --tp-size 1 --host 127.0.0.1 --port $PORT \
    --attention-backend triton --sampling-backend pytorch --grammar-backend none --enable-metrics \
    --mem-fraction-static 0.3 --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 8 --api-key "$KEY" "$@" \
    > "$OUT/server-$name.log" 2>&1 < /dev/null &
  SPID=$!; local t; t=$(date +%s.%N)
  while [ "$(since "$t" | cut -d. -f1)" -lt 240 ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 30 "$URL/health_generate")" = 200 ] && { log "$name: ready in $(since "$t") s; GPU used $(used) MiB"; return 0; }
    kill -0 $SPID 2>/dev/null || { log "$name: server exited"; return 1; }
    sleep 1
  done
  log "$name: not ready in 240 s"; return 1
}
stop() { kill -TERM $SPID 2>/dev/null; for _ in $(seq 1 150); do kill -0 $SPID 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- -$SPID 2>/dev/null; pkill -KILL -f '[s]glang::' 2>/dev/null; sleep 2; log "stopped; GPU used $(used) MiB"; }
load() {  # a fixed load: $1 parallel requests x $2 tokens, three rounds; prints tokens/s per round
  python3 - "$URL" "$KEY" "$1" "$2" <<'PY'
import json, sys, threading, time, urllib.request
url, key, n, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def one(out):
    req = urllib.request.Request(url + "/v1/completions", method="POST", headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"},
                                 data=json.dumps({"model": "tiny-kimi", "prompt": "x", "max_tokens": tokens, "ignore_eos": True, "temperature": 0}).encode())
    out.append(json.load(urllib.request.urlopen(req, timeout=120))["usage"]["completion_tokens"])
rates = []
for _ in range(3):
    out, t = [], time.time()
    th = [threading.Thread(target=one, args=(out,)) for _ in range(n)]
    [x.start() for x in th]; [x.join() for x in th]
    rates.append(sum(out) / (time.time() - t))
print("tokens/s per round: " + ", ".join("%.0f" % r for r in rates) + " (%d requests x %d tokens)" % (n, tokens))
PY
}

# ---- 1. with the saver ------------------------------------------------------------------------------
if start saver --enable-memory-saver; then
  get /server_info > "$OUT/server_info-saver.json"
  log "server_info: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("enable_memory_saver=%s version=%s memory_usage=%s" % (d.get("enable_memory_saver"), d.get("version"), [s.get("memory_usage") for s in d.get("internal_states", [])]))' "$OUT/server_info-saver.json" 2>&1)"
  log "load (saver on): $(load 8 256)"
  log "answer before: $(answer)"
  curl -s -m 120 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"tiny-kimi","prompt":"x","max_tokens":6000,"ignore_eos":true}' "$URL/v1/completions" -o "$OUT/inflight.json" \
    -w 'in-flight request: %{http_code} in %{time_total}s\n' >> "$OUT/release.log" &
  CPID=$!; sleep 1.5
  log "loads with 1 in flight: $(get /v1/loads | head -c 300)"
  log "pause {mode: abort}: $(post /pause_generation '{"mode":"abort"}')"
  wait $CPID; log "the in-flight request got: $(head -c 300 "$OUT/inflight.json")"
  log "loads after pause: $(get /v1/loads | head -c 300)"
  curl -s -m 90 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"tiny-kimi","prompt":"2+2=","max_tokens":4,"temperature":0}' "$URL/v1/completions" -o "$OUT/held.json" \
    -w "request sent while paused: %{http_code} after %{time_total}s\n" >> "$OUT/release.log" &
  HPID=$!; sleep 1
  M0=$(used); TR=$(date +%s.%N)
  log "release {tags: [kv_cache]}: $(post /release_memory_occupation '{"tags":["kv_cache"]}'); GPU used $M0 -> $(used) MiB"
  for s in 0.5 1 2; do sleep "$s"; log "  +$(since "$TR") s: GPU used $(used) MiB"; done
  log "server_info while released: $(get /server_info 10 | python3 -c 'import json,sys; d=json.load(sys.stdin); print([s.get("memory_usage") for s in d.get("internal_states", [])])' 2>&1 | head -c 300)"
  log "loads while released: $(get /v1/loads 10 | head -c 200)"
  log "/health while paused+released: $(curl -s -o /dev/null -m 30 -w '%{http_code} in %{time_total}s' "$URL/health")"
  raw "nvidia-smi while released" nvidia-smi
  log "resume {tags: [kv_cache]}: $(post /resume_memory_occupation '{"tags":["kv_cache"]}'); GPU used -> $(used) MiB"
  log "continue: $(post /continue_generation '{}')"
  wait $HPID; log "the request held while paused got: $(head -c 300 "$OUT/held.json")"
  log "answer after resume: $(answer)"
  log "load after resume: $(load 8 256)"
  log "release again WITHOUT pause, idle: $(post /release_memory_occupation '{"tags":["kv_cache"]}'); GPU used $(used) MiB"
  log "resume: $(post /resume_memory_occupation '{"tags":["kv_cache"]}'); answer: $(answer)"
  log "resume of what is NOT released: $(post /resume_memory_occupation '{"tags":["kv_cache"]}' 30)"
  sleep 3; log "  server alive after it: $(kill -0 $SPID 2>/dev/null && echo yes || echo no); answer: $(answer 15)"
  if kill -0 $SPID 2>/dev/null && [ -n "$(answer 15)" ]; then
    curl -s -m 60 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
      -d '{"model":"tiny-kimi","prompt":"x","max_tokens":6000,"ignore_eos":true}' "$URL/v1/completions" -o "$OUT/busy.json" \
      -w 'request in flight at a release: %{http_code} in %{time_total}s\n' >> "$OUT/release.log" &
    BPID=$!; sleep 1.5
    log "release while BUSY (no pause): $(post /release_memory_occupation '{"tags":["kv_cache"]}' 30)"
    sleep 3; log "  server alive after it: $(kill -0 $SPID 2>/dev/null && echo yes || echo no)"
    wait $BPID
  fi
  grep -n -E "Scheduler hit an exception|AssertionError|KeyError|SIGQUIT|Traceback" "$OUT/server-saver.log" | head -20 >> "$OUT/release.log"
  stop
fi

# ---- 2. without the saver ---------------------------------------------------------------------------
if start plain; then
  log "server_info: enable_memory_saver=$(get /server_info | python3 -c 'import json,sys; print(json.load(sys.stdin).get("enable_memory_saver"))')"
  log "load (saver off): $(load 8 256)"
  log "pause: $(post /pause_generation '{"mode":"abort"}')"
  M0=$(used)
  log "release without the saver: $(post /release_memory_occupation '{"tags":["kv_cache"]}'); GPU used $M0 -> $(used) MiB"
  sleep 1; log "  +1 s: GPU used $(used) MiB"
  log "resume: $(post /resume_memory_occupation '{"tags":["kv_cache"]}'); continue: $(post /continue_generation '{}'); answer: $(answer)"
  stop
fi

# ---- 3. the GPU's own report ------------------------------------------------------------------------
mkdir -p /tmp/smi && nvidia-smi -q > /tmp/smi/nvidia-smi-q.txt 2>&1; nvidia-smi -q -x > /tmp/smi/nvidia-smi-q.xml 2>&1
nvidia-smi --query-gpu=index,name,uuid,persistence_mode,temperature.gpu,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_throttle_reasons.active,memory.used,memory.total --format=csv > /tmp/smi/query-gpu.csv 2>&1
(command -v dcgmi && dcgmi diag -r 1 -j) > /tmp/smi/dcgmi.txt 2>&1
(dmesg 2>&1 | grep -i "NVRM" | tail -20) > /tmp/smi/dmesg-nvrm.txt 2>&1
tar -C /tmp/smi -czf "$OUT/nvidia-smi-q.tar.gz" .
log "nvidia-smi -q: $(wc -l < /tmp/smi/nvidia-smi-q.txt) lines; query-gpu: $(tail -1 /tmp/smi/query-gpu.csv)"
sed -i "s/$KEY/<the key>/g" "$OUT"/server-*.log "$OUT/release.log" "$OUT/raw.txt"
log "done"
