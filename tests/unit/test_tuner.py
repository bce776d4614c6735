"""The tuned Triton backend on the CPU (module_utils/bc_tuner.py): its walk over the grid, the config it picks per
size, what it refuses, and the configs it builds ahead and times in batches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import (
    bc_builders,
    bc_kernels,
    bc_tuner,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    shard,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/unit/fixtures/h200"
K26 = {"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8, "group_size": 32, "num_bits": 4}
SMALL = {"num_experts": 8, "hidden_size": 128, "intermediate_size": 64, "top_k": 2, "group_size": 32, "num_bits": 4, "tp_size": 1}
CPU = torch.device("cpu")


# -- the tuned Triton backend: its walk, its pick and what it refuses ---------------------------------------------
def test_the_tuning_walk_is_the_whole_grid_in_a_seeded_order():
    walk = bc_tuner.tune_candidates(0)
    size = 1
    for values in bc_tuner.TUNE_SPACE.values():
        size *= len(values)
    assert len(walk) == size == len({json.dumps(c, sort_keys=True) for c in walk})
    assert walk == bc_tuner.tune_candidates(0) and walk != bc_tuner.tune_candidates(1)


def changed(config: dict, server: dict) -> int:
    """How many of the grid's values `config` changes from the server's (Triton's 4 warps, 3 stages where it names none)."""
    full = dict(bc_tuner.TRITON_LAUNCH_DEFAULTS, **server)
    return sum(config[k] != full.get(k) for k in bc_tuner.TUNE_SPACE)


def test_the_walk_starts_next_to_the_servers_own_configs():
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}  # 0.5.16's default, M <= E
    large = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}  # and M > E
    walk = bc_tuner.tune_candidates(3, [small, large])
    distance = [min(changed(c, small), changed(c, large)) for c in walk]
    assert distance == sorted(distance) and distance[:2] == [0, 0]  # both in the grid: the server's values are in it
    assert distance.count(1) == 2 * 15  # every config one value away from either (3+3+3+3 blocks, 1 warps, 2 stages)
    assert sorted(map(str, walk)) == sorted(map(str, bc_tuner.tune_candidates(3)))  # the same grid, reordered
    assert walk == bc_tuner.tune_candidates(3, [small, large]) != bc_tuner.tune_candidates(4, [small, large])


@pytest.mark.parametrize(("m", "key"), [(1, 1), (200, 256), (384, 256), (385, 512), (5000, 4096)])
def test_a_size_gets_the_config_of_the_nearest_tuned_size_as_sglangs_loader_picks(m, key):
    # try_get_optimal_moe_config (fused_moe_triton_config.py 0.5.16:296): min(keys, key=|key - M|), the smaller on a tie
    assert bc_tuner.nearest({1: 1, 256: 256, 512: 512, 4096: 4096}, m) == key


def test_the_tuned_sizes_are_the_large_ones_unless_given():
    sizes = [1, 8, 64, 256, 1024, 4096]
    assert bc_tuner.tune_sizes({}, sizes) == [256, 1024, 4096]
    assert bc_tuner.tune_sizes({"tune_batch_sizes": [1024, 256, 1024]}, sizes) == [256, 1024]
    assert bc_tuner.tune_sizes({}, [1, 8]) == [1, 8]


class FakeTuned(bc_tuner.TunedTritonKernel):
    """A double of the kernel for the tuning's own logic only (the walk, the budget, the pick, the sizes kept): no GPU,
    its 'time' a function of the config; the real kernel is timed on the H200 (tests/gpu)."""

    def __init__(self) -> None:  # no weights, no sglang
        self.configs, self.tuning, self.torch = {}, {}, None

    def server_config(self, m: int) -> dict:
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "server": m}

    def file_name(self) -> str:
        return "E=8,N=32,device_name=FAKE,dtype=int4_w4a16.json"


