#!/usr/bin/env python3
"""Fidelity of the marlin_sweep module: time the same kernel a second, independent way and
compare with the module's medians (issue: within 10% at every M).

The module times CUDA-graph replays that hold `routings` calls with rotated top-k ids. Here every
call is its own graph (one routing), and before every timed replay the L2 is flushed by writing a
buffer twice its size, outside the timed events; the median of the per-call times is the answer.

    python3 bench/marlin_fidelity.py RESULT.json [--out fidelity.json]
(on the GPU host, with the module's result of an sglang sweep; same seed, same shape)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the repository is the collection: collections/ links back to it (tests/conftest.py does the same)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "collections"))

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_kernels


def measure(torch: Any, kernel: Any, s: dict[str, int], m: int, device: Any, dtype: Any, samples: int, seed: int) -> float:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((m, s["K"]), generator=gen, device=device).to(dtype)
    routes = bc_kernels.make_routings(torch, s, m, samples, device, gen)
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.uint8, device=device)
    graphs = []
    pool = torch.cuda.graph_pool_handle()
    for tw, ids in routes:
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            kernel(x, tw, ids)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            kernel(x, tw, ids)
        graphs.append(graph)
    for graph in graphs:
        graph.replay()
    # flush L2 in-stream before each timed call; no host sync between samples, so the GPU stays
    # as busy (and clocked) as in a serving loop
    events = []
    for graph in graphs:
        flush.fill_(1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize(device)
    times = [a.elapsed_time(b) for a, b in events]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    res = json.loads(args.result.read_text())
    import torch  # noqa: PLC0415

    device = torch.device("cuda", 0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[res["dtype"]]
    s = res["shape"]
    kernel = bc_kernels.SglangKernel(torch, bc_kernels.Weights(torch, s, device, dtype, res["seed"]))
    rows = []
    for p in res["points"]:
        ms = measure(torch, kernel, s, p["m"], device, dtype, args.samples, seed=1000 + p["m"])
        rows.append({"m": p["m"], "module_ms": p["ms"], "independent_ms": round(ms, 5), "ratio": round(p["ms"] / ms, 4)})
        print("M=%5d module %.4f ms  independent %.4f ms  ratio %.3f" % (p["m"], p["ms"], ms, p["ms"] / ms), flush=True)
    worst = max(abs(r["ratio"] - 1) for r in rows)
    print("worst deviation %.1f%% (target <= 10%%)" % (worst * 100))
    if args.out:
        args.out.write_text(json.dumps({"tp_size": res["tp_size"], "rows": rows, "worst_deviation": worst}, indent=1))


if __name__ == "__main__":
    main()
