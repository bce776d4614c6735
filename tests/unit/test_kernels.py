"""Kernels side by side (issue 16) on the CPU: the routing distributions, the two-sided roofline,
the fastest backend per M, the memory estimate that grows with the backends, a kernel that computes
a wrong answer, the report and the run comparison. The H200 runs these feed are in docs/benchmarks.md;
the fixtures are two of them (tp 8, three backends, two routings), unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import (
    bc_backends,
    bc_kernels,
    bc_marlin,
    bc_report,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    GIB,
    ShapeError,
    backend_list,
    bound_knee,
    estimate_peak_bytes,
    floors,
    replay_ids,
    routing_spec,
    series_compare,
    shard,
    validate,
    winners,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/unit/fixtures/h200"
K26 = {"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8, "group_size": 32, "num_bits": 4}
SMALL = {"num_experts": 8, "hidden_size": 128, "intermediate_size": 64, "top_k": 2, "group_size": 32, "num_bits": 4, "tp_size": 1}
CPU = torch.device("cpu")


def sample(spec: dict, m: int, s: dict | None = None, seed: int = 0):
    s = s or shard(dict(K26, tp_size=1))
    gen = torch.Generator().manual_seed(seed)
    routing = bc_kernels.Routing(torch, s, routing_spec(spec, s), CPU, gen)
    return routing, routing.sample(m, gen)


@pytest.mark.parametrize("spec", [{"kind": "uniform"}, {"kind": "zipf", "skew": 1.0}, {"kind": "hot", "fraction": 0.5}])
def test_every_distribution_gives_top_k_distinct_experts_and_weights_summing_to_one(spec):
    _r, (w, ids) = sample(spec, 512)
    assert ids.shape == (512, 8) and ids.dtype == torch.int32 and int(ids.min()) >= 0 and int(ids.max()) < 384
    assert all(len(set(row)) == 8 for row in ids.tolist())
    assert torch.allclose(w.sum(-1), torch.ones(512), atol=1e-5) and bool((w > 0).all())


def test_zipf_concentrates_tokens_on_the_popular_experts_and_touches_fewer():
    _r, (_w, uniform) = sample({"kind": "uniform"}, 64)
    routing, (_w, zipf) = sample({"kind": "zipf", "skew": 1.0}, 64)
    assert len(zipf.unique()) < len(uniform.unique())  # fewer experts touched: fewer bytes to stream
    counts = torch.bincount(zipf.reshape(-1).long(), minlength=384)
    top = int(torch.argmax(routing.logp))  # the rank-1 expert
    assert int(counts[top]) > 0.4 * 64  # p = 1/H(384) per draw, 8 draws (uniform: 8/384 of the tokens, 1.3)
    _r, (_w, steeper) = sample({"kind": "zipf", "skew": 2.0}, 64)
    assert len(steeper.unique()) < len(zipf.unique())


def test_hot_sends_the_fraction_of_tokens_to_the_hot_experts_only():
    routing, (_w, ids) = sample({"kind": "hot", "fraction": 1.0, "experts": 12}, 256)
    hot = set(torch.nonzero(routing.hot_mask == 0).reshape(-1).tolist())
    assert len(hot) == 12 and set(ids.unique().tolist()) == hot
    _r, (_w, half) = sample({"kind": "hot", "fraction": 0.5, "experts": 12}, 2000, seed=1)
    routing = _r
    hot = set(torch.nonzero(routing.hot_mask == 0).reshape(-1).tolist())
    only_hot = sum(set(row) <= hot for row in half.tolist())
    assert 0.4 * 2000 < only_hot < 0.6 * 2000


def test_replay_takes_windows_of_the_recorded_rows(tmp_path):
    s = shard(dict(SMALL))
    rows = [[0, 1], [2, 3], [4, 5], [6, 7], [1, 2]]
    path = tmp_path / "ids.json"
    path.write_text(json.dumps({"topk_ids": rows}))
    _r, (_w, ids) = sample({"kind": "replay", "file": str(path)}, 7, s)
    got = ids.tolist()
    start = rows.index(got[0])
    assert got == [rows[(start + i) % len(rows)] for i in range(7)]  # consecutive, wrapping


@pytest.mark.parametrize(("data", "message"), [
    ([], "holds no rows"),
    ([[0, 1], [0, 0]], "row 1 is [0, 0]"),
    ([[0, 9]], "row 0 is [0, 9]: each row must be top_k=2 distinct expert ids from 0 to 7"),
    ([[0, 1, 2]], "row 0"),
    ({"topk_ids": [[0, True]]}, "row 0"),
])
def test_replay_rows_that_do_not_fit_the_model_are_refused_naming_the_row(data, message):
    with pytest.raises(ShapeError, match=None) as err:
        replay_ids(data, shard(dict(SMALL)), "/x/ids.json")
    assert message in str(err.value) and "/x/ids.json" in str(err.value)


@pytest.mark.parametrize(("spec", "message"), [
    ({"kind": "gauss"}, "routing kind='gauss': use one of uniform, zipf, hot, replay"),
    ({"kind": "zipf", "skew": 0}, "zipf skew=0.0: give a skew above 0"),
    ({"kind": "hot", "fraction": 1.5}, "hot fraction=1.5"),
    ({"kind": "hot", "experts": 4}, "hot experts=4: give from top_k (8)"),
    ({"kind": "replay"}, "replay needs file"),
])
def test_routing_specs_are_checked_naming_the_field(spec, message):
    with pytest.raises(ShapeError) as err:
        routing_spec(spec, shard(dict(K26, tp_size=1)))
    assert message in str(err.value)


def test_routing_names_go_into_the_result():
    s = shard(dict(K26, tp_size=1))
    assert [routing_spec(x, s)["name"] for x in ({"kind": "uniform"}, {"kind": "zipf", "skew": 1.2},
                                                 {"kind": "hot", "fraction": 0.25, "experts": 16},
                                                 {"kind": "replay", "file": "/d/k26-ids.json"})] == [
        "uniform", "zipf(1.2)", "hot(0.25 of tokens to 16)", "replay(k26-ids.json)"]


def test_the_floor_is_bytes_at_small_m_and_flops_at_large_m():
    s = shard(dict(K26, tp_size=1))
    bw, tc = 4.22e12, 786e12  # the H200's measured copy bandwidth and dense bf16 rate
    small, large = floors(s, 1, 8, bw, tc), floors(s, 16384, 384, bw, tc)
    assert small["bound"] == "memory" and small["floor_ms"] == small["floor_bytes_ms"] > small["floor_flops_ms"]
    assert large["bound"] == "compute" and large["floor_ms"] == large["floor_flops_ms"] > large["floor_bytes_ms"]
    # FLOPs: 2 * M * top_k * 3 * K * N at the measured rate
    assert large["floor_flops_ms"] == pytest.approx(2 * 16384 * 8 * 3 * 7168 * 2048 / tc * 1000, rel=1e-4)
    points = [dict(floors(s, m, min(384, 8 * m), bw, tc), m=m) for m in (1, 64, 1024, 2048, 4096, 8192)]
    knee = bound_knee(points)
    assert knee is not None and all(p["bound"] == "memory" for p in points if p["m"] < knee)
    assert floors(s, 1, 8, 0.0, tc)["floor_ms"] is None  # no GPU, no floor


def test_winners_name_the_fastest_backend_per_routing_and_m_and_the_distance_to_the_floor():
    series = [{"backend": b, "routing": r, "points": [{"m": 1, "ms": ms, "floor_ms": 0.05}, {"m": 8, "ms": ms * 2, "floor_ms": 0.2}]}
              for b, r, ms in (("sglang", "uniform", 0.1), ("triton", "uniform", 0.3), ("sglang", "zipf(1)", 0.2),
                               ("triton", "zipf(1)", 0.15))]
    rows = winners(series)
    assert [(w["routing"], w["m"], w["fastest"]) for w in rows] == [
        ("uniform", 1, "sglang"), ("uniform", 8, "sglang"), ("zipf(1)", 1, "triton"), ("zipf(1)", 8, "triton")]
    assert rows[0]["backends"]["triton"] == {"ms": 0.3, "to_floor": 6.0}


def test_the_estimate_grows_with_the_backends_each_layout_resident():
    s = shard(dict(K26, tp_size=1))
    sizes = [2 ** i for i in range(13)]
    one, two, three = (estimate_peak_bytes(s, sizes, b) / GIB for b in (["sglang"], ["sglang", "triton"], ["sglang", "triton", "torch"]))
    assert one < two < three
    assert 8.86 <= two - one <= 10  # a second INT4 layout (9.51 GB = 8.86 GiB) and Triton's larger working set
    assert three - two > 30  # the dequantized bf16 copy
    assert estimate_peak_bytes(s, sizes, ["auto", "sglang"]) == estimate_peak_bytes(s, sizes, ["sglang"])


def test_backend_names_are_checked_and_triton_needs_a_group():
    assert backend_list(["auto", "torch", "sglang"]) == ["sglang", "torch"]
    with pytest.raises(ShapeError, match="backend 'cutlass' is not one of sglang, triton, triton_tuned, torch"):
        backend_list(["cutlass"])
    with pytest.raises(ShapeError, match="backend triton runs SGLang's fused_moe int4_w4a16: it needs num_bits 4 and a group_size"):
        validate(dict(K26, group_size=-1), [1], ["triton"])


def test_a_backend_that_cannot_run_is_reported_and_the_others_are_timed():
    res = bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1, 4], "backends": ["torch", "triton"], "iters": 3, "warmup": 1,
                               "device_type": "cpu", "routing": [{"kind": "uniform"}, {"kind": "zipf"}]})
    assert res["status"] == "complete" and res["backend"] == "torch"
    assert [(b["name"], b["status"]) for b in res["backends"]] == [("torch", "measured"), ("triton", "unavailable")]
    assert "needs a CUDA GPU" in res["backends"][1]["why"]
    assert [(r["backend"], r["routing"]) for r in res["series"]] == [("torch", "uniform"), ("torch", "zipf(1)")]
    assert res["points"] == res["series"][0]["points"] and res["routing"] == ["uniform", "zipf(1)"]
    with pytest.raises(RuntimeError, match="the primary backend triton cannot run here: backend triton needs a CUDA GPU"):
        bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1], "backends": ["triton"], "device_type": "cpu"})


class WrongKernel(bc_kernels.TorchKernel):
    """A test double of a GPU kernel with a layout bug: the right answer scaled by 1.5."""

    name = "triton"

    def __init__(self, torch, w):
        super().__init__(torch, w, torch.float32)

    def __call__(self, x, topk_w, topk_ids):
        return super().__call__(x, topk_w, topk_ids) * 1.5


def test_a_kernel_that_computes_a_wrong_answer_fails_the_sweep_naming_it(monkeypatch, tmp_path):
    monkeypatch.setitem(bc_backends.KERNELS, "triton", WrongKernel)
    monkeypatch.setattr(bc_marlin, "available", lambda name, cuda: (True, ""))
    saved = []
    res = bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1, 4], "backends": ["torch", "triton"], "iters": 3, "warmup": 1,
                               "device_type": "cpu"}, saved.append)
    assert res["status"] == "error" and "triton: relative error 0.5000 > 0.0300" in res["error"]
    assert saved[-1]["status"] == "error" and len(saved[-1]["series"][1]["points"]) == 2  # the times are kept
    triton = next(b for b in res["backends"] if b["name"] == "triton")
    assert triton["check"]["ok"] is False


def test_the_report_puts_the_kernels_side_by_side_and_the_history_keeps_every_series(tmp_path):
    res = json.loads((FIX / "sweep-tp8-kernels-run1.json").read_text())
    text = bc_report.render("h200", "run1", res, None, "x.png")
    assert "## Kernels side by side" in text and "### Routing uniform" in text and "### Routing zipf(1)" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1 | 8.000 |"))
    fastest = min(res["winners"][0]["backends"].items(), key=lambda kv: kv[1]["ms"])[0]
    assert row.endswith("| %s |" % fastest) and "**" in row
    for b in res["backends"]:
        assert "correctness of %s: relative error" % b["name"] in text
    assert "dense bf16 %s TFLOP/s" % res["dense_tflops"] in text and "torch bf16 ms" in text
    assert "## What to run at tp_size 8" in text and "One backend for every M" in text
    line = bc_report.history_line("h200", "run1", res, "r.md")
    assert line["tuned"] == {}  # no tuned backend in this run
    assert [(s["backend"], s["routing"]) for s in line["series"]] == [(s["backend"], s["routing"]) for s in res["series"]]
    pytest.importorskip("matplotlib")
    bc_report.plot(str(tmp_path / "p.png"), "t", res)
    assert (tmp_path / "p.png").stat().st_size > 10000


def test_a_result_of_one_backend_still_renders():
    old = json.loads((FIX / "sweep-tp1-sglang-k26.json").read_text())
    assert "series" not in old
    text = bc_report.render("h200", "old", old, None, "x.png")
    assert "## sglang, uniform routing" in text and "Kernels side by side" not in text


def test_compare_runs_reports_fidelity_per_backend_and_routing(tmp_path):
    run1, run2 = (json.loads((FIX / f).read_text()) for f in ("sweep-tp8-kernels-run1.json", "sweep-tp8-kernels-run2.json"))
    same = series_compare(run1["series"], run1["series"])
    assert len(same) == 6 and all(c["worst"] == 0 for c in same)
    slow = json.loads(json.dumps(run2))
    slow["series"][4]["points"][3]["ms"] = run1["series"][4]["points"][3]["ms"] * 1.08
    cmp = {(c["backend"], c["routing"]): c["worst"] for c in series_compare(slow["series"], run1["series"])}
    assert cmp[(slow["series"][4]["backend"], slow["series"][4]["routing"])] == pytest.approx(0.08, abs=1e-3)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run1))
    b.write_text(json.dumps(slow))
    script = [sys.executable, str(ROOT / "bench/compare_runs.py")]
    out = subprocess.run([*script, "--fidelity", str(a), str(b)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "DOES NOT HOLD" in out.stdout
    one = subprocess.run([*script, str(a)], capture_output=True, text=True, timeout=60, check=False)
    assert one.returncode == 0 and "| uniform | triton |" in one.stdout and "/ uniform" in one.stdout


def test_the_preflight_reports_backends_that_cannot_run_and_refuses_a_bad_replay_file(tmp_path):
    out = str(tmp_path / "plan.json")
    r = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["torch", "triton"], preflight=True), check=True)
    assert r["_status"] == "SUCCESS" and r["usable_backends"] == ["torch"] and "triton" in r["skipped_backends"]
    assert r["backends"] == ["torch", "triton"] and r["backend_importable"] is True
    only = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["triton"], preflight=True), check=True)
    assert only["backend_importable"] is False and "cannot run the triton backend without a GPU" in only["backend_error"]
    bad = tmp_path / "ids.json"
    bad.write_text(json.dumps([[0, 1], [3, 3]]))
    refused = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["torch"], routing=[{"kind": "replay", "file": str(bad)}]), check=True)
    assert refused["_status"] == "FAILED!" and "row 1 is [3, 3]" in refused["msg"]
    hostile = adhoc("marlin_sweep", dict(SMALL, output=out, routing=[{"kind": "zipf", "skew": -1}]), check=True)
    assert hostile["_status"] == "FAILED!" and "routing[0] zipf skew=-1.0" in hostile["msg"]


def test_the_backends_are_imported_once_per_installation_and_again_after_any_change(tmp_path):
    """Through the module: the preflight's import of the backends (torch: seconds of CPU) runs once; its proof beside
    the output (0600) stands for the next check; a proof others may write, and a broken torch that shadows the real one
    (no metadata of its own), are never read as proven. The proof's rules are test_an_import_proof_stands_only_*."""
    site = tmp_path / "site"  # a directory on the interpreter's path, as site-packages is
    site.mkdir()
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH=\"${{PYTHONPATH:+$PYTHONPATH:}}{site}\" exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    out, proof = tmp_path / "plan.json", tmp_path / "imports-proven.json"

    def check(**extra):
        r = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["torch"], preflight=True, python=str(python), **extra),
                  check=True)
        assert r["_status"] == "SUCCESS", r
        return r

    unkept = check(keep_proof=False)  # the cycle's --check: nothing written on the host
    assert unkept["backend_importable"] is True and not proof.exists()
    first = check()
    assert first["backend_importable"] is True and first["backends_proven"] is False
    assert oct(proof.stat().st_mode & 0o777) == "0o600" and json.loads(proof.read_text())["imported"] == ["torch"]
    assert check()["backends_proven"] is True
    proof.chmod(0o666)  # a proof others may write proves nothing
    assert check()["backends_proven"] is False and oct(proof.stat().st_mode & 0o777) == "0o600"
    (site / "torch").mkdir()  # a broken torch that shadows the real one, with no metadata of its own
    (site / "torch" / "__init__.py").write_text("raise ImportError('a broken torch')\n")
    broken = check()
    assert broken["backend_importable"] is False and "a broken torch" in broken["backend_error"] and not broken["backends_proven"]