def test_the_tuning_keeps_the_fastest_per_size_within_its_budget_and_the_servers_config_elsewhere(monkeypatch):
    def fake_time(_torch, kernel, x, _routes, _device, _warmup, _iters, _graph):
        cfg = bc_tuner.nearest(kernel.configs, x)
        if cfg.get("num_warps") == 8 and cfg["BLOCK_SIZE_M"] == 128:
            raise RuntimeError("out of resources: shared memory")  # a config Triton cannot build here
        if x == 4096 and cfg["BLOCK_SIZE_M"] == 16:
            raise RuntimeError("out of resources at this size only")  # Triton specializes per size
        # at 256 a small BLOCK_SIZE_M wins, at 4096 a large one; the server's config is slower than both
        want = 16 if x <= 256 else 128
        return [10.0 if "server" in cfg else 1.0 + abs(cfg["BLOCK_SIZE_M"] - want) / 100 + cfg["num_stages"] / 1000]

    monkeypatch.setattr(bc_tuner, "time_point", fake_time)
    ticks = iter(range(10_000))
    kernel = FakeTuned()
    routes = {256: (256, []), 4096: (4096, [])}
    got = kernel.tune([256, 4096], routes, None, budget_s=200, seed=0, keep=[1, 8], clock=lambda: float(next(ticks)))
    assert got["configs_tried"] + got["configs_failed"] <= 201 and got["configs_tried"] > 0
    # the fastest at 256 (BLOCK_SIZE_M 16) fails at 4096: a config counts only where it ran at every size
    assert kernel.configs[256]["BLOCK_SIZE_M"] == 32 and kernel.configs[4096]["BLOCK_SIZE_M"] == 128
    assert kernel.configs[1]["server"] == 1 and kernel.configs[8]["server"] == 8  # the untuned sizes answer as today
    assert set(kernel.configs) == {1, 8, 256, 4096}
    # the server's own config failing at a size: nothing to tune against, never a map missing that size
    def failing(_torch, kernel, x, *_a):
        if x == 4096 and "server" in bc_tuner.nearest(kernel.configs, x):
            raise RuntimeError("out of resources")
        return [1.0]

    monkeypatch.setattr(bc_tuner, "time_point", failing)
    kernel, ticks = FakeTuned(), iter(range(10_000))
    with pytest.raises(RuntimeError, match=r"could not be timed at M=.*4096"):
        kernel.tune([256, 4096], routes, None, budget_s=5, seed=0, keep=[], clock=lambda: float(next(ticks)))
    assert float(got["speedup"]["256"]) > 1 and got["sizes"] == [256, 4096] and got["space"] == len(bc_tuner.tune_candidates(0))
    # no budget: only the server's own config is timed, and it is what the file says
    kernel, ticks = FakeTuned(), iter(range(10_000))
    got = kernel.tune([256], {256: (256, [])}, None, budget_s=0, seed=0, keep=[], clock=lambda: float(next(ticks)))
    assert got["configs_tried"] == 0 and kernel.configs[256]["server"] == 256  # the server's own config is not one of the grid's


class FakeBuilders:
    """A double of bc_builders.Builders (the real processes: tests/unit/test_tune_builders.py): which configs its
    processes could build, the batches it was given, and whether it was closed."""

    def __init__(self, width: int, broken: str = "") -> None:
        self.width, self.broken, self.batches, self.closed = width, broken, [], False

    def build(self, configs, _deadline):
        if self.broken:
            raise bc_builders.BuildersFailed(self.broken)
        self.batches.append(list(configs))
        return {i: "out of resources: shared memory" if c["BLOCK_SIZE_K"] == 256 else "" for i, c in enumerate(configs)}

    def close(self) -> None:
        self.closed = True


