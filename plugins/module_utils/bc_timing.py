# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Timing on the device, and the two ceilings each point's floor is drawn from (bc_sweepstats.floors).

Timing on GPU: CUDA graph replays, each graph holding one call with its own top-k ids, `routings`
graphs replayed in turn (so small-M points do not sit in L2), CUDA events around each round,
median/min/max. The floor of each point is the larger of the INT4 bytes at the copy bandwidth and
the FLOPs at the dense bf16 tensor throughput, both measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import GIB, median


def time_point(torch: Any, kernel: Callable[..., Any], x: Any, routings: list[tuple[Any, Any]], device: Any,
               warmup: int, iters: int, use_graph: bool) -> list[float]:
    """Per-call times in ms, one sample per replay of all routings."""
    n = len(routings)
    if device.type != "cuda":
        for i in range(warmup):
            kernel(x, *routings[i % n])
        samples = []
        for _i in range(iters):
            t0 = time.perf_counter()
            for tw, ids in routings:
                kernel(x, tw, ids)
            samples.append((time.perf_counter() - t0) * 1000 / n)
        return samples
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for i in range(max(warmup, 2)):
            kernel(x, *routings[i % n])
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)

    def body() -> None:
        for tw, ids in routings:
            kernel(x, tw, ids)

    step: Callable[[], None] = body
    if use_graph:
        # one graph per routing, all in one memory pool: the pool holds one call's buffers, not n
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        for tw, ids in routings:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                kernel(x, tw, ids)
            graphs.append(graph)

        def replay() -> None:
            for graph in graphs:
                graph.replay()

        step = replay
        for _i in range(max(warmup // n, 2)):
            step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _i in range(iters)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / n for start, end in events]


def tensor_throughput(torch: Any, device: Any, n: int = 8192, iters: int = 10) -> float:
    """Dense bf16 matmul FLOP/s (2 n^3 per product): the compute ceiling of the W4A16 kernels, which
    dequantize to bf16 and multiply on the same tensor cores."""
    if device.type != "cuda":
        return 0.0
    a = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    b = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    for _i in range(3):
        a @ b
    samples = []
    for _i in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _i in range(iters):
            a @ b
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000 / iters)
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n ** 3 / median(samples)


def copy_bandwidth(torch: Any, device: Any, nbytes: int = GIB, iters: int = 20) -> float:
    """Device-to-device copy, bytes read + written per second (the convention of the floor)."""
    if device.type != "cuda":
        return 0.0
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _i in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _i in range(iters):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000 / iters
    del a, b
    torch.cuda.empty_cache()
    return nbytes / seconds