def test_an_import_that_does_not_answer_within_its_bound_is_refused_as_slow_never_as_missing(tmp_path):
    """A Python whose import never answers (a host too loaded, a page cache cold after a model load): the check is killed
    at import_timeout, nothing is importable (fail closed), no proof is kept, and the fix is the bound's setting, not
    an install of a torch that is there."""
    python = tmp_path / "python"
    # an answer with a proof, then never an end: no margin for a busy machine to beat, and a proof that must not be kept
    python.write_text("#!/bin/sh\necho '{\"errors\": {\"torch\": \"\"}, \"proof\": {\"imported\": [\"torch\"]}, \"proven\": false}'\n"
                      "exec sleep 3600\n")
    python.chmod(0o755)
    out = tmp_path / "plan.json"
    r = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["torch"], preflight=True, python=str(python), import_timeout=1),
              check=True)
    assert r["_status"] == "SUCCESS" and r["backend_importable"] is False and r["usable_backends"] == [], r
    assert "did not import torch within import_timeout=1 s" in r["backend_error"], r["backend_error"]
    assert "bc_sweep_import_timeout_s" in r["backend_error"] and "Install torch" not in r["backend_error"]
    assert not (tmp_path / "imports-proven.json").exists() and r["backends_proven"] is False
    gpu_only = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["sglang"], preflight=True, python=str(python),
                                          import_timeout=1), check=True)  # no GPU here: that is the answer, not the import
    assert gpu_only["backend_importable"] is False and "without a GPU" in gpu_only["backend_error"], gpu_only
    zero = adhoc("marlin_sweep", dict(SMALL, output=str(out), preflight=True, import_timeout=0), check=True)
    assert zero["_status"] == "FAILED!" and "import_timeout must be >= 1" in zero["msg"], zero