def test_configs_built_ahead_are_timed_in_batches_and_one_that_cannot_be_built_is_never_timed(monkeypatch):
    timed = []

    def fake_time(_torch, kernel, x, _routes, _device, _warmup, _iters, _graph):
        cfg = bc_tuner.nearest(kernel.configs, x)
        assert cfg["BLOCK_SIZE_K"] != 256, "a config that could not be built was timed"
        timed.append(json.dumps(cfg, sort_keys=True))
        return [10.0 if "server" in cfg else 1.0 + cfg["BLOCK_SIZE_M"] / 100]

    monkeypatch.setattr(bc_tuner, "time_point", fake_time)
    ticks = iter(range(100_000))
    build, kernel, started_after = FakeBuilders(4), FakeTuned(), []

    def start(_deadline):  # the builders start once the server's own config is timed, never beside that timing
        started_after.append(len(timed))
        return build

    got = kernel.tune([256, 4096], {256: (256, []), 4096: (4096, [])}, None, budget_s=60, seed=0, keep=[],
                      clock=lambda: float(next(ticks)), builders=start)
    assert started_after == [2] and build.closed  # the server's config at both sizes, then the builders; closed at the end
    assert build.batches and all(len(b) == 4 for b in build.batches[:-1])
    # the walk, a batch at a time, from the server's own config outwards (not itself: it was timed first)
    assert [changed(c, FakeTuned().server_config(0)) for c in build.batches[0]] == [1, 1, 1, 1]
    assert got["build_processes"] == 4 and got["configs_failed"] > 0
    unbuildable = sum(1 for b in build.batches for c in b if c["BLOCK_SIZE_K"] == 256)
    assert got["configs_failed"] == unbuildable and got["built_ahead"] >= got["configs_tried"]  # the last batch: cut
    assert len(timed) == 2 * (got["configs_tried"] + 1)  # every config built is timed at both sizes, and the server's
    assert kernel.configs[256]["BLOCK_SIZE_M"] == 16 and got["speedup"]["256"] > 1
    # processes that broke (one died, a set-up that raised): said, and the tuning builds in its own process instead
    ticks, kernel, broken = iter(range(100_000)), FakeTuned(), FakeBuilders(4, "a build process died while building")
    got = kernel.tune([256], {256: (256, [])}, None, budget_s=30, seed=0, keep=[], clock=lambda: float(next(ticks)),
                      builders=lambda _deadline: broken)
    assert broken.closed and got["configs_tried"] > 0 and got["built_ahead"] == 0
    assert "a build process died" in got["notes"][0] and "built here" in got["notes"][0]

    def never_started(_deadline):
        raise bc_builders.BuildersFailed("RuntimeError: No module named 'sglang'")

    ticks, kernel = iter(range(100_000)), FakeTuned()
    got = kernel.tune([256], {256: (256, [])}, None, budget_s=30, seed=0, keep=[], clock=lambda: float(next(ticks)),
                      builders=never_started)
    assert got["configs_tried"] > 0 and got["build_processes"] == 0 and "No module named 'sglang'" in got["notes"][0]


@pytest.mark.parametrize(("extra", "message"), [
    ({"backends": ["triton_tuned"]}, "give tune_budget_s >= 1"),
    ({"backends": ["triton_tuned"], "tune_budget_s": 600, "timeout": 600}, "leaves the sweep no time within timeout=600"),
    ({"backends": ["triton"], "tune_budget_s": -1}, "tune_budget_s must be >= 0"),
    ({"backends": ["triton_tuned"], "tune_budget_s": 60, "tune_batch_sizes": [3]}, "tune_batch_sizes [3] are not batch sizes"),
])
def test_the_sweep_refuses_a_tuning_it_cannot_do(tmp_path, extra, message):
    args = dict(SMALL, batch_sizes=[1, 256], output=str(tmp_path / "s.json"), **extra)
    r = adhoc("marlin_sweep", args, check=True)
    assert r["_status"] == "FAILED!" and message in r["msg"], r


def rows_of(table: dict) -> list[dict]:
    """winners()-shaped rows from {(routing, m): {backend: ms}}."""
    out = []
    for (routing, m), times in table.items():
        best = min(times, key=times.get)
        out.append({"routing": routing, "m": m, "fastest": best, "fastest_ms": times[best],
                    "backends": {b: {"ms": ms} for b, ms in times.items()}})
    return out


