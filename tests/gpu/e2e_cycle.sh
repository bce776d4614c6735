#!/bin/bash
# The whole benchmark cycle against the REAL SGLang 0.5.16 server under systemd on the lent H200:
# systemd 252 as PID 1 of its own namespaces (tests/gpu/sd-boot.sh), the project's roles provision the
# unit (playbooks/gpu_provision.yml, inventory/gpu, lab/make_kimi_model.py), then
# `ansible-playbook benchmark_cycle.yml -i inventory/gpu` with requests in flight, then faults.
# Test-machine tooling (the carried SGLang and systemd stand in for a GPU host's own), not CI.
#   device run, carry [".sglsrv", ".gpuwheels", ".sd"]:  OUT=$OUT SCENARIO=cycle bash tests/gpu/e2e_cycle.sh
# SCENARIO: provisioned (as release is, then nothing: with OPERATOR_RESTARTS, the control for #44 item 16) | cycle (provision, cycle with a client, bad-flag fault) | faults (provision, server killed
# during its reload, drain deadline) | all | release (the memory saver on and the KV cache at 0.92 of
# the GPU, as on the real site: auto releases in place; then the same cycle with a stop; then the
# saver off; downtime of each and the throughput with the saver on and off) | whole (the saver and the weights'
# CPU backup on, a site polling: three release_all cycles in a row, then the backup off: the preflight's refusal
# and a deliberate corruption, a resume without the backup, caught by identity). Everything lands in $OUT/e2e.tar.gz and $OUT/summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/e2e-out}; W=/tmp/e2e; ARCHIVE=e2e.tar.gz
SCENARIO=${SCENARIO:-cycle}
# shellcheck source=tests/gpu/setup.sh
source tests/gpu/setup.sh
trap 'finish; exit 124' TERM  # a run cut at its time limit still brings back what it has
# shellcheck source=/dev/null
source tests/gpu/sd-boot.sh
SD_DEBS=.sd sd_boot >> "$W/summary.txt" 2>&1 || { log "systemd did not boot"; exit 1; }
log "python3 is $(command -v python3); systemd: $(sd systemctl is-system-running)"

# what only the test machine needs: the carried SGLang's environment, its missing-library flags
# torch_memory_saver (--enable-memory-saver) preloads a hook whose libcudart.so.13 must resolve at exec
CUDART_DIR=$(python3 -c 'import glob,site,os; c=[p for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/**/libcudart.so.13*", recursive=True)]; print(os.path.dirname(c[0]) if c else "")' 2>/dev/null)
[ -n "$CUDART_DIR" ] && export LD_LIBRARY_PATH="$CUDART_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 - > "$W/gpu-vars.json" <<'PY'
import json, os
keep = ("PYTHONPATH", "TVM_FFI_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_HOME", "PATH", "LD_LIBRARY_PATH", "CC", "NVCC_APPEND_FLAGS")
env = {k: os.environ[k] for k in keep if os.environ.get(k)}
env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", SGLANG_HEALTH_CHECK_TIMEOUT="20")
python = os.popen("command -v python3").read().strip()  # the venv's own path (its symlink target has no packages)
print(json.dumps({"bc_engine_env": env, "bc_engine_python": python, "bc_sweep_python": python,
                  "bc_engine_extra_args": ["--attention-backend", "triton", "--sampling-backend", "pytorch",
                                           "--grammar-backend", "none", "--cuda-graph-backend-prefill", "disabled"]}))
