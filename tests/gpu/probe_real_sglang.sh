#!/bin/bash
# The project's inference_health module, through the real ansible CLI, against the REAL SGLang 0.5.16
# HTTP server on the lent H200 (tiny Kimi-architecture INT4 model, Marlin MoE, CUDA graphs): what the
# engine profile claims, checked against the server it is about. Test-machine tooling, not product.
# Run there from the repo root, carrying the SGLang server carry and ansible-core's py3.12 wheels:
#   bash ../shared/gpu/sglang-server/build.sh     # here: builds ./.sglsrv (git-ignored)
#   pip download --only-binary=:all: --python-version 3.12 ... -d .gpuwheels ansible-core==2.19.14
#   device run (carry [".sglsrv", ".gpuwheels"]): OUT=$OUT bash tests/gpu/probe_real_sglang.sh
# Writes probe.log (one line per probe: time, phase, status, latency, reason), server.log, raw.txt.
set -uo pipefail
OUT=${OUT:-/tmp/probe-out}; mkdir -p "$OUT"
KEY=sk-gpu-probe-5e1d
PORT=30001; URL="http://127.0.0.1:$PORT"
T0=$(date +%s.%N)
since() { awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}'; }
log() { echo "[$(since)s] $*" | tee -a "$OUT/probe.log"; }
raw() { { echo "== [$(since)s] $1"; shift; "$@" 2>&1 | head -c 4000; echo; } >> "$OUT/raw.txt"; }

# ansible-core for the machine's Python 3.12, from the carried wheels
python3 -m pip install -q --no-index --find-links .gpuwheels --target /tmp/ansible-site ansible-core > "$OUT/pip.log" 2>&1 \
  || { log "pip install of ansible-core failed"; cat "$OUT/pip.log"; exit 1; }
probe() {  # $1: the module's arguments (JSON), $2: the module (inference_health when not given); prints one line
  ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_LOAD_CALLBACK_PLUGINS=0 ANSIBLE_CALLBACKS_ENABLED=inference_ops.benchmark_cycle.benchmark_cycle_progress ANSIBLE_STDOUT_CALLBACK=ansible.builtin.oneline \
  ANSIBLE_CALLBACK_RESULT_FORMAT=json ANSIBLE_COLLECTIONS_PATH=$PWD/collections PYTHONPATH=/tmp/ansible-site \
    ${ANSIBLE_CMD:-python3 /tmp/ansible-site/bin/ansible} localhost -i localhost, -c local -e ansible_python_interpreter=python3 \
    -m "inference_ops.benchmark_cycle.${2:-inference_health}" -a "$1" 2>/dev/null | python3 -c '
import json, sys
out = sys.stdin.read()
head, _, body = out.partition("=>")
try:
    r = json.JSONDecoder().raw_decode(body.strip())[0]
except ValueError:
    print("UNPARSED", out[:300].replace("\n", " ")); sys.exit()
print("%s phase=%s status=%s latency_ms=%s ready=%s in_flight=%s stage=%r %s" % (
    head.split("|")[1].strip() if "|" in head else "?", r.get("phase"), r.get("http_status"), r.get("latency_ms"),
    r.get("ready"), r.get("in_flight"), r.get("stage", ""), (r.get("msg") or r.get("reason") or r.get("answer") or "")[:200]))'
}

# the real server, from the shared carry (unpack, environment, its tiny model script: test-machine tools)
python3 .sglsrv/carry/unpack.py --dest /tmp/sglsrv/site > "$OUT/unpack.log" 2>&1
# shellcheck source=/dev/null
source .sglsrv/carry/env.sh 2>> "$OUT/unpack.log"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 .sglsrv/make_tiny_model.py --out /tmp/sglsrv/model-kimi --kind kimi > "$OUT/model.log" 2>&1
log "model: $(tail -1 "$OUT/model.log")"
setsid python3 -m sglang.launch_server --model-path /tmp/sglsrv/model-kimi --served-model-name tiny-kimi --tp-size 1 \
  --host 127.0.0.1 --port $PORT --attention-backend triton --sampling-backend pytorch --grammar-backend none \
  --enable-metrics --mem-fraction-static 0.3 --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 8 \
  --api-key "$KEY" > "$OUT/server.log" 2>&1 < /dev/null &