def test_the_fastest_backend_per_m_band_and_the_cost_of_one_backend_for_all():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import bands, one_backend_cost

    rows = rows_of({("uniform", 256): {"sglang": 1.0, "triton_tuned": 2.0, "torch": 4.0},
                    ("uniform", 512): {"sglang": 1.5, "triton_tuned": 2.0, "torch": 4.0},
                    ("uniform", 1024): {"sglang": 4.0, "triton_tuned": 2.0, "torch": 3.0},
                    ("uniform", 4096): {"sglang": 16.0, "triton_tuned": 4.0, "torch": 8.0},
                    ("zipf(1)", 256): {"sglang": 1.0, "triton_tuned": 2.0}})
    assert [(b["routing"], b["from_m"], b["to_m"], b["fastest"]) for b in bands(rows)] == [
        ("uniform", 256, 512, "sglang"), ("uniform", 1024, 4096, "triton_tuned"), ("zipf(1)", 256, 256, "sglang")]
    cost = {c["backend"]: c for c in one_backend_cost(rows)}
    assert cost["triton_tuned"]["worst_x_fastest"] == 2.0 and cost["sglang"]["worst_x_fastest"] == 4.0
    assert cost["sglang"]["worst_at"] == "uniform M=4096"
    assert cost["torch"]["rows"] == 4 and cost["torch"]["of"] == 5  # not timed at one point: said, and ranked last
    assert [c["backend"] for c in one_backend_cost(rows)][-1] == "torch"
    # geometric mean of sglang: (1 * 1 * 2 * 4 * 1) ** (1/5)
    assert cost["sglang"]["mean_x_fastest"] == round(8 ** 0.2, 3)


def test_a_config_that_fails_does_not_stay_in_force_after_sglangs_override_leaks_it(monkeypatch):
    """SGLang 0.5.16's override_config sets a module global and restores it only when its body returns (no
    try/finally): a config whose Triton build fails stayed in force on the H200 and failed the server's own Triton
    backend after it. A double of that module (its semantics, not its code) shows the kernel puts back what was in force."""
    import contextlib
    import types

    fake = types.ModuleType("fake_triton_utils")
    fake._config = None

    @contextlib.contextmanager
    def override_config(config):  # what 0.5.16 does: no finally
        old = fake._config
        fake._config = config
        yield
        fake._config = old

    def get_config():
        return fake._config

    override_config.__module__ = get_config.__module__ = "fake_triton_utils"
    monkeypatch.setitem(sys.modules, "fake_triton_utils", fake)

    def build(_self, _x, _w, _ids):
        if fake._config.get("num_stages") == 5:
            raise RuntimeError("OutOfResources: out of resource: shared memory")
        return "ok"

    monkeypatch.setattr(bc_kernels.TritonKernel, "__call__", build)
    kernel = FakeTuned()
    kernel.override, kernel.current = override_config, get_config

    class X:
        shape = (256, 64)

    kernel.configs = {256: {"num_stages": 5}}
    with pytest.raises(RuntimeError, match="OutOfResources"):
        kernel(X(), None, None)
    assert fake._config is None  # what was in force before: nothing
    kernel.configs = {256: {"num_stages": 3}}
    assert kernel(X(), None, None) == "ok" and fake._config is None


def test_the_file_anchors_untimed_sizes_to_the_servers_config():
    """SGLang's loader gives any M the nearest key's config: without anchors a config tuned at 256 would serve every
    decode size, and one tuned at 4096 every prefill above it."""
    s = {"E": 384, "K": 7168, "N": 256, "topk": 8, "group": 32, "bits": 4}
    got = bc_tuner.anchors(s, [256, 512, 1024, 2048, 4096], [256, 512, 1024, 2048, 4096])
    assert got[:8] == [1, 2, 4, 8, 16, 32, 64, 128] and {384, 385, 8192} <= set(got)
    assert not {256, 512, 1024, 2048, 4096} & set(got)
    assert 1 in bc_tuner.anchors(s, [1, 8, 1024], [1024]) and 8 in bc_tuner.anchors(s, [1, 8, 1024], [1024])


