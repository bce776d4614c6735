# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The INT4 Marlin MoE GEMM sweep itself: the worker's run loop. Runs in its own process (`python -m
<this package>.bc_marlin` with a JSON config on stdin), so a crash, an OOM kill or a
signal ends only this process: the module reports it, and every finished point is already in
the output file (rewritten after each point).

Every backend's weights are resident before the first point, so that at each M and routing the
backends are timed back to back on the same activations and top-k ids.

The rooms of the sweep, each imported only by those after it (marlin_sweep stages them all, SWEEP_MODULES):
  bc_kernels   the INT4 weights, the routings, the sglang, triton and torch kernels
  bc_timing    the timing of a point, the copy bandwidth and the tensor throughput (the floors' ceilings)
  bc_builders  the tuning's build processes
  bc_tuner     the triton_tuned kernel, its tuning and the config file it writes
  bc_backends  the backends by name: which can run here, building one, checking one against the fp32 reference
  bc_imports   the preflight's proof that the backends import (proven_import_errors), forgotten where they do not
  bc_marlin    this run loop (the process marlin_sweep runs, and the preflight's proven_import_errors)
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_backends import (
    available,
    build_kernel,
    reference_check,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import CommandError, gpus, write_atomic
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_imports import (  # pylint: disable=unused-import
    proven_import_errors,  # noqa: F401 - the preflight runs <this module>.proven_import_errors
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_kernels import Routing, Weights, load_torch, make_routings
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    GIB,
    backend_list,
    bound_knee,
    estimate_peak_bytes,
    floors,
    knee,
    median,
    point_cost,
    routing_specs,
    validate,
    winners,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_timing import copy_bandwidth, tensor_throughput, time_point
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_tuner import tune_kernel


def environment(torch: Any, device: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                           "device_type": device.type, "host": platform.node()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sm_count=props.multi_processor_count, gpu_memory_gib=round(props.total_memory / GIB, 1),
                   cuda=torch.version.cuda)
        try:  # the one GPU query of the project (bc_host.gpus); a hung nvidia-smi costs 20 s, never the sweep
            env["driver"] = next((g["driver"] for g in gpus("nvidia-smi", 20) if g["index"] == (device.index or 0)), "")
        except CommandError:
            env["driver"] = ""
    else:
        env["gpu"] = None
        env["cpu"] = platform.processor() or platform.machine()
    try:
        import sglang  # noqa: PLC0415

        env["sglang"] = getattr(sglang, "__version__", "unknown")
    except Exception:
        env["sglang"] = None
    return env


def _device(torch: Any, cfg: dict[str, Any]) -> Any:
    want_cuda = cfg.get("device", 0) is not None and cfg.get("device_type", "auto") != "cpu"
    if want_cuda and torch.cuda.is_available():
        return torch.device("cuda", int(cfg.get("device", 0)))
    return torch.device("cpu")


def _choose(asked: list[str], cuda: bool, auto: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """The backends that run here and the report of every one asked for. The first is the primary,
    what the run is for: it must run. Another that cannot run is reported, not fatal."""
    report, runnable = [], []
    for name in asked:
        ok, why = available(name, cuda)
        report.append({"name": name, "status": "measured" if ok else "unavailable", "why": why})
        if ok:
            runnable.append(name)
    if report[0]["status"] != "measured":
        if asked[0] == "sglang" and not cuda:
            raise RuntimeError("backend sglang needs a CUDA GPU; none is visible to torch here")
        if auto:
            raise RuntimeError("backend auto: sglang is not importable here (%s); install sglang in this "
                               "Python, or choose backend torch" % report[0]["why"])
        raise RuntimeError("the primary backend %s cannot run here: %s%s" % (
            asked[0], report[0]["why"], "".join("; %s: %s" % (r["name"], r["why"]) for r in report[1:] if r["why"])))
    return runnable, report


def _point(s: dict[str, int], m: int, samples: list[float], touched: float, backend: str, bw: float,
           tflops: float) -> dict[str, Any]:
    ms = median(samples)
    cost = point_cost(s, m, touched, 2, backend)
    floor = floors(s, m, touched, bw, tflops)
    return dict({
        "m": m, "ms": round(ms, 5), "ms_min": round(min(samples), 5), "ms_max": round(max(samples), 5),
        "us_per_token": round(ms * 1000 / m, 4), "experts_touched": round(touched, 2),
        "bytes_moved": int(cost["bytes"]), "gbs": round(cost["bytes"] / (ms / 1000) / 1e9, 1),
        "tflops": round(cost["flops"] / (ms / 1000) / 1e12, 3),
        "efficiency": round(floor["floor_ms"] / ms, 4) if floor["floor_ms"] else None,
    }, **floor)


def _fits(torch: Any, device: Any, estimate: float, backends: list[str]) -> None:
    """On a GPU: the sweep's estimate fits the device's free memory now (else a RuntimeError naming the fix); the
    peak memory is counted from here."""
    free, _total = torch.cuda.mem_get_info(device)
    if estimate > free:
        raise RuntimeError("not enough free GPU memory on device %d: the sweep of %s needs about %.2f GiB, %.2f GiB "
                           "free; free the GPU (the benchmark cycle's release or stop), or sweep fewer backends or "
                           "smaller batch_sizes/tp_size" % (device.index, "+".join(backends), estimate / GIB, free / GIB))
    torch.cuda.reset_peak_memory_stats(device)


def _build_kernels(torch: Any, backends: list[str], report: list[dict[str, Any]], weights: Weights, dtype: Any,
                   cuda: bool) -> dict[str, Any]:
    """Every backend's kernel over the same weights, with its impl and prepare_s in its report entry. A secondary
    backend that cannot be built is reported unavailable and left out; the primary's error is the sweep's."""
    kernels = {}
    for name in backends:
        t_kernel = time.monotonic()
        entry = next(r for r in report if r["name"] == name)
        try:
            kernels[name] = build_kernel(torch, name, weights, dtype)
        except Exception as err:  # a secondary backend that cannot be built is reported; the primary must be
            if name == backends[0]:
                raise
            entry.update(status="unavailable", why="%s: %s" % (type(err).__name__, str(err).splitlines()[0][:300] if str(err) else ""))
            if cuda:
                torch.cuda.empty_cache()
            continue
        entry.update(impl=kernels[name].impl, prepare_s=round(time.monotonic() - t_kernel, 2))
    return kernels


def _tune(torch: Any, cfg: dict[str, Any], kernels: dict[str, Any], report: list[dict[str, Any]], primary: str,
          s: dict[str, int], sizes: list[int], device: Any, dtype: Any, seed: int, cuda: bool) -> None:
    """triton_tuned's tuning (bc_tuner.tune_kernel), with tune_s, in its report entry. Where it is a secondary backend
    and its tuning fails, it is reported unavailable and dropped from `kernels`; the primary's failure is the sweep's."""
    t_tune = time.monotonic()
    entry = next(r for r in report if r["name"] == "triton_tuned")
    try:
        entry.update(tuning=tune_kernel(torch, cfg, kernels["triton_tuned"], s, sizes, device, dtype, seed))
    except Exception as err:  # a secondary backend: reported, the others are timed (the primary's tuning is fatal)
        if primary == "triton_tuned":
            raise
        entry.update(status="unavailable", why="the tuning failed: %s: %s" % (type(err).__name__, str(err)[:300]))
        del kernels["triton_tuned"]
        if cuda:
            torch.cuda.empty_cache()
    entry["tune_s"] = round(time.monotonic() - t_tune, 2)


def run_sweep(cfg: dict[str, Any], save: Callable[[dict[str, Any]], None] = lambda r: None) -> dict[str, Any]:
    """The sweep of `cfg` (the module's parameters, the shape as one dict), its result saved after each point by
    `save`: the plan and the device's ceilings, every backend's kernel (triton_tuned tuned first), every point of every
    backend under every routing, then the checks against the fp32 reference (_finish)."""
    torch = load_torch()
    t_start = time.monotonic()
    asked_raw = cfg.get("backends") or cfg.get("backend") or ["auto"]
    asked_raw = [asked_raw] if isinstance(asked_raw, str) else list(asked_raw)
    s = validate(cfg["shape"], cfg["batch_sizes"], asked_raw)
    device = _device(torch, cfg)
    cuda = device.type == "cuda"
    backends, report = _choose(backend_list(asked_raw), cuda, asked_raw == ["auto"])
    specs = routing_specs(cfg.get("routing") or [{"kind": "uniform"}], s)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg.get("dtype", "bf16")]
    routings_n, seed = int(cfg.get("routings", 8)), int(cfg.get("seed", 0))
    sizes = sorted({int(m) for m in cfg["batch_sizes"]})
    estimate = estimate_peak_bytes(s, sizes, backends, routings_n)
    if cuda:
        _fits(torch, device, estimate, backends)
    result: dict[str, Any] = {
        "status": "running", "backend": backends[0], "shape": s, "tp_size": int(cfg["shape"].get("tp_size", 1)),
        "dtype": cfg.get("dtype", "bf16"), "ran_on": "gpu" if cuda else "cpu", "points": [],
        "estimate_peak_gib": round(estimate / GIB, 3), "environment": environment(torch, device),
        "seed": seed, "routings": routings_n, "backends": report, "routing": [r["name"] for r in specs], "series": [],
    }
    if not cuda:
        result["note"] = "ran on the CPU: no CUDA device is visible; times are not GPU kernel times"
    bw, tflops = (copy_bandwidth(torch, device), tensor_throughput(torch, device)) if cuda else (0.0, 0.0)
    result.update(copy_bandwidth_gbs=round(bw / 1e9, 1), dense_tflops=round(tflops / 1e12, 1))
    save(result)

    t_prep = time.monotonic()
    weights = Weights(torch, s, device, dtype, seed)
    kernels = _build_kernels(torch, backends, report, weights, dtype, cuda)
    if "triton_tuned" in kernels:
        _tune(torch, cfg, kernels, report, backends[0], s, sizes, device, dtype, seed, cuda)
        save(result)
    backends = [b for b in backends if b in kernels]
    result["prepare_s"] = round(time.monotonic() - t_prep, 2)
    result["impl"] = kernels[backends[0]].impl
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    result["series"] = [{"backend": b, "routing": r["name"], "impl": kernels[b].impl, "points": []} for r in specs for b in backends]
    for i, spec in enumerate(specs):
        routing = Routing(torch, s, spec, device, gen)
        for m in sizes:
            x = torch.randn((m, s["K"]), generator=gen, device=device).to(dtype if cuda else torch.float32)
            routes = make_routings(torch, s, m, routings_n, device, gen, routing)
            touched = sum(len(torch.unique(ids)) for _w, ids in routes) / routings_n
            for j, name in enumerate(backends):
                kernel = kernels[name]
                samples = time_point(torch, kernel, x, routes, device, int(cfg.get("warmup", 5)),
                                     int(cfg.get("iters", 20)), cuda and kernel.graph_safe)
                result["series"][i * len(backends) + j]["points"].append(_point(s, m, samples, touched, name, bw, tflops))
            result["points"] = result["series"][0]["points"]
            save(result)
    if cuda:
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 3)
        result["estimate_error"] = round(result["peak_memory_gib"] / result["estimate_peak_gib"] - 1, 4)
    del kernels, weights
    if cuda:
        torch.cuda.empty_cache()
    _finish(torch, cfg, result, s, device, dtype, report)
    result["wall_s"] = round(time.monotonic() - t_start, 2)
    save(result)
    return result


def _finish(torch: Any, cfg: dict[str, Any], result: dict[str, Any], s: dict[str, int], device: Any, dtype: Any,
            report: list[dict[str, Any]]) -> None:
    """Knees, the fastest backend per M, and each backend against the fp32 reference: a backend
    whose error passes the bound fails the sweep (its times would be of a wrong answer)."""
    for run in result["series"]:
        run.update(knee(run["points"], s["E"]), bound_knee_m=bound_knee(run["points"]))
    result.update(knee(result["points"], s["E"]), bound_knee_m=bound_knee(result["points"]),
                  winners=winners(result["series"]))
    bound = float(cfg.get("check_bound", 0.03))
    wrong = []
    for entry in report:
        if entry["status"] != "measured" or not cfg.get("check", True) or (entry["name"] == "torch" and device.type != "cuda"):
            continue
        try:
            tuned = {int(m): c for m, c in (entry.get("tuning") or {}).get("configs", {}).items()}
            # a tuned backend is checked with each config it tuned (at its M), the others at one M
            at = sorted({int(m) for m in (entry.get("tuning") or {}).get("sizes", [])}) or [16]
            checks = [reference_check(torch, s, device, dtype, int(cfg.get("seed", 0)), m=m, backend=entry["name"],
                                      configs=tuned or None, partial=partial) for m in at
                      for partial in ((False, True) if tuned else (False,))]  # a tuned config on partial tiles too
            # the worst check, a NaN (garbage in masked rows) the worst of all
            check = dict(max(checks, key=lambda c: math.inf if math.isnan(c["relative_error"]) else c["relative_error"]))
            partial_checks = [c for c in checks if c["partial"]]
            check.update(bound=bound, ok=all(c["relative_error"] <= bound for c in checks),
                         partial_tiles_checked=bool(partial_checks) and all(c["partial_tiles"] for c in partial_checks))
        except Exception as err:  # a check that cannot run proves nothing: a failed check, not a lost run
            check = {"relative_error": float("nan"), "bound": bound, "ok": False,
                     "error": "%s: %s" % (type(err).__name__, str(err)[:300])}
        entry["check"] = check
        if not check["ok"] and (entry.get("tuning") or {}).get("path"):
            try:  # a config that computes a wrong answer is never left where a server would load it
                os.remove(entry["tuning"]["path"])
                entry["tuning"]["withdrawn"] = True
            except OSError:
                entry["tuning"]["withdrawn"] = False
        if not check["ok"]:
            wrong.append("%s: %s" % (entry["name"], check.get("error") or "relative error %.4f > %.4f" % (check["relative_error"], bound)))
    primary = report[[r["name"] for r in report].index(result["backend"])]
    if primary.get("check"):
        result["check"] = primary["check"]
    if wrong:
        result["status"] = "error"
        result["error"] = ("against the fp32 reference from the dequantized weights, %s: that kernel computes a wrong answer "
                           "on this host (its times are kept in the output)" % "; ".join(wrong))
        return
    result["status"] = "complete"


def main() -> int:
    cfg = json.load(sys.stdin)
    output: str | None = cfg.get("output")
    save: Callable[[dict[str, Any]], None] = (
        (lambda r: write_atomic(output, json.dumps(r, indent=1, sort_keys=True))) if output else (lambda r: None))
    try:
        result = run_sweep(cfg, save)
    except Exception as err:
        # the worker's protocol with marlin_sweep is its stdout: it runs as `python -m`, not as a module
        print(json.dumps({"status": "error", "error": "%s: %s" % (type(err).__name__, err)}))  # pylint: disable=ansible-bad-function
        return 3
    print(json.dumps(result))  # pylint: disable=ansible-bad-function
    return 0 if result["status"] == "complete" else 3


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
