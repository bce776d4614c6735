"""TEST DOUBLE of `python -m sglang.launch_server` (SGLang needs GPUs; the lab has none).

It claims one SGLang release at a time, BC_DOUBLE_SGLANG_VERSION (0.5.10, 0.5.15, 0.5.16 or 0.5.23;
default 0.5.10), and reproduces that release's protocol as its sources define it, so the cycle's
readiness, drain and unit handling are tested for SGLang-only behaviour with a real process under
systemd. Each behaviour names the source it follows (files of the release's wheel):
  - flags: exactly that release's (flags/<version>.json, extracted from its server_args.py by
    extract_flags.py); an unknown flag exits 2 ("unrecognized arguments"), as argparse does
  - `--config FILE.yaml` (server_args.py prepare_server_args + server_args_config_parser.py): the
    file's keys become arguments before the command line's; this double reads the `key: <JSON
    scalar>` lines the cycle writes (the API key file), not all of YAML
  - at start it logs `server_args=ServerArgs(...)` with every argument, the API key included, as
    srt/entrypoints/engine.py:648 (0.5.10) does: what the cycle must never show
  - while weights load and CUDA graphs are captured the HTTP port is CLOSED (connection refused);
    the capture lines are the release's (0.5.10 "Capture cuda graph begin."; from 0.5.16
    model_runner_components/cuda_graph_setup.py:257 "Capture target decode CUDA graph begin. backend=")
  - then a warmup request: /health and /health_generate (one handler, http_server.py) answer 503 at
    once while Starting, 200 once Up; "The server is fired up and ready to roll!" is logged
  - GET /ready (0.5.23 only, http_server.py:714): 200 when up and not exiting, else 503
  - a hung scheduler (BC_DOUBLE_HANG=1, once up): /health* wait SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for
    a token, log "Health check failed. Server couldn't get a response from detokenizer for last N
    seconds.", mark the server UnHealthy and answer 503 (http_server.py health_generate); completions hang
  - with an API key only /health* and /metrics are exempt (utils/auth.py:100); 401 {"error": "Unauthorized"}
  - /v1/loads: 0.5.10 (entrypoints/v1_loads.py:130) asks the scheduler: live counts of the running batch and
    waiting queue, per rank, with an "aggregate" block. From 0.5.16 (v1_loads.py:72-123, tokenizer_control_mixin.py
    827-855) it reads a SNAPSHOT the scheduler publishes (scheduler.py 655-667): at every prefill batch (3567), every
    15 decode steps (--load-snapshot-publish-interval), and on every idle loop turn (3681); never while paused
    (1529, 1572). A request waiting in the scheduler's queue for its prefill reads as none; no aggregate block.
    Neither counts a request still in the front end (tokenizer manager): nothing in the path reads rid_to_state
  - a request first sits in the scheduler's waiting queue (BC_DOUBLE_QUEUE_S seconds, or until the file
    BC_DOUBLE_QUEUE_UNTIL exists: a server short of KV room), then runs; pause {"mode": "abort"} aborts the
    queued ones too (abort-all reaches the scheduler's queues)
  - /metrics (with --enable-metrics): sglang:num_running_reqs and sglang:num_queue_reqs are SAMPLES,
    refreshed only every BC_DOUBLE_GAUGE_S seconds (30 when idle in the real scheduler), so they
    lag the truth; sglang:engine_startup_time is defined and never set (0.0); sglang:http_requests_active{endpoint,
    method} is LIVE, kept by the HTTP middleware (+1 when a request arrives, -1 when its answer is sent: utils/common.py
    0.5.16:2356-2404, enabled at http_server.py:2426), so it counts requests in the front end, held by a pause, queued
    and running, and the /metrics request itself
  - /v1/completions: an OpenAI completion; the answer is BC_DOUBLE_ANSWER ("4"); any model name is served
    (entrypoints/openai/serving_completions.py validates only the prompt; the real 0.5.16 answered a
    wrong name with 200 on the H200)
  - SIGTERM (managers/tokenizer_manager.py sigterm_watchdog, 0.5.10:2131-2165): /health* answer 503;
    "Gracefully exiting... Remaining number of requests N" every 5 s until none, then
    kill_process_tree(include_parent=True): its own main process SIGKILLed (never exit 0); an
    UnHealthy server logs "Signal SIGTERM received while health check failed. Force exiting." and exits
  - memory release (entrypoints/http_server.py 0.5.16:1419-1440, 1622-1646; managers/tokenizer_manager.py
    1730-1749; scheduler_components/weight_updater.py:186-260), as seen on the real 0.5.16 on the H200
    (evidence/gpu-runs/2026-12-01-release-probe.log): POST /pause_generation {"mode": "abort"} aborts what runs
    (finish_reason "abort") and HOLDS new requests until POST /continue_generation; POST
    /release_memory_occupation {"tags": [...]} (none = all) KILLS the server when the scheduler is not idle
    (the assertion) and frees memory only with --enable-memory-saver (else 200 and nothing freed); POST
    /resume_memory_occupation of a tag that is not released KILLS it (KeyError in the scheduler); 200 with
    an empty body; released weights answer garbage; /health* while paused wait the health timeout and 503;
    GET /server_info: enable_memory_saver and internal_states[].memory_usage (GiB)
  - whole-GPU release (#47; weight_updater.py 0.5.16:217-222, 240-251; load_model_utils.py 0.5.16:218-224): the
    `weights` tag frees the weights too; without --enable-weights-cpu-backup (or without the saver) their content is
    lost, and after the resume the server answers 200 with garbage and another checksum; with it they come back
    identical. `cuda_graph` released on a version before 0.5.21 (no backup of the pool, full_cuda_graph_backend.py
    0.5.16:99-106 vs 0.5.21:168-171) or without SGLANG_MEMORY_SAVER_CUDA_GRAPH=1 is lost the same way.
    GET /server_info carries the start flags as the real one's dataclasses.asdict(server_args) does (the ones the
    cycle reads: enable_memory_saver, enable_weights_cpu_backup, tp_size, pp_size, dp_size, nnodes,
    enable_dp_attention; not the API key), "version" and internal_states[].memory_usage (http_server.py 0.5.16:743-762)
  - POST /weights_checker (http_server.py 0.5.16:1443-1459, weight_checker.py:72-85): action checksum answers
    {"success", "message", "ranks": [{checksums, per_gpu_checksum, parallelism_info}] one per TP rank,
    "per_engine_checksum"}; snapshot, compare, reset_tensors answer success without ranks; another action 400;
    0.5.10 answers success and message only (http_server.py 0.5.10:1193-1200). The real 0.5.16 answered the same shape on
    an H200 (ranks[].per_gpu_checksum, parallelism_info {tp_rank, tp_size, dp_rank, dp_size, pp_rank, pp_size, rank,
    size}), equal before a whole release and after its resume, and another after a resume without the backup
    (evidence/gpu-runs/2026-12-05-whole/)
  - /v1/completions with "logprobs": N: choices[0].logprobs {tokens, token_logprobs, top_logprobs, text_offset}
    (entrypoints/openai/protocol.py 0.5.16:132-136), the same for the same prompt while the weights are intact
  - GPU memory (BC_DOUBLE_GPU="total_mib,weights_mib,kv_mib"): written to BC_DOUBLE_GPU_STATE
    (/run/bc-double/<port>.json) with this process's pid, for the nvidia-smi double (tests/doubles/nvidia_smi.py)
Test knobs (environment, double only): BC_DOUBLE_SGLANG_VERSION, BC_DOUBLE_LOAD_S, BC_DOUBLE_WARMUP_S,
BC_DOUBLE_TOKEN_MS (time per generated token), BC_DOUBLE_FAIL (scheduler|warmup), BC_DOUBLE_ANSWER,
BC_DOUBLE_HANG, BC_DOUBLE_GAUGE_S, BC_DOUBLE_QUEUE_S, BC_DOUBLE_QUEUE_UNTIL, BC_DOUBLE_GPU,
BC_DOUBLE_RELEASE_FREES (the fraction of the KV cache a release really frees, default 1),
BC_DOUBLE_RESUME_FAILS=oom (the resume dies: CUDA out of memory) or noop
(the resume answers 200 and takes nothing back: a memory saver that failed quietly) or error (the resume answers 400
and the server stays released and paused) or corrupt (the weights come back wrong, HTTP 200 throughout; also while a
file corrupt-resume lies beside BC_DOUBLE_GPU_STATE), BC_DOUBLE_RELEASE_FAILS=crash
(the release dies in the memory saver), BC_DOUBLE_API_KEY (the key the server wants, whatever its arguments say:
a server that holds another key than the cycle's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VERSION = os.environ.get("BC_DOUBLE_SGLANG_VERSION", "0.5.10")
STATE: dict[str, Any] = {"status": "Starting", "running": 0, "queued": 0, "exiting": False,
                         "gauge_running": 0, "gauge_queued": 0, "paused": False, "aborts": 0, "released": set(), "held": 0,
                         "snapshot": (0, 0), "active": {}, "lost": set()}
LOCK = threading.Lock()
UNPAUSED = threading.Condition(LOCK)
ALL_TAGS = ("weights", "kv_cache", "cuda_graph")  # GPU_MEMORY_ALL_TYPES
HEALTH_CHECK_TIMEOUT = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))


def publish() -> None:
    """The scheduler publishes its load snapshot (0.5.16 scheduler.py:655-667); call with LOCK held."""
    STATE["snapshot"] = (STATE["running"], STATE["queued"])


def log(msg: str) -> None:
    print("[%s TP0] %s" % (datetime.now().strftime("%Y-%m-%d %H:%M:%S"), msg), flush=True)


def gpu() -> tuple[int, int, int]:
    total, weights, kv = (int(x) for x in os.environ.get("BC_DOUBLE_GPU", "81559,60000,18000").split(","))
    return total, weights, kv


def gpu_state_path() -> Path:
    return Path(os.environ.get("BC_DOUBLE_GPU_STATE", "/run/bc-double/%s.json" % (Handler.args.port or 30000)))


def write_gpu_state(saver: bool) -> None:
    """What the nvidia-smi double reports for this server: used = context + weights + KV cache (less
    what is released: only with the saver, and BC_DOUBLE_RELEASE_FREES of the KV cache)."""
    if not os.environ.get("BC_DOUBLE_GPU"):
        return
    total, weights, kv = gpu()
    frees = float(os.environ.get("BC_DOUBLE_RELEASE_FREES", "1")) if saver else 0.0
    used = 500 + weights * (1 - frees * ("weights" in STATE["released"])) + kv * (1 - frees * ("kv_cache" in STATE["released"]))
    path = gpu_state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "total_mib": total, "used_mib": int(used), "name": "NVIDIA H200 (double)"}))
    tmp.replace(path)


def backed_up(tag: str, args: argparse.Namespace) -> bool:
    """Whether a released tag comes back as it was: the KV cache is discarded by design (and refilled), the weights
    only with their CPU backup, the graph pool only where the version backs it up and it was in the saver's region."""
    if tag == "weights":
        return bool(args.enable_weights_cpu_backup)
    if tag == "cuda_graph":
        in_region = os.environ.get("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "").lower() in ("1", "true")
        return not in_region or version_tuple(VERSION) >= (0, 5, 21)  # outside the region it is never paused
    return True


def intact() -> bool:
    return "weights" not in STATE["released"] and not STATE["lost"]


def weights_hash(rank: int) -> str:
    """The rank's checksum: the same while its weights are what was loaded, another once they are garbage."""
    state = "loaded" if intact() else "garbage:%s" % ",".join(sorted(STATE["lost"] | STATE["released"]))
    return hashlib.sha256(("%s/%d" % (state, rank)).encode()).hexdigest()


def logprobs(prompt: str, tokens: int, k: int) -> dict[str, Any]:
    """Top-k logprobs per generated token, a function of the prompt and of whether the weights are intact."""
    seed = hashlib.sha256(("%s|%s" % (prompt, intact())).encode()).digest()
    tops = [{" t%d" % seed[(i * k + j) % len(seed)]: -round(0.01 + j * 1.5 + seed[i % len(seed)] / 1000, 4) for j in range(max(1, k))}
            for i in range(max(1, min(tokens, 8)))]
    toks = [max(t, key=t.__getitem__) for t in tops]
    return {"tokens": toks, "token_logprobs": [t[x] for t, x in zip(tops, toks, strict=True)], "top_logprobs": tops,
            "text_offset": list(range(len(toks)))}


def crash(lines: list[str]) -> None:
    """A scheduler exception: its traceback, the SIGQUIT to the main process, and the whole server gone."""
    log("Scheduler hit an exception: Traceback (most recent call last):")
    for line in lines:
        print(line, flush=True)
    log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    os._exit(1)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")[:3])


def parser() -> argparse.ArgumentParser:
    table = Path(__file__).with_name("flags") / ("%s.json" % VERSION)
    if not table.exists():
        raise SystemExit("sglang double: BC_DOUBLE_SGLANG_VERSION=%s has no flag table (%s)" % (VERSION, table))
    p = argparse.ArgumentParser(prog="sglang serve")
    for flag, kind in json.loads(table.read_text())["flags"].items():
        if flag in ("--help", "--version"):
            continue
        kwargs: dict[str, Any] = {"switch": {"action": "store_true"}, "list": {"nargs": "+"},
                                  "optional": {"nargs": "?"}}.get(kind, {})
        try:
            p.add_argument(flag, **kwargs)
        except argparse.ArgumentError:
            pass  # an alias listed twice
    return p


def parse() -> argparse.Namespace:
    argv = sys.argv[1:]
    if "--config" in argv:
        at = argv.index("--config")
        path = argv[at + 1]
        if not path.endswith((".yaml", ".yml")) or not os.path.exists(path):
            raise SystemExit("ValueError: Config file must be YAML format and exist: %s" % path)
        extra: list[str] = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and not line.startswith("#"):
                    extra += ["--" + key.strip(), str(json.loads(value.strip()))]
        argv = extra + argv[:at] + argv[at + 2:]
    args = parser().parse_args(argv)  # an unknown flag: exit 2, "unrecognized arguments"
    if not args.model_path:
        raise SystemExit(2)
    return args


class Handler(BaseHTTPRequestHandler):
    args: argparse.Namespace

    def log_message(self, fmt: str, *a: Any) -> None:  # uvicorn's access log is off by default
        pass

    def reply(self, code: int, body: Any = None) -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if body is not None and not isinstance(body, bytes) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self, path: str) -> bool:
        key = os.environ.get("BC_DOUBLE_API_KEY") or getattr(self.args, "api_key", None)
        if not key or path.startswith(("/health", "/metrics")):  # utils/auth.py:100
            return True
        if self.headers.get("Authorization") == "Bearer " + key:
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def health(self) -> None:
        if STATE["exiting"]:
            log("Health check request received during shutdown. Returning 503.")
            self.reply(503)
        elif STATE["status"] == "Starting":
            self.reply(503)
        elif os.environ.get("BC_DOUBLE_HANG") == "1" or STATE["paused"]:
            time.sleep(HEALTH_CHECK_TIMEOUT)  # no token comes back: a hung scheduler, or generation paused
            log("Health check failed. Server couldn't get a response from detokenizer for last %d seconds." % HEALTH_CHECK_TIMEOUT)
            STATE["status"] = "UnHealthy"
            self.reply(503)
        else:
            # http_server.py 0.5.16:674-676: a check that sees output sets the server healthy again (after a
            # pause, the next check after continue)
            STATE["status"] = "Up"
            self.reply(200)

    def track(self, method: str, handle: Any) -> None:
        """sglang:http_requests_active: +1 when the request arrives, -1 once it is answered (the middleware)."""
        key = (self.path.split("?")[0], method)
        with LOCK:
            STATE["active"][key] = STATE["active"].get(key, 0) + 1
        try:
            handle()
        finally:
            with LOCK:
                STATE["active"][key] -= 1

    def do_GET(self) -> None:
        self.track("GET", self.get)

    def do_POST(self) -> None:
        self.track("POST", self.post)

    def get(self) -> None:
        path = self.path.split("?")[0]
        if not self.authorized(path):
            return
        if path in ("/health", "/health_generate"):
            self.health()
        elif path == "/ready" and version_tuple(VERSION) >= (0, 5, 23):
            self.reply(200 if STATE["status"] == "Up" and not STATE["exiting"] else 503)
        elif path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": self.args.served_model_name or self.args.model_path}]})
        elif path == "/server_info":
            _total, weights, kv = gpu()
            a = self.args
            self.reply(200, {"model_path": a.model_path, "version": VERSION, "enable_memory_saver": bool(a.enable_memory_saver),
                             "enable_weights_cpu_backup": bool(a.enable_weights_cpu_backup), "tp_size": int(a.tp_size or 1),
                             "pp_size": int(a.pp_size or 1), "dp_size": int(a.dp_size or 1), "nnodes": int(a.nnodes or 1),
                             "enable_dp_attention": bool(a.enable_dp_attention),
                             "internal_states": [{"memory_usage": {"weight": round(weights / 1024, 2), "kvcache": round(kv / 1024, 2),
                                                                   "token_capacity": 812345, "graph": 1.2}}]})
        elif path == "/model_info":
            self.reply(200, {"model_path": self.args.model_path, "is_generation": True})
        elif path == "/v1/loads":
            with LOCK:
                if version_tuple(VERSION) >= (0, 5, 16):
                    if not STATE["paused"] and not STATE["running"] and not STATE["queued"]:
                        publish()  # idle: published on every loop turn
                    running, waiting = STATE["snapshot"]
                else:
                    running, waiting = STATE["running"], STATE["queued"]
            body: dict[str, Any] = {"timestamp": datetime.now().isoformat(), "version": VERSION,
                                    "loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting}]}
            if version_tuple(VERSION) < (0, 5, 15):  # 0.5.10's v1_loads.py also sums them; 0.5.16's does not
                body.update(dp_rank_count=1, aggregate={"total_running_reqs": running, "total_waiting_reqs": waiting,
                                                        "total_reqs": running + waiting})
            self.reply(200, body)
        elif path == "/metrics" and self.args.enable_metrics:
            labels = '{engine_type="unified",model_name="%s",tp_rank="0"}' % (self.args.served_model_name or "default")
            text = ("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs%s %d.0\n"
                    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs%s %d.0\n"
                    "# TYPE sglang:engine_startup_time gauge\nsglang:engine_startup_time%s 0.0\n"
                    % (labels, STATE["gauge_running"], labels, STATE["gauge_queued"], labels))
            with LOCK:
                active = sorted(STATE["active"].items())
            text += "# TYPE sglang:http_requests_active gauge\n" + "".join(
                'sglang:http_requests_active{endpoint="%s",method="%s"} %d.0\n' % (endpoint, method, n)
                for (endpoint, method), n in active)
            self.reply(200, text.encode())
        else:
            self.reply(404, {"detail": "Not Found"})

    def body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def post(self) -> None:
        path = self.path.split("?")[0]
        control = {"/pause_generation": self.pause, "/continue_generation": self.continue_generation,
                   "/release_memory_occupation": self.release, "/resume_memory_occupation": self.resume,
                   "/weights_checker": self.weights_checker}
        if path != "/v1/completions" and path not in control:
            self.reply(404, {"detail": "Not Found"})
            return
        if not self.authorized(path):
            return
        if path in control:
            control[path](self.body())
            return
        req = self.body()
        with UNPAUSED:  # tokenizer_manager.py:654: a request waits in the front end while paused
            STATE["held"] += 1  # in rid_to_state already: the SIGTERM drain counts it
            UNPAUSED.wait_for(lambda: not STATE["paused"])
            STATE["held"] -= 1
            STATE["queued"] += 1  # in the scheduler's waiting queue: the snapshot is not published for it
            aborts = STATE["aborts"]
        queue_s, until = float(os.environ.get("BC_DOUBLE_QUEUE_S", "0")), os.environ.get("BC_DOUBLE_QUEUE_UNTIL")
        deadline = time.monotonic() + queue_s
        while STATE["aborts"] == aborts and (time.monotonic() < deadline or (until and not os.path.exists(until))):
            time.sleep(0.01)
        with LOCK:
            STATE["queued"] -= 1
            if STATE["aborts"] != aborts:  # aborted in the waiting queue: never ran
                self.reply(200, {"id": "cmpl-double", "object": "text_completion", "model": req.get("model"),
                                 "choices": [{"index": 0, "text": "", "finish_reason": "abort"}]})
                return
            STATE["running"] += 1
            publish()  # its prefill batch
        try:
            if os.environ.get("BC_DOUBLE_HANG") == "1":
                time.sleep(3600)
            tokens, reason = int(req.get("max_tokens", 16)), "stop"
            deadline = time.monotonic() + float(os.environ.get("BC_DOUBLE_TOKEN_MS", "0")) / 1000 * tokens
            while time.monotonic() < deadline:
                if STATE["aborts"] != aborts:
                    reason = "abort"  # pause {"mode": "abort"} ends what runs, with what it has
                    break
                time.sleep(0.01)
            text = os.environ.get("BC_DOUBLE_ANSWER", "4") if intact() else "\x00garbage"
            choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": reason}
            if isinstance(req.get("logprobs"), int):
                choice["logprobs"] = logprobs(str(req.get("prompt")), int(req.get("max_tokens", 16)), req["logprobs"])
            self.reply(200, {"id": "cmpl-double", "object": "text_completion", "model": req.get("model"),
                             "choices": [choice]})
        finally:
            with LOCK:
                STATE["running"] -= 1
                publish()  # the batch that finished it

    def weights_checker(self, req: dict[str, Any]) -> None:
        action = req.get("action", "checksum")
        if action not in ("checksum", "snapshot", "compare", "reset_tensors"):
            self.reply(400, {"success": False, "message": "Unsupported action=%r" % action})
            return
        body: dict[str, Any] = {"success": True, "message": "Success."}
        if action == "checksum" and version_tuple(VERSION) >= (0, 5, 15):
            tp = int(self.args.tp_size or 1)
            ranks = [{"checksums": {"model.embed_tokens.weight": weights_hash(r)[:16]}, "per_gpu_checksum": weights_hash(r),
                      "parallelism_info": {"tp_rank": r, "tp_size": tp, "dp_rank": 0, "dp_size": 1, "pp_rank": 0, "pp_size": 1,
                                           "rank": r, "size": tp}} for r in range(tp)]
            body.update(ranks=ranks, per_engine_checksum=hashlib.sha256("".join(x["per_gpu_checksum"] for x in ranks)
                                                                        .encode()).hexdigest())
        self.reply(200, body)

    def pause(self, req: dict[str, Any]) -> None:
        with LOCK:
            STATE["paused"] = True
            if req.get("mode", "abort") == "abort":
                STATE["aborts"] += 1
        if req.get("mode", "abort") == "abort":  # tokenizer_manager.py:1730: until nothing is left running
            while STATE["running"] or STATE["queued"]:
                time.sleep(0.05)
        self.reply(200, {"message": "Generation paused successfully.", "status": "ok"})

    def continue_generation(self, _req: dict[str, Any]) -> None:
        with UNPAUSED:
            STATE["paused"] = False
            UNPAUSED.notify_all()
        self.reply(200, {"message": "Generation continued successfully.", "status": "ok"})

    def release(self, req: dict[str, Any]) -> None:
        if os.environ.get("BC_DOUBLE_RELEASE_FAILS") == "crash":
            crash(['  File "torch_memory_saver/entrypoint.py", line 71, in pause',
                   "RuntimeError: cuMemUnmap failed (CUDA_ERROR_INVALID_VALUE)"])
        if STATE["running"] or STATE["queued"]:
            crash(['  File "sglang/srt/managers/scheduler_components/weight_updater.py", line 187, in release_memory_occupation',
                   "AssertionError: release_memory_occupation should be called only when server is idle."])
        tags = req.get("tags") or ALL_TAGS
        STATE["released"].update(tags)
        if self.args.enable_memory_saver:  # without the saver nothing is paused, nothing lost
            STATE["lost"].update(t for t in tags if not backed_up(t, self.args))
        write_gpu_state(bool(self.args.enable_memory_saver))
        self.reply(200, b"null")  # FastAPI's None

    def resume(self, req: dict[str, Any]) -> None:
        if os.environ.get("BC_DOUBLE_RESUME_FAILS") == "oom":
            crash(['  File "torch_memory_saver/entrypoint.py", line 97, in resume',
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 GiB."])
        if os.environ.get("BC_DOUBLE_RESUME_FAILS") == "noop":
            self.reply(200, b"null")  # answered, nothing taken back
            return
        if os.environ.get("BC_DOUBLE_RESUME_FAILS") == "error":  # refused: still released, still paused
            self.reply(400, {"error": {"message": "resume_memory_occupation failed: torch_memory_saver is busy"}})
            return
        for tag in req.get("tags") or ALL_TAGS:
            if tag not in STATE["released"]:
                crash(['  File "sglang/srt/managers/scheduler_components/weight_updater.py", line 238, in resume_memory_occupation',
                       "    self.offload_tags.remove(tag)", "KeyError: %r" % tag])
            STATE["released"].discard(tag)
        corrupt = os.environ.get("BC_DOUBLE_RESUME_FAILS") == "corrupt" or gpu_state_path().with_name("corrupt-resume").exists()
        if corrupt and "weights" in (req.get("tags") or ALL_TAGS):
            # the weights come back wrong with HTTP 200 throughout (torch_memory_saver#71): only identity can tell
            STATE["lost"].add("weights")
        write_gpu_state(bool(self.args.enable_memory_saver))
        self.reply(200, b"null")  # FastAPI's None


def sample_gauges() -> None:
    """The scheduler's gauges are samples, not live counts (observability/metrics_collector.py): here
    refreshed every BC_DOUBLE_GAUGE_S seconds."""
    period = float(os.environ.get("BC_DOUBLE_GAUGE_S", "30"))
    while True:
        with LOCK:
            STATE["gauge_running"], STATE["gauge_queued"] = STATE["running"], STATE["queued"]
        time.sleep(period)


def capture_lines(load: float) -> None:
    if version_tuple(VERSION) >= (0, 5, 16):
        log("Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8, 16, 24, 32], avail mem=30.00 GB")
        time.sleep(load / 2)
        log("Capture target decode CUDA graph end. elapsed=%.2f s, mem usage=1.20 GB, avail mem=28.80 GB." % (load / 2))
    else:
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=30.00 GB")
        log("Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32]")
        time.sleep(load / 2)
        log("Capture cuda graph end. Time elapsed: %.2f s. mem usage=1.20 GB. avail mem=28.80 GB." % (load / 2))


def main() -> None:
    args = parse()
    Handler.args = args
    load = float(os.environ.get("BC_DOUBLE_LOAD_S", "1"))
    log("server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(args).items()) if kv[0] != "config"))
    log("Load weight begin. avail mem=139.10 GB")
    time.sleep(load / 2)
    log("Load weight end. elapsed=%.2f s, type=DeepseekV3ForCausalLM, avail mem=71.20 GB, mem usage=67.90 GB." % (load / 2))
    log("KV Cache is allocated. #tokens: 812345, KV size: 20.01 GB")
    write_gpu_state(bool(args.enable_memory_saver))
    if os.environ.get("BC_DOUBLE_FAIL") == "scheduler":
        log("Scheduler hit an exception: RuntimeError: CUDA out of memory")
        print("Received sigquit from a child process. It usually means the child failed.", flush=True)
        log("scheduler died during initialization")
        sys.exit(1)
    capture_lines(load)
    log("max_total_num_tokens=812345, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=64, context_len=%s" % (args.context_length or 262144))
    server = ThreadingHTTPServer((args.host or "127.0.0.1", int(args.port or 30000)), Handler)
    server.daemon_threads = True
    log("Uvicorn running on http://%s:%s (Press CTRL+C to quit)" % (args.host, args.port))

    def warmup() -> None:
        time.sleep(float(os.environ.get("BC_DOUBLE_WARMUP_S", "1")))
        if os.environ.get("BC_DOUBLE_FAIL") == "warmup":
            log("Initialization failed. warmup error: RuntimeError: warmup request failed")
            os.kill(os.getpid(), signal.SIGKILL)
        STATE["status"] = "Up"
        log("The server is fired up and ready to roll!")

    def sigterm(_sig: int, _frame: Any) -> None:
        STATE["exiting"] = True
        log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")

        def watchdog() -> None:
            while True:
                if STATE["status"] == "UnHealthy":
                    log("Signal SIGTERM received while health check failed. Force exiting.")
                    os._exit(1)
                with LOCK:
                    remain = STATE["running"] + STATE["queued"] + STATE["held"]
                log("Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=[]." % remain)
                if remain == 0:
                    break
                time.sleep(5)
            # then kill_process_tree(os.getpid(), include_parent=True): the server SIGKILLs its own main
            # process (managers/tokenizer_manager.py sigterm_watchdog; utils/common.py 0.5.16:2022-2026; seen on
            # the H200: ActiveState=failed Result=signal ExecMainStatus=9 after every systemctl stop)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=watchdog, daemon=True).start()

    signal.signal(signal.SIGTERM, sigterm)
    threading.Thread(target=warmup, daemon=True).start()
    threading.Thread(target=sample_gauges, daemon=True).start()
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
