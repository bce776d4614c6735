"""TEST DOUBLE of `python -m sglang.launch_server` (SGLang needs GPUs; the lab has none).

It reproduces the start-up protocol of SGLang 0.5.10 as its source defines it, so the cycle's
readiness, drain and unit handling can be tested for SGLang-only behaviour with a real process
under systemd:
  - argument parsing: unknown flags exit 2 ("unrecognized arguments"), like SGLang's argparse
  - while weights load and CUDA graphs are captured the HTTP port is CLOSED (connection refused)
    (srt/entrypoints/http_server.py binds only after the scheduler is ready)
  - journal lines of model_executor/model_runner.py, mem_cache/memory_pool.py, managers/scheduler.py
  - then a warmup request: /health and /health_generate answer 503 until it succeeds, 200 after;
    "The server is fired up and ready to roll!" is logged
  - /v1/models and /model_info answer 200 as soon as the port is open (even while warming up)
  - /metrics (with --enable-metrics): sglang:num_running_reqs, sglang:num_queue_reqs,
    sglang:engine_startup_time (0.5.10 defines it and never sets it: always 0.0)
  - /v1/completions: an OpenAI completion; the answer is BC_DOUBLE_ANSWER ("4")
  - SIGTERM: waits for running requests (graceful), then exits 0
  - `--config FILE.yaml` (server_args.py prepare_server_args + server_args_config_parser.py, 0.5.10 and
    0.5.16): the file's keys become arguments before the command line's; this double reads the
    `key: <JSON scalar>` lines the cycle writes (the API key file), not all of YAML
  - at start it logs `server_args=ServerArgs(...)` with every argument, the API key included, as
    srt/entrypoints/engine.py:648 (0.5.10) does: what the cycle must never show
Test knobs (environment, double only): BC_DOUBLE_LOAD_S, BC_DOUBLE_WARMUP_S,
BC_DOUBLE_TOKEN_MS (time per generated token), BC_DOUBLE_FAIL (scheduler|warmup), BC_DOUBLE_ANSWER.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE: dict[str, Any] = {"ready": False, "running": 0, "queued": 0, "exiting": False, "startup": 0.0}
LOCK = threading.Lock()


def log(msg: str) -> None:
    print("[%s TP0] %s" % (datetime.now().strftime("%Y-%m-%d %H:%M:%S"), msg), flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--served-model-name")
    p.add_argument("--api-key")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--context-length", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--watchdog-timeout", type=float)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--config")
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
    return p.parse_args(argv)


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

    def authorized(self) -> bool:
        if not self.args.api_key:
            return True
        if self.headers.get("Authorization") == "Bearer " + self.args.api_key:
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            self.reply(200 if STATE["ready"] and not STATE["exiting"] else 503)
        elif path == "/v1/models" and self.authorized():
            self.reply(200, {"object": "list", "data": [{"id": self.args.served_model_name or self.args.model_path}]})
        elif path == "/model_info":
            self.reply(200, {"model_path": self.args.model_path, "is_generation": True})
        elif path == "/metrics" and self.args.enable_metrics:
            labels = '{engine_type="unified",model_name="%s",tp_rank="0"}' % (self.args.served_model_name or "default")
            text = ("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs%s %d.0\n"
                    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs%s %d.0\n"
                    "# TYPE sglang:engine_startup_time gauge\nsglang:engine_startup_time%s %.2f\n"
                    % (labels, STATE["running"], labels, STATE["queued"], labels, 0.0))
            self.reply(200, text.encode())
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.path != "/v1/completions" or not self.authorized():
            if self.path != "/v1/completions":
                self.reply(404, {"detail": "Not Found"})
            return
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with LOCK:
            STATE["running"] += 1
        try:
            time.sleep(float(os.environ.get("BC_DOUBLE_TOKEN_MS", "0")) / 1000 * int(req.get("max_tokens", 16)))
            text = os.environ.get("BC_DOUBLE_ANSWER", "4")
            self.reply(200, {"id": "cmpl-double", "object": "text_completion", "model": req.get("model"),
                             "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})
        finally:
            with LOCK:
                STATE["running"] -= 1


def main() -> None:
    args = parse()
    Handler.args = args
    t0 = time.monotonic()
    load = float(os.environ.get("BC_DOUBLE_LOAD_S", "1"))
    log("server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(args).items()) if kv[0] != "config"))
    log("Load weight begin. avail mem=139.10 GB")
    time.sleep(load / 2)
    log("Load weight end. elapsed=%.2f s, type=DeepseekV3ForCausalLM, avail mem=71.20 GB, mem usage=67.90 GB." % (load / 2))
    log("KV Cache is allocated. #tokens: 812345, KV size: 20.01 GB")
    if os.environ.get("BC_DOUBLE_FAIL") == "scheduler":
        log("Scheduler hit an exception: RuntimeError: CUDA out of memory")
        print("Received sigquit from a child process. It usually means the child failed.", flush=True)
        log("scheduler died during initialization")
        sys.exit(1)
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=30.00 GB")
    log("Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32]")
    time.sleep(load / 2)
    log("Capture cuda graph end. Time elapsed: %.2f s. mem usage=1.20 GB. avail mem=28.80 GB." % (load / 2))
    log("max_total_num_tokens=812345, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=64, context_len=%s" % (args.context_length or 262144))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))

    def warmup() -> None:
        time.sleep(float(os.environ.get("BC_DOUBLE_WARMUP_S", "1")))
        if os.environ.get("BC_DOUBLE_FAIL") == "warmup":
            log("Initialization failed. warmup error: RuntimeError: warmup request failed")
            os.kill(os.getpid(), signal.SIGKILL)
        STATE["startup"] = time.monotonic() - t0
        STATE["ready"] = True
        log("The server is fired up and ready to roll!")

    def sigterm(_sig: int, _frame: Any) -> None:
        STATE["exiting"] = True
        log("Received SIGTERM; waiting for %d running request(s)" % STATE["running"])

        def drain() -> None:
            while STATE["running"]:
                time.sleep(0.05)
            server.shutdown()

        threading.Thread(target=drain, daemon=True).start()

    signal.signal(signal.SIGTERM, sigterm)
    threading.Thread(target=warmup, daemon=True).start()
    server.serve_forever()
    log("Gracefully exiting")


if __name__ == "__main__":
    main()