def test_a_tuned_config_is_never_slower_than_the_servers_under_any_of_the_distributions(monkeypatch):
    """tune(groups=2): each distribution timed on its own, each against the server's own time under it; a config
    much faster under one and slower under the other (the H200's M=512 config: 1.16x uniform, 0.94x zipf(1)) is not
    kept, nor one within the margin; one faster under both is, and its speedup is the worse of the two."""
    server = {"uniform": 10.0, "zipf": 20.0}

    def fake_time(_torch, kernel, x, routes, _device, _warmup, _iters, _graph):
        cfg = bc_tuner.nearest(kernel.configs, x)
        (dist,) = routes  # one distribution per timing
        if "server" in cfg:
            return [server[dist]]
        if cfg["BLOCK_SIZE_M"] == 16:  # the mean's pick (and max/max's): 0.6 of the slowest, but 1.2x under uniform
            return [{"uniform": 12.0, "zipf": 10.0}[dist]]
        if cfg["BLOCK_SIZE_M"] == 64 and cfg["BLOCK_SIZE_N"] == 128:  # a little faster under both
            return [{"uniform": 9.0, "zipf": 19.0}[dist]]
        if cfg["BLOCK_SIZE_M"] == 32:  # faster under both, but within the margin: noise, not a gain
            return [{"uniform": 9.9, "zipf": 19.9}[dist]]
        return [30.0]

    monkeypatch.setattr(bc_tuner, "time_point", fake_time)
    ticks = iter(range(100_000))
    kernel = FakeTuned()
    got = kernel.tune([256], {256: (256, ["uniform", "zipf"])}, None, budget_s=20_000, seed=0, keep=[],
                      clock=lambda: float(next(ticks)), groups=2)
    assert kernel.configs[256]["BLOCK_SIZE_M"] == 64 and kernel.configs[256]["BLOCK_SIZE_N"] == 128, kernel.configs
    assert got["speedup"] == {"256": round(1 / 0.95, 3)} and got["margin"] == bc_tuner.TUNE_MARGIN
    # nothing beats it by the margin: the server's config stays, said as x1.0
    server.update(uniform=9.0, zipf=19.0)
    kernel, ticks = FakeTuned(), iter(range(100_000))
    got = kernel.tune([256], {256: (256, ["uniform", "zipf"])}, None, budget_s=20_000, seed=0, keep=[],
                      clock=lambda: float(next(ticks)), groups=2)
    assert kernel.configs[256]["server"] == 256 and got["speedup"] == {"256": 1.0}
    # routings that do not split evenly over the distributions are refused, not silently dropped
    with pytest.raises(ValueError, match="same number of routings"):
        FakeTuned().tune([256], {256: (256, ["uniform", "zipf", "zipf"])}, None, budget_s=1, seed=0, keep=[], groups=2)


def test_the_tuning_is_given_the_sweeps_own_distributions_one_group_each(monkeypatch):
    """tune_kernel: the sweep's bc_sweep_routing (here uniform and zipf(1)) becomes the tuning's groups, one routing
    of each per size, each from its own distribution (the zipf draw skewed onto a few experts)."""
    seen = {}

    class Recorder:
        s, w13, w2, s13, s2 = None, None, None, None, None

        def tune(self, sizes, routes, device, budget, seed, keep, builders=None, groups=1):
            seen.update(sizes=sizes, routes=dict(routes), groups=groups, builders=builders)  # tune_kernel frees routes after
            return {"sizes": sizes}

    monkeypatch.setattr(bc_tuner, "write_tuned", lambda kernel, out_dir: {"path": None})
    s = shard(dict(SMALL, num_experts=64, top_k=4, tp_size=1))
    cfg = {"routing": [{"kind": "uniform"}, {"kind": "zipf", "skew": 1.0}], "tune_budget_s": 0}
    got = bc_tuner.tune_kernel(torch, cfg, Recorder(), s, [1, 256], torch.device("cpu"), torch.float32, 0)
    assert got["routing"] == ["uniform", "zipf(1)"] and seen["groups"] == 2 and seen["builders"] is None
    x, routings = seen["routes"][256]
    assert len(routings) == 2 and x.shape == (256, s["K"])
    hottest = [int(torch.bincount(ids.flatten().long(), minlength=64).max()) for _w, ids in routings]
    assert hottest[1] > 2 * hottest[0], hottest  # uniform spreads the rows over the experts; zipf(1) piles them on a few