def _proof(tmp_path):
    """A proof as a check makes it, in this process: its installation, and what it loaded plus a file of the test's."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_imports

    mine = tmp_path / "loaded.py"
    mine.write_text("x = 1\n")
    here = bc_imports.installation()
    made = bc_imports.loaded()
    assert here and made and made["tops"]
    made["files"].append(bc_imports.identity(str(mine)))
    return bc_imports, dict(made, installation=here, imported=["torch"]), here, mine


@pytest.mark.parametrize(("change", "holds"), [
    ("nothing", True),
    ("a backend the proof does not name", False),
    ("a file the import loaded, edited", False),
    ("a file the import loaded, removed", False),
    ("a file the import loaded, made unreadable", False),
    ("a package found elsewhere now", False),
    ("another interpreter", False),
    ("an environment that steers imports", False),
    ("a distribution installed", False),
    ("the kernels' code", False),
    ("no files recorded", False),
    ("no installation readable", False),
])
def test_an_import_proof_stands_only_for_the_same_installation_and_files(tmp_path, change, holds):
    bc_imports, proof, here, mine = _proof(tmp_path)
    names = ["torch"]
    if change == "a backend the proof does not name":
        names = ["torch", "triton"]
    elif change == "a file the import loaded, edited":
        mine.write_text("x = 2\n")
    elif change == "a file the import loaded, removed":
        mine.unlink()
    elif change == "a file the import loaded, made unreadable":
        mine.chmod(0o000)
    elif change == "a package found elsewhere now":
        proof["tops"][0][1] = str(tmp_path / "elsewhere" / "__init__.py")
    elif change == "another interpreter":
        here = dict(here, python="/usr/bin/python3.99")
    elif change == "an environment that steers imports":
        here = dict(here, env=dict(here["env"], LD_PRELOAD="/tmp/x.so"))
    elif change == "a distribution installed":
        here = dict(here, dists="0" * 64)
    elif change == "the kernels' code":
        here = dict(here, code="0" * 64)
    elif change == "no files recorded":
        proof["files"] = []
    elif change == "no installation readable":
        here = None
    assert bc_imports.holds(proof, here, names) is holds


@pytest.mark.parametrize(("change", "read"), [
    ("this user's, 0600", True), ("others may write it", False), ("a link to it", False),
    ("its directory others may write", False), ("not JSON", False), ("absent", False),
])
def test_a_proof_is_read_only_from_a_file_of_this_user_alone(tmp_path, change, read):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_imports

    home = tmp_path / "results"
    home.mkdir(mode=0o755)
    path = home / bc_imports.PROOF_NAME
    path.write_text(json.dumps({"imported": ["torch"]}))
    path.chmod(0o600)
    if change == "others may write it":
        path.chmod(0o666)
    elif change == "a link to it":
        real = tmp_path / "real.json"
        path.rename(real)
        path.symlink_to(real)
    elif change == "its directory others may write":
        home.chmod(0o777)
    elif change == "not JSON":
        path.write_text("{not json")
    elif change == "absent":
        path.unlink()
    assert (bc_imports.read_proof(str(home / "plan.json")) == {"imported": ["torch"]}) is read


def test_a_sweep_that_does_not_complete_or_runs_without_a_backend_forgets_the_proof(tmp_path):
    """The sweep forgets the proof beside its output where it did not complete (here: its interpreter fails) or where a
    backend asked for did not run: the next preflight imports again rather than trust it."""
    out, proof = tmp_path / "sweep.json", tmp_path / "imports-proven.json"
    proof.write_text("{}")
    failed = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["torch"], python="/bin/false", batch_sizes=[1]))
    assert failed["_status"] == "FAILED!" and "the sweep failed" in failed["msg"] and not proof.exists()
    proof.write_text("{}")
    ran = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["torch", "triton"], batch_sizes=[1], iters=3, warmup=1))
    assert ran["_status"] == "CHANGED" and not proof.exists(), ran  # triton cannot run here: reported, the proof forgotten
    proof.write_text("{}")
    whole = adhoc("marlin_sweep", dict(SMALL, output=str(out), backends=["torch"], batch_sizes=[1], iters=3, warmup=1))
    assert whole["_status"] == "CHANGED" and proof.exists(), whole  # a whole sweep keeps it


def test_the_installation_reads_the_path_its_metadata_and_the_import_environment(tmp_path, monkeypatch):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_imports

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    seen = [bc_imports.installation()]
    (site / "newdist-1.0.dist-info").mkdir()  # what pip install writes
    seen.append(bc_imports.installation())
    (site / "newmod.py").write_text("")  # a module with no metadata, now on the path
    seen.append(bc_imports.installation())
    monkeypatch.setenv("LD_PRELOAD", str(tmp_path / "x.so"))
    seen.append(bc_imports.installation())
    assert all(seen) and len({json.dumps(i, sort_keys=True) for i in seen}) == len(seen)
    assert seen[-1] == bc_imports.installation()  # nothing changed: the same


def test_one_sizing_of_every_tensor_parallel_run_the_largest_rules():
    from bc_filters import preflight

    tp1 = {"need_mib": 58000, "estimate_peak_gib": 52.5, "fits": False, "runnable": True, "why": "", "gpus": [{"index": 0}],
           "free_mib": 7000, "free_gib": 6.8, "oom_kills": 0}
    tp8 = dict(tp1, need_mib=9800, estimate_peak_gib=8.7, fits=True)
    got = preflight([tp8, tp1])
    assert got == {"need_mib": 58000, "need_gib": 52.5, "fits": False, "has_gpu": True, "free_mib": 7000, "free_gib": 6.8,
                   "oom_kills": 0, "why": "", "gpu_expected": True}  # a result that does not say its backends: expected
    nowhere = dict(tp1, runnable=False, why="the sweep needs ~160 GiB and GPU 0 has 139.8 GiB in all")
    assert preflight([tp8, nowhere, nowhere])["why"] == nowhere["why"]  # each reason once
    assert preflight([dict(tp8, gpus=[])])["has_gpu"] is False
    with pytest.raises(ValueError, match="no preflight results"):
        preflight([])


@pytest.mark.parametrize(("backends", "expected"), [
    (["sglang", "triton", "torch"], True), (["torch", "triton_tuned"], True), (["triton"], True),
    (["torch"], False),  # the CPU reference alone: the host may be declared GPU-less
    ([], True),  # not said: a GPU is expected
])
def test_a_gpu_is_expected_wherever_a_backend_runs_only_on_one(backends, expected):
    from bc_filters import preflight

    plan = {"need_mib": 1, "estimate_peak_gib": 0.1, "fits": True, "runnable": True, "why": "", "gpus": [],
            "free_mib": 0, "free_gib": 0, "backends": backends}
    assert preflight([plan])["gpu_expected"] is expected


def test_the_primary_backend_must_run_and_a_repeated_routing_is_refused(tmp_path):
    # the first backend is what the run is for: a missing primary fails, a missing secondary is reported
    with pytest.raises(RuntimeError, match="the primary backend triton cannot run here"):
        bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1], "backends": ["triton", "torch"], "device_type": "cpu"})
    with pytest.raises(RuntimeError, match="backend sglang needs a CUDA GPU"):  # the default, on a host without one
        bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1], "backends": ["auto", "torch"], "device_type": "cpu"})
    out = str(tmp_path / "plan.json")
    refused = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["triton", "torch"], preflight=True), check=True)
    assert refused["backend_importable"] is False and "without a GPU" in refused["backend_error"]
    for a, b in (("d1", "d2"),):
        for d in (a, b):
            (tmp_path / d).mkdir()
            (tmp_path / d / "ids.json").write_text(json.dumps([[0, 1], [2, 3]]))
    twice = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["torch"], routing=[
        {"kind": "replay", "file": str(tmp_path / "d1/ids.json")}, {"kind": "replay", "file": str(tmp_path / "d2/ids.json")}]), check=True)
    assert twice["_status"] == "FAILED!" and "names replay(ids.json) twice" in twice["msg"]


def test_a_secondary_backend_that_cannot_be_built_is_reported_and_the_run_goes_on(monkeypatch):
    class Broken(bc_kernels.TorchKernel):
        """A test double of a kernel whose construction fails (an SGLang release without a helper)."""

        def __init__(self, torch, w):
            raise ImportError("cannot import name 'MoeRunnerConfig'")

    monkeypatch.setitem(bc_backends.KERNELS, "triton", Broken)
    monkeypatch.setattr(bc_marlin, "available", lambda name, cuda: (True, ""))
    res = bc_marlin.run_sweep({"shape": SMALL, "batch_sizes": [1, 4], "backends": ["torch", "triton"], "iters": 3, "warmup": 1,
                               "device_type": "cpu"})
    assert res["status"] == "complete" and [r["backend"] for r in res["series"]] == ["torch"]
    triton = next(b for b in res["backends"] if b["name"] == "triton")
    assert triton["status"] == "unavailable" and "MoeRunnerConfig" in triton["why"]


def test_a_replay_file_given_relative_is_read_from_where_the_module_runs(tmp_path, monkeypatch):
    (tmp_path / "ids.json").write_text(json.dumps([[0, 1], [2, 3], [4, 5]]))
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "sweep.json")
    r = adhoc("marlin_sweep", dict(SMALL, output=out, backends=["torch"], batch_sizes=[1, 2], iters=3, warmup=1,
                                   routing=[{"kind": "replay", "file": "ids.json"}]))
    assert r["_status"] in ("CHANGED", "SUCCESS"), r.get("msg")
    assert r["routing"] == ["replay(ids.json)"] and [p["m"] for p in r["points"]] == [1, 2]


def test_the_report_compares_with_the_previous_run_of_the_same_routing():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_report import history_line, previous_run

    res = json.loads((FIX / "sweep-tp8-kernels-run1.json").read_text())
    zipf_first = dict(res, series=[s for s in res["series"] if s["routing"] != "uniform"])
    history = [history_line("h200", "run1", res, "r.md"), dict(history_line("h200", "old", res, "r.md"), routing=None)]
    history[1].pop("routing")  # a line from before routings were named: uniform
    assert previous_run(history, "h200", res, "run2")["stamp"] == "old"
    assert previous_run(history, "h200", zipf_first, "run2") is None  # uniform runs are not zipf's past
    assert previous_run([*history, history_line("h200", "z", zipf_first, "r.md")], "h200", zipf_first, "run2")["stamp"] == "z"


def test_fidelity_does_not_hold_when_the_runs_share_nothing_or_a_series_is_empty(tmp_path):
    run1 = json.loads((FIX / "sweep-tp8-kernels-run1.json").read_text())
    only_torch = dict(run1, series=[s for s in run1["series"] if s["backend"] == "torch"])
    empty = json.loads(json.dumps(run1))
    empty["series"][0]["points"] = []
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(run1))
    b.write_text(json.dumps(only_torch))
    c.write_text(json.dumps(empty))
    script = [sys.executable, str(ROOT / "bench/compare_runs.py"), "--fidelity"]
    for old, new in ((a, b), (c, a), (a, c)):
        out = subprocess.run([*script, str(old), str(new)], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 1 and "DOES NOT HOLD" in out.stdout, (old.name, new.name, out.stdout[-300:], out.stderr[-300:])


def test_a_hot_set_defaults_to_what_the_model_has():
    s = shard(dict(SMALL, num_experts=8, top_k=5))
    assert routing_spec({"kind": "hot"}, s)["experts"] == 8  # 2 x top_k = 10 > 8 experts
    with pytest.raises(ShapeError, match="hot experts=0"):
        routing_spec({"kind": "hot", "experts": 0}, s)