PY
UNIT=sglang-k26-ddtree
play() {  # $1: a name for the logs; the rest: ansible-playbook's arguments
  local name=$1 t; shift; t=$(date +%s.%N)
  sd env PYTHONPATH="/tmp/ansible-site:$PYTHONPATH" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0 \
    ANSIBLE_CALLBACKS_ENABLED=inference_ops.benchmark_cycle.benchmark_cycle_progress BC_CYCLE_EVENT_LOG="$W/events-$name.jsonl" BC_CYCLE_JUNIT="$W/junit-$name.xml" \
    python3 /tmp/ansible-site/bin/ansible-playbook -e @"$W/gpu-vars.json" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(since "$t") s; $(grep -E '^[a-z0-9]+ +: ok=' "$W/$name.log" | tail -1 | tr -s ' ')"
  return $rc
}
answer() { curl -s -m 30 -H 'Content-Type: application/json' -d '{"model":"kimi-k2.6","prompt":"2+2=","max_tokens":4,"temperature":0}' \
  http://127.0.0.1:30001/v1/completions | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null || echo "(no answer)"; }
serving() { echo "$(sd systemctl is-active $UNIT 2>/dev/null), answers 2+2=$(answer)"; }
journal() { sd journalctl --no-pager -o short-iso -u $UNIT > "$W/journal-$1.txt" 2>&1; }

site() {  # the real site's shape of memory: KV cache at 0.92 of the GPU, saver on|off; the full K2.6 sweep at TP1
  python3 - "$1" "$2" <<'PY'
import json, sys
print(json.dumps({"bc_stop_policy": sys.argv[1], "bc_lb_remove": {"argv": ["/tmp/lb-hook", "remove"]},
                "bc_lb_restore": {"argv": ["/tmp/lb-hook", "restore"]},
                "bc_engine_settings": {"model_path": "/opt/models/kimi-tiny", "served_model_name": "kimi-k2.6", "tp_size": 1,
                                       "host": "127.0.0.1", "mem_fraction_static": 0.92, "enable_metrics": True,
                                       "cuda_graph_max_bs": 8, "watchdog_timeout": 900, "enable_memory_saver": sys.argv[2] == "on"},
                "bc_sweep_tp_sizes": [1], "bc_sweep_batch_sizes": [1, 4, 16, 64, 256, 1024], "bc_sweep_iters": 10,
                "bc_textfile_dir": "/tmp/bc-textfile"}))
PY
}
mkdir -p /tmp/bc-textfile
whole_site() {  # $1: policy, $2: the weights' CPU backup on|off; the saver on, a smaller sweep (one command's time)
  site "$1" on | python3 -c 'import json,sys; d=json.load(sys.stdin); d["bc_engine_settings"]["enable_weights_cpu_backup"] = sys.argv[1] == "on"; d.update(bc_sweep_batch_sizes=[1, 16, 256], bc_sweep_iters=5); print(json.dumps(d))' "$2"
}
if [ "$SCENARIO" = whole ]; then
  play provision playbooks/gpu_provision.yml -i inventory/gpu -e "$(whole_site always on)"
elif [ "$SCENARIO" = release ] || [ "$SCENARIO" = site ] || [ "$SCENARIO" = owner ] || [ "$SCENARIO" = provisioned ]; then  # provisioned as the release scenario wants it: the saver on, the KV cache at 0.92
  play provision playbooks/gpu_provision.yml -i inventory/gpu -e "$(site always on)"
else
  play provision playbooks/gpu_provision.yml -i inventory/gpu
fi
log "after provisioning: $(serving); GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"

on_event() {  # $1: play name, $2: a task name, then a command to run once that task has started
  local log="$W/events-$1.jsonl" task=$2; shift 2
  for _ in $(seq 1 3000); do grep -q "\"task\": \"$task\"" "$log" 2>/dev/null && break; sleep 0.1; done
  "$@"
}
long_requests() {  # $1 requests of 8000 tokens, in parallel; each line of client.txt: status and seconds
  local i
  for i in $(seq 1 "$1"); do
    curl -s -m 120 -H 'Content-Type: application/json' -d '{"model":"kimi-k2.6","prompt":"x","max_tokens":8000,"ignore_eos":true}' \
      http://127.0.0.1:30001/v1/completions -o /dev/null -w "request $i: %{http_code} in %{time_total}s, started $(date +%s.%N)\n" \
      >> "$W/client.txt" &
  done
  wait
}
kill_unit() { sleep "$1"; sd systemctl kill -s KILL $UNIT >> "$W/killed.txt" 2>&1; echo "$(date +%s.%N) SIGKILL to $UNIT" >> "$W/killed.txt"; }
wait_serving() {  # up to $1 s for the service to answer again
  local t; t=$(date +%s.%N)
  while [ "$(since "$t" | cut -d. -f1)" -lt "$1" ]; do case "$(serving)" in "active, answers 2+2=4"*) return 0;; esac; sleep 2; done
  return 1
}