SPID=$!
log "launched pid $SPID"
A='"url":"'$URL'","engine":"sglang","engine_version":"0.5.16"'
READY=0
while [ "$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{print (a-b < 420)}')" = 1 ]; do
  line=$(probe "{$A,\"timeout\":30,\"probe\":\"readiness\"}")
  log "readiness: $line"
  case "$line" in *ready=True*) READY=1; break;; *phase=failed*) break;; esac
  kill -0 $SPID 2>/dev/null || { log "server exited"; break; }
  sleep 1
done
if [ $READY = 1 ]; then
  log "completion: $(probe "{$A,\"probe\":\"completion\",\"model\":\"tiny-kimi\",\"api_key\":\"$KEY\",\"timeout\":30}")"
  log "completion, wrong model: $(probe "{$A,\"probe\":\"completion\",\"model\":\"tiny-k3\",\"api_key\":\"$KEY\",\"timeout\":30}")"
  log "completion, no key: $(probe "{$A,\"probe\":\"completion\",\"model\":\"tiny-kimi\",\"timeout\":30}")"
  log "liveness: $(probe "{$A,\"probe\":\"liveness\",\"timeout\":30}")"
  log "load, idle: $(probe "{$A,\"api_key\":\"$KEY\",\"timeout\":10}" inference_load_info)"
  raw "/v1/loads idle" curl -s -H "Authorization: Bearer $KEY" "$URL/v1/loads"
  raw "/metrics idle" sh -c "curl -s $URL/metrics | grep -E '^sglang:(num_running_reqs|num_queue_reqs|engine_startup_time|startup)'"
  # a long request in flight
  curl -s -m 120 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"tiny-kimi","prompt":"2+2=","max_tokens":6000,"temperature":0,"ignore_eos":true}' "$URL/v1/completions" \
    > "$OUT/long-request.json" 2>&1 &
  CPID=$!
  sleep 1.5
  log "load, 1 in flight: $(probe "{$A,\"api_key\":\"$KEY\",\"timeout\":10}" inference_load_info)"
  raw "/v1/loads busy" curl -s -H "Authorization: Bearer $KEY" "$URL/v1/loads"
  raw "/metrics busy" sh -c "curl -s $URL/metrics | grep -E '^sglang:(num_running_reqs|num_queue_reqs)'"
  raw "nvidia-smi before SIGTERM" nvidia-smi --query-gpu=memory.used --format=csv,noheader
  raw "processes" sh -c "ps -eo pid,ppid,args | grep -E '[s]glang' | cut -c1-200"
  TS=$(date +%s.%N); kill -TERM $SPID; log "SIGTERM sent to $SPID with the request in flight"
  sleep 1
  raw "/health during shutdown" curl -s -o /dev/null -w '%{http_code} %{time_total}s' "$URL/health"
  while kill -0 $SPID 2>/dev/null && [ "$(awk -v a="$(date +%s.%N)" -v b="$TS" 'BEGIN{print (a-b < 90)}')" = 1 ]; do sleep 0.2; done
  log "main process gone $(awk -v a="$(date +%s.%N)" -v b="$TS" 'BEGIN{printf "%.1f", a-b}') s after SIGTERM (alive: $(kill -0 $SPID 2>/dev/null && echo yes || echo no))"
  wait $CPID; log "the in-flight request: $(head -c 300 "$OUT/long-request.json")"
  raw "processes after" sh -c "ps -eo pid,args | grep -E '[s]glang' | cut -c1-200"
  raw "nvidia-smi after" nvidia-smi --query-gpu=memory.used --format=csv,noheader
fi
kill -KILL -- -$SPID 2>/dev/null; pkill -KILL -f '[s]glang::' 2>/dev/null
log "done"
grep -c "$KEY" "$OUT/server.log" | sed 's/^/server.log lines holding the key: /' | tee -a "$OUT/probe.log"
sed -i "s/$KEY/<the key>/g" "$OUT/server.log"
