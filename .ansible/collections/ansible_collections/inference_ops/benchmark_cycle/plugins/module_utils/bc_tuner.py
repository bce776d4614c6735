# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The triton_tuned backend: SGLang's Triton fused_moe with a config per M tuned on this GPU (SGLang's tuning
procedure, within a budget, its builds in bc_builders' processes), and the config file the server loads."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_builders import Builders, BuildersFailed, build_width
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import write_atomic
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_kernels import (
    Routing,
    TritonKernel,
    Weights,
    first_attr,
    load_torch,
    make_routings,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import median, routing_specs
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_timing import time_point

# SGLang's tuning procedure for its Triton fused_moe (benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py of
# the sglang repository: get_configs_compute_bound's grid of block sizes, GROUP_SIZE_M, warps and stages, each config
# timed on the whole fused MoE call under override_config, the fastest kept per M, written as
# {M: config} in the file get_config_file_name names). Here: a grid (data) that holds the server's own defaults' values
# (fused_moe_triton_config.py 0.5.16:247-262: BLOCK_SIZE_K 32, GROUP_SIZE_M 8, and Triton's own 4 warps, 3 stages where
# the config names none), walked from the configs nearest the server's (the fewest values changed) outwards, in a seeded
# order among equals, within a time budget; a config Triton cannot build here is skipped.
TUNE_SPACE: dict[str, list[int]] = {
    "BLOCK_SIZE_M": [16, 32, 64, 128], "BLOCK_SIZE_N": [32, 64, 128, 256], "BLOCK_SIZE_K": [32, 64, 128, 256],
    "GROUP_SIZE_M": [1, 8, 16, 32], "num_warps": [4, 8], "num_stages": [2, 3, 4],
}
TRITON_LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # what Triton runs where a config names neither
# a config replaces the server's at a size only where it is this much faster under every distribution, in the tuning's
# own timing (one routing each, a median of 5): a tie would otherwise pass on noise, the luckiest of ~100 configs
TUNE_MARGIN = 0.02
# where SGLang keeps override_config and the config loader: moe_runner/triton_utils (0.5.15-0.5.23), fused_moe_triton
# before; the loader reads $SGLANG_MOE_CONFIG_DIR/configs/triton_<version>/<name> (fused_moe_triton_config.py
# get_moe_configs, 0.5.16:55-178) and picks the entry of the nearest M (try_get_optimal_moe_config, 0.5.16:296)
TUNE_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils", "sglang.srt.layers.moe.fused_moe_triton")
CONFIG_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe")


def tune_candidates(seed: int, near: list[dict[str, int]] | None = None) -> list[dict[str, int]]:
    """Every config of TUNE_SPACE, in a seeded order (the same seed, the same walk); with `near` (the server's own
    configs), those that change the fewest of its values first: the budget is spent where a better config is likeliest."""
    import itertools  # noqa: PLC0415
    import random  # noqa: PLC0415

    keys = list(TUNE_SPACE)
    grid = [dict(zip(keys, values, strict=True)) for values in itertools.product(*(TUNE_SPACE[k] for k in keys))]
    random.Random(seed).shuffle(grid)
    if near:
        full = [dict(TRITON_LAUNCH_DEFAULTS, **c) for c in near]
        grid.sort(key=lambda c: min(sum(c[k] != n.get(k) for k in keys) for n in full))  # stable: seeded among equals
    return grid


def nearest(configs: dict[int, Any], m: int) -> Any:
    """The entry the server's loader picks for m tokens: the one of the nearest M (the smaller on a tie)."""
    return configs[min(sorted(configs), key=lambda k: abs(k - m))]


class TunedTritonKernel(TritonKernel):
    """SGLang's Triton fused_moe int4_w4a16 with a config per M tuned on this GPU (`tune`), or given (`configs`):
    each call runs under override_config with the entry the server's loader would pick from the file this writes."""

    name = "triton_tuned"

    @staticmethod
    def imports() -> tuple[Any, Any, Any]:
        first_attr(TUNE_MODULES, "override_config")
        first_attr(CONFIG_MODULES, "try_get_optimal_moe_config")
        return TritonKernel.imports()

    def __init__(self, torch: Any, w: Weights | None, configs: dict[int, dict[str, int]] | None = None,
                 shared: dict[str, Any] | None = None) -> None:
        super().__init__(torch, w, shared)
        self.override = first_attr(TUNE_MODULES, "override_config")
        self.current = first_attr(TUNE_MODULES, "get_config")
        self.configs: dict[int, dict[str, int]] = dict(configs or {})
        self.impl = "sglang fused_moe triton int4_w4a16, tuned here (%s)" % self.fn.__module__.rsplit(".", 2)[-2]
        self.tuning: dict[str, Any] = {}

    def server_config(self, m: int) -> dict[str, int]:
        """The config the server runs today at m tokens (its loader: a shipped file, else its default)."""
        pick = first_attr(CONFIG_MODULES, "try_get_optimal_moe_config")
        got = pick(tuple(self.w13.shape), tuple(self.w2.shape), self.s["topk"], "int4_w4a16", m,
                   block_shape=self.block_shape)
        return dict(got[0] if isinstance(got, tuple) else got)

    def file_name(self) -> str:
        """The file name the server's loader looks for, from its own function, with the shapes it passes
        (E, N from w2 as stored: fused_moe.py 0.5.16:395-397)."""
        name = first_attr(CONFIG_MODULES, "get_config_file_name")
        return name(self.w2.shape[0], self.w2.shape[2], "int4_w4a16", self.block_shape)

    def __call__(self, x: Any, topk_w: Any, topk_ids: Any) -> Any:
        if not self.configs:
            raise RuntimeError("triton_tuned has no tuned config: tune it first (bc_sweep_tune_budget_s > 0)")
        before = self.current()
        try:
            with self.override(nearest(self.configs, x.shape[0])):
                return super().__call__(x, topk_w, topk_ids)
        except BaseException:
            # SGLang's override_config restores the previous config only when its body returns (no try/finally:
            # moe_runner/triton_utils/__init__.py 0.5.16:16-22): a config that raised (a Triton build out of shared
            # memory) would stay in force for every later call, the server's own Triton backend's included (seen on the
            # H200). Put back what was in force, in the module that holds it
            import sys  # noqa: PLC0415

            sys.modules[self.current.__module__]._config = before
            raise

    def tune(self, sizes: list[int], routes: dict[int, tuple[Any, list[Any]]], device: Any, budget_s: float,
             seed: int, keep: list[int], clock: Callable[[], float] = time.monotonic,
             builders: Callable[[float], Builders] | None = None, groups: int = 1) -> dict[str, Any]:
        """Time the server's config and then TUNE_SPACE's, in a seeded order, at each of `sizes` (routes[m]: its input
        and routings), until `budget_s` has passed (checked before each size: a config cut by it does not count);
        keep the fastest per M. `keep` are the other sizes the file must answer the way the server does today (their
        entry is the server's current config), with anchors of its own (anchors()): every size of the file starts as
        the server's config, a tuned one replaces it only where it was faster. With `builders` (a function of the
        deadline that starts Builders, called once the server's own config is timed, so no process starts beside that
        timing), the grid is walked in batches of its width: a batch is built in the build processes at once (into Triton's on-disk cache),
        then timed here one config at a time while they are idle, so no build shares the GPU with a timing; a config
        they cannot build is failed untimed. A tuning that timed nothing (the server's own config failed at a size)
        is a RuntimeError. With `groups` > 1, each size's routings are that many distributions (equal consecutive
        shares of routes[m]), each timed on its own: a config's score is its worst ratio to the server's config over
        them, and it replaces the server's config only where that is below 1 - TUNE_MARGIN: at least that much faster
        under every one of the site's distributions, in the tuning's timing (tuned on their mean, the H200 kept a
        config 6% slower under zipf(1) than the server's: #32). Its speedup is that worst one."""
        if groups > 1 and any(not routes[m][1] or len(routes[m][1]) % groups for m in sizes):
            raise ValueError("each size needs the same number of routings from each of the %d distributions" % groups)
        started = clock()
        deadline = started + budget_s
        baseline = {m: self.server_config(m) for m in sorted(set(sizes) | set(keep))}
        own = [dict(TRITON_LAUNCH_DEFAULTS, **baseline[m]) for m in sizes]
        timed_already = {tuple(c.get(k) for k in TUNE_SPACE) for c in own}  # above: not again as the grid's
        walk = tune_candidates(seed, own)
        grid = [c for c in walk if tuple(c.values()) not in timed_already]
        run = _Tuning(self, sizes, routes, device, groups, clock, deadline, baseline)
        run.timed(None)  # the server's own config is not one of the grid's: its failure is the error below
        if set(run.today) != set(sizes):
            raise RuntimeError("the server's own Triton config could not be timed at M=%s: nothing to tune against"
                               % ",".join(str(m) for m in sizes if m not in run.today))
        if builders is not None and clock() < deadline:
            run.start(builders)
        run.width = run.build.width if run.build else 1
        run.walk(grid)
        self.configs = {m: dict(cfg) for m, cfg in baseline.items()}
        self.configs.update({m: dict(cfg) for m, (_ms, cfg) in run.best.items()})
        self.tuning = {"budget_s": budget_s, "spent_s": round(clock() - started, 1), "configs_tried": run.tried,
                       "configs_failed": run.failed, "space": len(walk), "sizes": sorted(sizes), "file": self.file_name(),
                       "build_processes": run.width if run.built else 0, "built_ahead": run.built,
                       "build_s": round(run.spent["build_s"], 1), "time_s": round(run.spent["time_s"], 1),
                       # the server's config's time over the tuned one's, per M, in the tuning's own timing (the worst
                       # over the distributions)
                       "speedup": {str(m): round(1 / max(score, 1e-12), 3) for m, (score, _c) in sorted(run.best.items())
                                   if m in run.today}, "margin": TUNE_MARGIN}
        if run.build is not None:
            run.build.close()
        if run.notes:
            self.tuning["notes"] = run.notes
        return self.tuning


class _Tuning:
    """One tuning's walk (TunedTritonKernel.tune): the kernel timed under each config, the build processes (`build`,
    `width` configs at once), the fastest config per size (`best`: its score, the worst ratio to the server's config
    over the distributions), the server's own times (`today`), and what was tried, failed, built and spent."""

    def __init__(self, kernel: TunedTritonKernel, sizes: list[int], routes: dict[int, tuple[Any, list[Any]]], device: Any,
                 groups: int, clock: Callable[[], float], deadline: float, baseline: dict[int, dict[str, int]]) -> None:
        self.kernel, self.sizes, self.routes, self.device, self.groups = kernel, sizes, routes, device, groups
        self.clock, self.deadline, self.baseline = clock, deadline, baseline
        self.tried, self.failed, self.built = 0, 0, 0
        self.spent = {"build_s": 0.0, "time_s": 0.0}
        self.best: dict[int, tuple[float, dict[str, int]]] = {}
        self.today: dict[int, list[float]] = {}
        self.notes: list[str] = []
        self.build: Builders | None = None
        self.width = 1

    def timed(self, cand: dict[str, int] | None) -> str:
        """Time one config at every size (the server's own: cand None): "timed", "failed", or "cut" by the budget."""
        kernel, groups, device = self.kernel, self.groups, self.device
        got = {}
        try:
            for m in self.sizes:  # a config counts only where it ran at every size (Triton specializes per size)
                if cand is not None and self.clock() >= self.deadline:
                    return "cut"
                config = self.baseline[m] if cand is None else cand
                kernel.configs = {m: config}
                x, rts = self.routes[m]
                share = len(rts) // groups  # each distribution's routings: an equal consecutive share
                chunks = [rts[i * share:(i + 1) * share] for i in range(groups)]
                got[m] = ([median(time_point(kernel.torch, kernel, x, c, device, 2, 5, True)) for c in chunks], config)
        except Exception:  # a config Triton cannot build or launch here (shared memory, registers)
            try:
                kernel.torch.cuda.synchronize(device)
            except Exception:  # a device left unusable is the next config's (or the sweep's) error to report
                pass
            return "failed"
        for m, (times, config) in got.items():
            if cand is None:
                self.today[m] = times
            score = max(t / max(b, 1e-12) for t, b in zip(times, self.today[m], strict=True))  # worst over the distributions
            if cand is None or score < min(self.best[m][0], 1 - TUNE_MARGIN):
                self.best[m] = (score, config)
        return "timed"

    def start(self, builders: Callable[[float], Builders]) -> None:
        """Start the build processes (once the server's own config is timed); where they fail, build here."""
        t0 = self.clock()
        try:
            self.build = builders(self.deadline)
        except BuildersFailed as err:  # they never started: build here, as without them
            self.notes.append("the build processes failed (%s): the configs were built here" % err)
        self.spent["build_s"] += self.clock() - t0

    def walk(self, grid: list[dict[str, int]]) -> None:
        """Time the grid's configs in batches of `width` (each built ahead in the build processes, if any), until the
        grid or the budget ends."""
        clock, deadline = self.clock, self.deadline
        at = 0
        while at < len(grid) and clock() < deadline:
            batch, at = grid[at:at + self.width], at + self.width
            if self.build is not None:
                batch = self.built_ahead(self.build, batch)
            t0 = clock()
            for cand in batch:
                outcome = self.timed(cand)
                if outcome == "cut":
                    break
                self.tried += outcome == "timed"
                self.failed += outcome == "failed"
            self.spent["time_s"] += clock() - t0

    def built_ahead(self, build: Builders, batch: list[dict[str, int]]) -> list[dict[str, int]]:
        """Build `batch` in the build processes: the configs built (those that failed are counted, those not built in
        time left untimed); where the processes broke, the whole batch, built here from now on."""
        t0 = self.clock()
        try:
            errors = build.build(batch, self.deadline)
        except BuildersFailed as err:  # they broke: build here, as without them (this batch's configs too)
            self.notes.append("the build processes failed (%s): the configs were built here" % err)
            build.close()
            self.build, self.width, errors = None, 1, {}
        self.spent["build_s"] += self.clock() - t0
        if self.build is not None:
            self.failed += sum(1 for e in errors.values() if e)
            batch = [c for i, c in enumerate(batch) if errors.get(i) == ""]  # not built in time: not timed
            self.built += len(batch)
        return batch


def _tuned_builder(shared: dict[str, Any], inputs: dict[int, tuple[Any, Any, Any]]) -> Callable[[Any], None]:
    """In a build process: the tuned kernel over the sweep's own weights (shared), and the function that builds one
    config by running it once at each tuned size on that size's input and first routing (inputs[m]: x, weights, ids)."""
    torch = load_torch()
    kernel = TunedTritonKernel(torch, None, shared=shared)
    device = next(iter(inputs.values()))[0].device
    torch.cuda.set_device(device)

    def build(config: dict[str, int]) -> None:
        for m, (x, topk_w, topk_ids) in sorted(inputs.items()):
            kernel.configs = {m: config}
            kernel(x, topk_w, topk_ids)
        torch.cuda.synchronize(device)

    return build


def tune_sizes(cfg: dict[str, Any], sizes: list[int]) -> list[int]:
    """The sizes the tuning times: `tune_batch_sizes` where given (each must be a size of the sweep), else the sweep's
    sizes from 256 up (the verification batches the tuning is for), else all of them."""
    given = [int(m) for m in cfg.get("tune_batch_sizes") or []]
    if given:
        return sorted(set(given))
    return [m for m in sizes if m >= 256] or list(sizes)


def anchors(s: dict[str, int], sizes: list[int], tuned: list[int]) -> list[int]:
    """The sizes the file answers with the server's own config: the sweep's untuned sizes, and anchors where the
    loader would otherwise stretch a tuned entry over sizes never timed (it picks the nearest key for any M:
    fused_moe_triton_config.py 0.5.16:300): powers of two from 1 to twice the largest tuned size, and E and E+1,
    where SGLang's default config changes (`M <= E`, :254)."""
    top = 2 * max(tuned)
    powers = [1 << i for i in range(top.bit_length()) if (1 << i) <= top]
    return sorted((set(sizes) | set(powers) | {s["E"], s["E"] + 1}) - set(tuned))


def write_tuned(kernel: TunedTritonKernel, config_dir: str) -> dict[str, Any]:
    """Write the tuned map where SGLang's loader looks under `config_dir` (its SGLANG_MOE_CONFIG_DIR:
    configs/triton_<version>/<file_name>), then read it back through the loader itself, with the directory set as
    the server would have it: the file is proven to be one the server loads, with these configs."""
    import triton  # noqa: PLC0415

    sub = os.path.join(config_dir, "configs", "triton_%s" % triton.__version__.replace(".", "_"))
    path = os.path.join(sub, kernel.file_name())
    os.makedirs(sub, exist_ok=True)
    loader = first_attr(CONFIG_MODULES, "get_moe_configs")
    # the directory replaces the package's own for every shape (the loader reads SGLANG_MOE_CONFIG_DIR or its package's
    # directory, never both: fused_moe_triton_config.py 0.5.16:90-92): it carries the packaged configs too
    packaged = os.path.join(os.path.dirname(os.path.realpath(sys.modules[loader.__module__].__file__ or "")), "configs")
    copied = keep_packaged(packaged, os.path.join(config_dir, "configs"))
    write_atomic(path, json.dumps({str(m): c for m, c in sorted(kernel.configs.items())}, indent=1))
    before = os.environ.get("SGLANG_MOE_CONFIG_DIR")
    os.environ["SGLANG_MOE_CONFIG_DIR"] = config_dir
    try:
        loader.cache_clear()
        read = loader(kernel.w2.shape[0], kernel.w2.shape[2], "int4_w4a16", 0, kernel.s["group"])
    finally:
        if before is None:
            os.environ.pop("SGLANG_MOE_CONFIG_DIR", None)
        else:
            os.environ["SGLANG_MOE_CONFIG_DIR"] = before
        loader.cache_clear()
    if read != kernel.configs:
        raise RuntimeError("SGLang's loader read %s back as %r, not the tuned configs" % (path, read))
    return {"path": path, "config_dir": config_dir, "loader_read_back": True, "packaged_copied": copied,
            "configs": {str(m): c for m, c in sorted(kernel.configs.items())}}


def keep_packaged(packaged: str, into: str) -> int:
    """Copy the package's config files (`packaged`, SGLang's configs/ directory) into `into` where `into` has none of
    that name: a tuned file (or an operator's) is never replaced by a packaged one. The number copied."""
    copied = 0
    for root, _dirs, files in os.walk(packaged):
        for name in files:
            if not name.endswith(".json"):
                continue
            target = os.path.join(into, os.path.relpath(os.path.join(root, name), packaged))
            if os.path.lexists(target):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(os.path.join(root, name), encoding="utf-8") as f:
                write_atomic(target, f.read())  # a copy cut short never stays: the next run would skip it as present
            copied += 1
    return copied


def tune_kernel(torch: Any, cfg: dict[str, Any], kernel: TunedTritonKernel, s: dict[str, int], sizes: list[int],
                device: Any, dtype: Any, seed: int) -> dict[str, Any]:
    """Tune the kernel at its sizes on the sweep's own routing distributions (routings of their own: the sweep's inputs
    are not drawn from this), within the run's budget, and write the config file the server loads (proven by its
    loader). Each distribution is timed on its own and a config must beat the server's under every one of them
    (tune(groups=)): tuned on uniform routing alone, configs lost 6-16% under zipf(1) at M=512 and 1024 on the
    H200, and on the mean of both still 6% at M=512 and 4% at 4096 (docs/benchmarks.md, "Tuned Triton")."""
    at = tune_sizes(cfg, sizes)
    gen = torch.Generator(device=device).manual_seed(seed + 3)
    specs = routing_specs(cfg.get("routing") or [{"kind": "uniform"}], s)
    dists = [Routing(torch, s, spec, device, gen) for spec in specs]
    each = max(1, 2 // len(dists))  # two routings per size in all with one distribution, one each with more
    routes = {m: (torch.randn((m, s["K"]), generator=gen, device=device).to(dtype),
                  [r for dist in dists for r in make_routings(torch, s, m, each, device, gen, dist)]) for m in at}
    budget = float(cfg.get("tune_budget_s", 0))
    width = build_width(torch, s, max(at), device) if budget > 0 else 0
    started: list[Builders] = []

    def builders(deadline: float) -> Builders:
        shared = {"s": s, "w13": kernel.w13, "w2": kernel.w2, "s13": kernel.s13, "s2": kernel.s2}
        started.append(Builders(width, _tuned_builder, (shared, {m: (x, *rts[0]) for m, (x, rts) in routes.items()}), deadline))
        return started[-1]

    try:
        tuning = kernel.tune(at, routes, device, budget, seed, anchors(s, sizes, at), builders=builders if width else None,
                             groups=len(dists))
    finally:
        for build in started:  # whatever ended the tuning (an exception included), no build process outlives it
            build.close()
    routes.clear()  # the tuning's inputs freed before the sweep's
    out_dir = cfg.get("tune_dir") or os.path.join(os.path.dirname(cfg.get("output") or ".") or ".", "moe-config")
    tuning.update(write_tuned(kernel, out_dir))
    tuning["routing"] = [spec["name"] for spec in specs]
    return tuning