sampler() {  # $1: name; one 1-token completion every 0.5 s until $W/stop-$1
  while [ ! -f "$W/stop-$1" ]; do
    code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' -H 'Content-Type: application/json' \
      -d '{"model":"kimi-k2.6","prompt":"2+2=","max_tokens":1,"temperature":0}' http://127.0.0.1:30001/v1/completions)
    echo "$(date +%s.%N) $code" >> "$W/samples-$1.txt"; sleep 0.5
  done
}

if [ "$SCENARIO" = cycle ] || [ "$SCENARIO" = all ]; then
  # once the cycle holds the lock (its drain starts ~2 s later), a client puts 4 long requests in flight
  # (8000 tokens each, ~15-20 s together), so the drain has real work to wait for
  on_event cycle "inference_ops.benchmark_cycle.cycle_lock : Take the lock" long_requests 4 &
  # downtime: sample the service every 0.5 s through the whole cycle (samples-cycle.txt)
  sampler cycle &
  play cycle benchmark_cycle.yml -i inventory/gpu
  touch "$W/stop-cycle"; sleep 1
  log "after the cycle: $(serving); GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  journal cycle
  cp -r /tmp/bc-results "$W/results" 2>/dev/null
  [ "${BADFLAG:-1}" = 1 ] && play badflag benchmark_cycle.yml -i inventory/gpu -e '{"bc_engine_extra_args": ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none", "--cuda-graph-backend-prefill", "disabled", "--no-such-flag"]}'
  [ "${BADFLAG:-1}" = 1 ] && { log "after the bad flag: $(serving)"; journal badflag; }
fi

if [ "$SCENARIO" = faults ] || [ "$SCENARIO" = all ]; then
  wait_serving 180 || log "not serving before the faults"
  # the server killed during its reload: SIGKILL to the unit 12 s after the cycle's start (its load takes ~30 s)
  on_event killed "inference_ops.benchmark_cycle.service_start : Start the unit" kill_unit 12 &
  play killed benchmark_cycle.yml -i inventory/gpu
  log "right after the kill during the reload: $(serving)"
  journal killed
  wait_serving 240; log "after systemd's own restart (Restart=on-failure): $(serving)"
  # the drain deadline: long requests in flight when the drain starts, deadline 5 s, abort
  on_event deadline "inference_ops.benchmark_cycle.cycle_lock : Take the lock" long_requests 2 &
  play deadline benchmark_cycle.yml -i inventory/gpu -e '{"bc_drain_deadline_s": 5, "bc_drain_on_deadline": "abort"}'
  log "after the drain deadline: $(serving)"
fi
if [ "$SCENARIO" = release ]; then
  ROUTER="$W/router.txt"; printf '#!/bin/sh\necho "$1 $(date +%%s.%%N)" >> %s\n' "$ROUTER" > /tmp/lb-hook; chmod +x /tmp/lb-hook
  downtime() {  # $1: name -> router out..back and the seconds no sample answered 200
    python3 - "$W/samples-$1.txt" "$ROUTER" "$1" <<'PY'
import sys
rows = [(float(t), c) for t, c in (l.split() for l in open(sys.argv[1]) if l.strip())]
down, last = 0.0, None
for (t, c), nxt in zip(rows, rows[1:] + [(None, None)]):
    if c != "200" and nxt[0] is not None:
        down += nxt[0] - t
marks = [l.split() for l in open(sys.argv[2])]
out = [float(t) for a, t in marks if a == "remove"][-1:]
back = [float(t) for a, t in marks if a == "restore"][-1:]
print("%s: router out -> back %s s; not answering %.1f s (%d samples, %d not 200)" % (
    sys.argv[3], "%.1f" % (back[0] - out[0]) if out and back and back[0] > out[0] else "n/a", down, len(rows),
    sum(c != "200" for _t, c in rows)))
PY
  }
  load() {  # $1: name; 8 parallel requests x 256 tokens, 6 rounds (the first is warm-up)
    python3 - "$1" <<'PY' | tee -a "$W/summary.txt"
import json, statistics, sys, threading, time, urllib.request
def one(out):
    req = urllib.request.Request("http://127.0.0.1:30001/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "kimi-k2.6", "prompt": "x", "max_tokens": 256, "ignore_eos": True}).encode())
    out.append(json.load(urllib.request.urlopen(req, timeout=120))["usage"]["completion_tokens"])
rates = []
for _ in range(6):
    out, t = [], time.time()
    th = [threading.Thread(target=one, args=(out,)) for _ in range(8)]
    [x.start() for x in th]; [x.join() for x in th]
    rates.append(sum(out) / (time.time() - t))
print("load %s: tokens/s %s; median of rounds 2-6: %.0f" % (sys.argv[1], ", ".join("%.0f" % r for r in rates), statistics.median(rates[1:])))
PY
  }
  cycle() {  # $1 name, $2 policy, $3 saver on|off
    site "$2" "$3" > "$W/site-$1.json"
    sampler "$1" & local sp=$!
    play "$1" benchmark_cycle.yml -i inventory/gpu -e @"$W/site-$1.json"
    touch "$W/stop-$1"; wait $sp
    log "$(downtime "$1")"
    log "$1: $(grep -o 'the sweep [a-z ]*fits[^)]*)' "$W/$1.log" | head -1); freed: $(grep -oE 'freed_mib.{0,3}[0-9-]+' "$W/$1.log" | head -1)"
    log "$1: after: $(serving); GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
    log "$1: $(grep -oE 'GPU health \((pre|post)\)[^"]*|healthy: (true|false)' "$W/$1.log" | sort | uniq -c | tr '\n' ' ')"
    cp /tmp/bc-textfile/*.prom "$W/textfile-$1.prom" 2>/dev/null
    journal "$1"
  }
  # provisioned with the saver on: auto must release; then the same cycle with a stop; then the saver off
  log "saver on: $(serving); GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader); server_info: $(curl -s -m 10 http://127.0.0.1:30001/server_info | python3 -c 'import json,sys; d=json.load(sys.stdin); print("enable_memory_saver=%s memory_usage=%s" % (d.get("enable_memory_saver"), [s.get("memory_usage") for s in d["internal_states"]]))')"
  : > "$ROUTER"; cycle release auto on
  : > "$ROUTER"; cycle stop always on
  load saver-on
  : > "$ROUTER"; cycle saver-off always off
  load saver-off
  cp -r /tmp/bc-results "$W/results" 2>/dev/null
fi
if [ "$SCENARIO" = site ]; then
  # #24: the site around the server through every cycle (lab/site_sim.py: a load balancer's health check
  # every 2 s, a stray completion straight to the port every 3 s, a metrics scrape every 5 s, in every phase):
  # three release cycles in a row, a stop cycle, then the controller SIGKILLed during a release cycle's sweep
  # while the paused server holds a request, and a re-run; the unit's state after each, systemctl --failed
  ROUTER="$W/router.txt"; printf '#!/bin/sh\necho "$1 $(date +%%s.%%N)" >> %s\n' "$ROUTER" > /tmp/lb-hook; chmod +x /tmp/lb-hook
  python3 lab/site_sim.py --url http://127.0.0.1:30001 --health-every 2 --request-every 3 --scrape-every 5 \
    --timeout 120 --log "$W/site.jsonl" > "$W/site-sim.log" 2>&1 & SIM=$!
  unit_state() { sd systemctl show -p ActiveState -p SubState -p Result -p NRestarts -p InvocationID $UNIT | tr '\n' ' '; }
  site auto on > "$W/site-release.json"; site always on > "$W/site-stop.json"
  failed_tasks() { grep -E -A8 '^fatal:|FAILED!' "$W/$1.log" | cut -c1-600 | head -40 >> "$W/summary.txt"; }
  CASES=${SITE_CASES:-cycles killed}
  [[ " $CASES " == *" cycles "* ]] && for i in 1 2 3; do
    : >> "$ROUTER"; play "release$i" benchmark_cycle.yml -i inventory/gpu -e @"$W/site-release.json" || failed_tasks "release$i"
    log "release$i: $(grep -o 'its KV cache released in place[^"]*' "$W/release$i.log" | head -1 | cut -c1-90); after: $(serving); unit: $(unit_state)"
  done
  [[ " $CASES " == *" cycles "* ]] && { play stop benchmark_cycle.yml -i inventory/gpu -e @"$W/site-stop.json" || failed_tasks stop; }
  [[ " $CASES " == *" cycles "* ]] && log "stop: after_stop $(grep -oE '"after_stop": \{[^}]*\}' "$W/stop.log" | head -1); reset_failed $(grep -oE '"reset_failed": (true|false)' "$W/stop.log" | head -1)"
  [[ " $CASES " == *" cycles "* ]] && log "stop: after: $(serving); unit: $(unit_state)"
  # the controller dies mid-sweep of a release cycle; meanwhile a client's request reaches the paused server
  BEFORE=$(sd systemctl show -p MainPID --value $UNIT)
  play killed benchmark_cycle.yml -i inventory/gpu -e @"$W/site-release.json" & PLAY=$!
  for _ in $(seq 1 1200); do pgrep -f '[b]c_marlin' > /dev/null && break; sleep 0.1; done
  curl -s -m 300 -H 'Content-Type: application/json' -d '{"model":"kimi-k2.6","prompt":"2+2=","max_tokens":2}' \
    http://127.0.0.1:30001/v1/completions -o "$W/held.json" -w 'held request: %{http_code} in %{time_total}s\n' >> "$W/held.txt" 2>&1 &
  HELD=$!
  sleep 2
  pkill -KILL -f '[a]nsible-playbook'; KILLED=$(date +%s.%N)
  wait $PLAY 2>/dev/null
  log "controller SIGKILLed in the sweep (sweep still running: $(pgrep -fc '[b]c_marlin')); unit: $(unit_state)"
  play rerun benchmark_cycle.yml -i inventory/gpu -e @"$W/site-release.json" || failed_tasks rerun
  log "rerun: $(grep -oE 'broke the lock of cycle [^ ]+' "$W/rerun.log" | head -1); killed -> rerun ended $(since "$KILLED") s"
  log "rerun: after: $(serving); unit: $(unit_state); MainPID before $BEFORE, now $(sd systemctl show -p MainPID --value $UNIT)"
  kill $HELD 2>/dev/null; wait $HELD 2>/dev/null; log "held request: $(cat "$W/held.txt" 2>/dev/null) $(head -c 200 "$W/held.json" 2>/dev/null)"
  log "router: $(awk '{print $1}' "$ROUTER" | tr '\n' ' ')"
  kill $SIM; wait $SIM 2>/dev/null
  log "site saw: $(python3 lab/site_sim.py --summary "$W/site.jsonl")"
  log "systemctl --failed: [$(sd systemctl --failed --no-legend --plain | tr '\n' ';')]"
  journal site
fi
if [ "$SCENARIO" = owner ]; then
  # #26: the controller lost (ansible-playbook and its workers SIGKILLed at once) during a release cycle's sweep,
  # with a 20 s grace and nothing else: the host's switch reads the heartbeat's broken promise, ends the sweep and
  # restarts the released server; then the recovery job says what it finds, takes the lock over and puts the
  # host back in the router
  ROUTER="$W/router.txt"; printf '#!/bin/sh\necho "$1 $(date +%%s.%%N)" >> %s\n' "$ROUTER" > /tmp/lb-hook; chmod +x /tmp/lb-hook
  unit_state() { sd systemctl show -p ActiveState -p SubState -p NRestarts -p InvocationID $UNIT | tr '\n' ' '; }
  site auto on | python3 -c 'import json,sys; d=json.load(sys.stdin); d.update(bc_switch_grace_s=20, bc_sweep_iters=2000); print(json.dumps(d))' \
    > "$W/owner.json"
  play lost benchmark_cycle.yml -i inventory/gpu -e @"$W/owner.json" & PLAY=$!
  for _ in $(seq 1 1800); do pgrep -f '[b]c_marlin' > /dev/null && break; sleep 0.1; done
  sleep 3
  log "before the loss: $(unit_state); heartbeat promise in $(( $(sd cat /run/lock/benchmark-cycle-$UNIT.lock/heartbeat 2>/dev/null || echo 0) - $(date +%s) )) s"
  pkill -KILL -f '[a]nsible-playbook'; LOST=$(date +%s.%N)
  wait $PLAY 2>/dev/null
  log "controller lost in the sweep (sweeps running: $(pgrep -fc '[b]c_marlin')); unit: $(unit_state)"
  if wait_serving 400; then log "serving again $(since "$LOST") s after the loss: $(serving); unit: $(unit_state)"
  else log "NOT serving 400 s after the loss: $(serving)"; fi
  sd journalctl --no-pager -o short-iso -u "bc-deadman-$UNIT.service" | grep -v 'Started\|Deactivated' > "$W/switch.txt" 2>&1
  log "switch: $(tail -c 400 "$W/switch.txt")"
  play recover playbooks/recover.yml -i inventory/gpu -e @"$W/owner.json"
  log "recover: $(grep -oE 'h200: (the lock|no lock)[^"]*' "$W/recover.log" | head -1 | cut -c1-400)"
  log "recover: $(grep -oE '[a-z0-9]+ recovered: [^"]*' "$W/recover.log" | head -1); after: $(serving); locks left: $(sd ls /run/lock | grep -c '^benchmark-cycle')"
  log "router: $(awk '{print $1}' "$ROUTER" | tr '\n' ' ')"
  log "systemctl --failed: [$(sd systemctl --failed --no-legend --plain | tr '\n' ';')]"
  journal owner
fi
if [ "$SCENARIO" = whole ]; then
  # #47: the whole GPU released in place, three cycles in a row with a site polling (a load balancer's health check
  # every 2 s, a stray completion every 3 s, a scrape every 5 s), the GPU's memory sampled every 0.5 s
  ROUTER="$W/router.txt"; printf '#!/bin/sh\necho "$1 $(date +%%s.%%N)" >> %s\n' "$ROUTER" > /tmp/lb-hook; chmod +x /tmp/lb-hook
  unit_state() { sd systemctl show -p ActiveState -p NRestarts -p InvocationID $UNIT | tr '\n' ' '; }
  gpu_sampler() { while [ ! -f "$W/stop-gpu" ]; do echo "$(date +%s.%N) $(nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits | tr -d ' ' | tr '\n' ' ')" >> "$W/gpu-mem.txt"; sleep 0.5; done; }
  python3 lab/site_sim.py --url http://127.0.0.1:30001 --health-every 2 --request-every 3 --scrape-every 5 \
    --timeout 120 --log "$W/site.jsonl" > "$W/site-sim.log" 2>&1 & SIM=$!
  gpu_sampler & GS=$!
  whole_site release_all on > "$W/whole.json"
  log "server_info: $(curl -s -m 10 http://127.0.0.1:30001/server_info | python3 -c 'import json,sys; d=json.load(sys.stdin); print("version=%s saver=%s backup=%s memory_usage=%s" % (d.get("version"), d.get("enable_memory_saver"), d.get("enable_weights_cpu_backup"), [s.get("memory_usage") for s in d["internal_states"]]))')"
  for i in 1 2 3; do
    BEFORE=$(unit_state); : > "$ROUTER"; T=$(date +%s.%N)
    sampler "whole$i" & SP=$!
    play "whole$i" benchmark_cycle.yml -i inventory/gpu -e @"$W/whole.json"
    touch "$W/stop-whole$i"; wait $SP
    PYTHONPATH=/tmp/ansible-site python3 - "$W" "whole$i" "$T" <<'PY' | tee -a "$W/summary.txt"
import json, re, sys, yaml
w, name, t0 = sys.argv[1], sys.argv[2], float(sys.argv[3])
text = open("%s/%s.log" % (w, name)).read()
block = text.split("TASK [inference_ops.benchmark_cycle.cycle : Summarise the cycle]", 1)[-1].split("ok: [h200] =>", 1)[-1].split("\nTASK ", 1)[0]
try:
    summ = (yaml.safe_load(block) or {}).get("msg") or {}
except yaml.YAMLError:
    summ = {}
rel = (summ.get("drain") or {}).get("release") or {}
ident = summ.get("identity") or {}
rows = [l.split() for l in open(w + "/gpu-mem.txt") if float(l.split()[0]) >= t0]
total = max((int(g.split(",")[2]) for r in rows for g in r[1:]), default=0)
marks = [l.split() for l in open(w + "/router.txt") if l.strip()]
out = [float(t) for a, t in marks if a == "remove"]; back = [float(t) for a, t in marks if a == "restore"]
samples = [(float(t), c) for t, c in (l.split() for l in open("%s/samples-%s.txt" % (w, name)) if l.strip())]
down = sum(n[0] - t for (t, c), n in zip(samples, samples[1:]) if c != "200")
free = rel.get("free_mib_after")
print("%s: %s; tags %s; free after the release %s of %s MiB (%s %%), freed %s MiB; steps %s; router out -> back %s s; "
      "not answering %.1f s of %d samples; sweep %s s; identity %s %s checks %s checksums %s" % (
      name, summ.get("strategy"), rel.get("tags"), free, total, "%.1f" % (100.0 * free / total) if free and total else "n/a",
      rel.get("freed_mib"), ["%s %s %sms" % (s.get("step"), s.get("http_status"), s.get("ms")) for s in rel.get("steps") or []],
      "%.1f" % (back[-1] - out[-1]) if out and back else "n/a", down, len(samples),
      re.findall(r"sweep: ([0-9.]+)", json.dumps(summ))[:1], ident.get("verdict"), ident.get("why"), ident.get("checks"),
      {k: {r: c[:12] for r, c in (v or {}).items()} for k, v in (ident.get("checksums") or {}).items()}))
PY
    log "whole$i: before: $BEFORE; after: $(unit_state); $(serving)"
    grep -E -A8 '^fatal:|FAILED!' "$W/whole$i.log" | cut -c1-600 | head -30 >> "$W/summary.txt"
    journal "whole$i"
  done
  log "router: $(awk '{print $1}' "$ROUTER" | tr '\n' ' ')"
  if [ "${WHOLE_CORRUPT:-1}" = 1 ]; then
    # the backup off: a stop cycle applies it; the preflight then refuses release_all naming the missing piece
    whole_site always off > "$W/nobackup.json"; play nobackup benchmark_cycle.yml -i inventory/gpu -e @"$W/nobackup.json"
    whole_site release_all off > "$W/refused.json"; play refused benchmark_cycle.yml -i inventory/gpu -e @"$W/refused.json"
    log "refused: $(grep -oE 'the whole GPU cannot be released: [^.]*' "$W/refused.log" | head -1 | cut -c1-300)"
    log "refused: after: $(unit_state); $(serving)"
    play corrupt tests/gpu/whole_corrupt.yml -i inventory/gpu
    log "corrupt: $(grep -oE 'CORRUPT-VERDICT .*' "$W/corrupt.log" | head -1 | cut -c1-900)"
    log "corrupt: after the resume without a backup: $(serving | tr -d '\000' | cat -v)"
    sd systemctl restart $UNIT; wait_serving 240; log "corrupt: after a restart: $(serving)"
  fi
  cp -r /tmp/bc-results "$W/results" 2>/dev/null
  touch "$W/stop-gpu"; wait $GS; kill $SIM; wait $SIM 2>/dev/null
  log "site saw: $(python3 lab/site_sim.py --summary "$W/site.jsonl")"
  log "systemctl --failed: [$(sd systemctl --failed --no-legend --plain | tr '\n' ';')]"
fi
if [ "${OPERATOR_RESTARTS:-0}" -gt 0 ]; then
  # #44: after the cycles' own starts (and any switch restart), an operator's plain stop and start must still work:
  # systemd's start limit (StartLimitBurst in StartLimitIntervalSec) must not have been spent by the cycle
  unit_state() { sd systemctl show -p ActiveState -p SubState -p Result -p NRestarts -p ExecMainStatus -p InvocationID $UNIT | tr '\n' ' '; }
  log "start limit: $(sd systemctl show -p StartLimitBurst -p StartLimitIntervalUSec $UNIT | tr '\n' ' '); unit: $(unit_state)"
  sd systemd-analyze log-level debug  # systemd's own reasons land on its console (/tmp/sd-console.log), not in its journal
  for i in $(seq 1 "$OPERATOR_RESTARTS"); do
    sd systemctl stop $UNIT > "$W/operator-stop-$i.txt" 2>&1; log "operator stop $i: rc=$? $(unit_state)"
    sd systemctl start $UNIT > "$W/operator-start-$i.txt" 2>&1; rc=$?
    log "operator start $i: rc=$rc $(tr '\n' ' ' < "$W/operator-start-$i.txt" | cut -c1-300) $(unit_state)"
    if [ "$rc" -ne 0 ]; then  # what systemd says of the refused start: the unit's own and systemd's lines about it
      sd systemctl status --no-pager -l $UNIT > "$W/operator-status-$i.txt" 2>&1
      sd journalctl --no-pager -o short-iso -n 40 _PID=1 > "$W/operator-systemd-$i.txt" 2>&1
      log "operator start $i refused: $(grep -E 'Process:|Main PID|Active:' "$W/operator-status-$i.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-600)"
      log "systemd said: $(grep -i "$UNIT" "$W/operator-systemd-$i.txt" | tail -6 | cut -c1-900 | tr '\n' ';')"
      grep -i "$UNIT" /tmp/sd-console.log | tail -80 > "$W/operator-console-$i.txt"
      { sd systemctl show -p LoadState -p NeedDaemonReload -p DropInPaths -p ConflictedBy -p Conflicts -p Job $UNIT
        sd systemctl list-jobs --no-pager; sd systemctl list-units --all --no-pager --plain --no-legend | grep -v ' loaded active ' | head -40
        sd systemctl cat $UNIT; } > "$W/operator-unit-$i.txt" 2>&1
      log "systemd's console: $(grep -iE 'job|start|fail|refus|limit' "$W/operator-console-$i.txt" | tail -12 | cut -c1-300 | tr '\n' ';')"
      sd systemctl reset-failed $UNIT; sd systemctl start $UNIT > "$W/operator-start-$i-reset.txt" 2>&1
      log "operator start $i after reset-failed: rc=$? $(unit_state)"
    fi
    if wait_serving "${OPERATOR_WAIT_S:-240}"; then log "operator start $i: serving"; else log "operator start $i: NOT serving: $(serving)"; fi
  done
  journal operator
fi
log "done"
