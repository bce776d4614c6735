# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sweep's module side (the marlin_sweep module is its interface): the parameters checked and planned, the host
sized (GPUs, free memory, the backends' imports), and the worker (bc_marlin, staged with the module_utils it imports)
run in its own process past any orphan of a dead cycle, its results written as it goes."""

from __future__ import annotations

import json
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# AnsiballZ ships the worker to the host (with the module_utils it imports, in turn); its package is staged for the sweep
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_marlin
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    CommandError,
    CommandTimeout,
    beat_until,
    controller_gone,
    meminfo_mib,
    processes,
    vmstat,
    write_atomic,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import gpus as host_gpus
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_imports import forget, proof_path, read_proof
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    GIB,
    INT4_BACKENDS,
    ShapeError,
    backend_list,
    estimate_peak_bytes,
    replay_ids,
    resident_bytes,
    routing_specs,
    validate,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import SWEEP_MODULE, sweep_tags

SHAPE_KEYS = ("num_experts", "hidden_size", "intermediate_size", "top_k", "group_size", "num_bits", "tp_size")


# the worker's files: bc_marlin (the run loop) and every module_util it imports, in turn (tests/unit/test_marlin_cpu.py
# proves the list whole: the staged worker runs from these alone, without ansible)
SWEEP_FILES = ("bc_marlin", "bc_backends", "bc_imports", "bc_tuner", "bc_builders", "bc_timing", "bc_kernels", "bc_sweepstats",
               "bc_host")


def stage_sweep_package(tmpdir: str) -> str:
    """Lay out the SWEEP_FILES' files under tmpdir in the package they are imported from here
    (ansible_collections/<ns>/<name>/plugins/module_utils/), read from this module's own payload (pkgutil works for AnsiballZ's zip and for files
    alike), so that the sweep's interpreter - the host's SGLang venv, which has no ansible - can run it."""
    package = bc_marlin.__name__.rpartition(".")[0]
    pkg = os.path.join(tmpdir, *package.split("."))
    os.makedirs(pkg)
    parts = package.split(".")
    for depth in range(1, len(parts) + 1):
        with open(os.path.join(tmpdir, *parts[:depth], "__init__.py"), "w", encoding="utf-8"):
            pass
    for name in SWEEP_FILES:
        data = pkgutil.get_data(package, name + ".py")
        if data is None:
            raise RuntimeError("module_utils %s.py is missing from the module payload" % name)
        with open(os.path.join(pkg, name + ".py"), "wb") as fh:
            fh.write(data)
    return tmpdir


def list_gpus(module: AnsibleModule) -> list[dict[str, Any]]:
    """GPUs and their memory from nvidia-smi; [] on a host without it. A hung nvidia-smi (a wedged
    GPU) fails the preflight naming it, before anything is touched."""
    smi = module.get_bin_path("nvidia-smi")
    if not smi:
        return []
    try:
        return [{k: g[k] for k in ("index", "name", "free_mib", "total_mib")} for g in host_gpus(smi, module.params["command_timeout"])]
    except CommandError as err:
        module.fail_json(msg="preflight: %s" % err)
    return []


def sweeps_running() -> list[tuple[int, str]]:
    """Sweep processes on this host (pid, tag)."""
    return sweep_tags(processes())


def kill_orphans(module: AnsibleModule, tag: str) -> list[dict[str, Any]]:
    """A sweep of the same unit under another cycle's tag is an orphan: this cycle holds the unit's
    lock, so that cycle's controller is gone (an interrupted ansible-playbook leaves its async job
    running). Two sweeps at once would share the GPU and skew both, so it is killed. Sweeps of other
    units are left alone and reported."""
    unit = tag.split("/", 1)[0]
    killed = []
    for pid, other in sweeps_running():
        if other != tag and other.split("/", 1)[0] == unit:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append({"pid": pid, "tag": other})
            module.warn("killed the orphaned sweep pid %d of cycle %s: this cycle holds %s's lock, so its controller is gone"
                        % (pid, other, unit))
        elif other.split("/", 1)[0] != unit:
            module.warn("another sweep runs on this host (pid %d, %s): results may be skewed if it shares the device"
                        % (pid, other or "untagged"))
    gone, deadline = {k["pid"] for k in killed}, time.monotonic() + 10  # wait until their memory is released
    while gone & {pid for pid, _tag in sweeps_running()} and time.monotonic() < deadline:
        time.sleep(0.1)
    return killed


def expendable() -> None:
    """In the sweep's child, before exec: if the host runs out of memory, the kernel's OOM killer
    takes the benchmark first, never the inference server or sshd (oom_score_adj 1000)."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as fh:
            fh.write("1000")
    except OSError:
        pass


def oom_kills() -> int | None:
    """The kernel's count of OOM kills (/proc/vmstat oom_kill, Linux >= 4.13), None if unknown."""
    return vmstat("oom_kill")


def backend_check(module: AnsibleModule, python: str, backends: list[str]) -> tuple[dict[str, str], bool, str]:
    """Per backend, "" when it imports in `python` (the kernels' own imports, bc_marlin.proven_import_errors, run
    there from the staged worker), else why not; whether an earlier check's proof stood for the imports (bc_imports);
    and "" or why the check itself did not answer within import_timeout (a slow import is not a missing one). A check
    where all of them imported leaves its proof beside the output, 0600."""
    stage = tempfile.mkdtemp(prefix="bc-sweep-check-")
    # the worker's name on stdin, not the command line: a process that names it there is a sweep (to the
    # orphan check, the dead-man switch and an operator's pgrep), and this one is not
    code = ("import importlib, json, sys; m = importlib.import_module(sys.stdin.readline().strip()); "
            "names = json.loads(sys.stdin.readline()); print(json.dumps(m.proven_import_errors(names, json.loads(sys.stdin.readline()))))")
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [stage_sweep_package(stage), os.environ.get("PYTHONPATH")])))
        rc, out, err = host_run([python, "-c", code], module.params["import_timeout"],
                                stdin="%s\n%s\n%s\n" % (SWEEP_MODULE, json.dumps(backends), json.dumps(read_proof(module.params["output"]))),
                                env=env, cwd=stage)
    except CommandTimeout:
        return dict.fromkeys(backends, "not answered"), False, (
            "did not import %s within import_timeout=%d s: the check was killed (a loaded host, or a cold page cache after "
            "a model load, makes a first import slow); raise bc_sweep_import_timeout_s" % (", ".join(backends), module.params["import_timeout"]))
    except CommandError as exc:
        return dict.fromkeys(backends, str(exc)), False, ""
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    try:
        if rc != 0:
            return dict.fromkeys(backends, (err.strip().splitlines() or ["exit %d" % rc])[-1]), False, ""
        got = json.loads(out.strip().splitlines()[-1])
        errors = {name: str(got["errors"][name]) for name in backends}
    except (ValueError, IndexError, KeyError, TypeError):
        return dict.fromkeys(backends, "no answer from %s" % python), False, ""
    if got.get("proof") and module.params["keep_proof"]:
        try:
            write_atomic(proof_path(module.params["output"]), json.dumps(got["proof"]) + "\n", mode=0o600)
        except OSError:
            pass  # no proof (its directory not made yet, a full disk): the next check imports again
    return errors, bool(got.get("proven")), ""


def skipped(errors: dict[str, str], has_gpu: bool) -> dict[str, str]:
    """The backends that cannot run here, each with why."""
    out = {}
    for name, error in errors.items():
        if error or (name in INT4_BACKENDS and not has_gpu):
            out[name] = error or "needs an NVIDIA GPU and nvidia-smi found none"
    return out


def backend_problem(errors: dict[str, str], has_gpu: bool, stuck: str = "") -> tuple[list[str], str]:
    """The backends that can run, and "" or what is wrong with the choice, naming the fix. The first
    backend is the primary, what the run is for: the choice is refused unless it can run (another one
    that cannot is reported and skipped). `stuck`: why the import check did not answer (backend_check), the answer
    unless the primary needs a GPU and there is none."""
    down = skipped(errors, has_gpu)
    usable = [b for b in errors if b not in down]
    primary = next(iter(errors))
    if primary not in down:
        return usable, ""
    if not has_gpu and primary in INT4_BACKENDS:
        gpu_only = [b for b in errors if b in INT4_BACKENDS]
        return [], ("cannot run the %s backend without a GPU: nvidia-smi found none. Use backends [torch] for the CPU "
                    "reference" % ", ".join(gpu_only))
    if stuck:  # the import check did not answer within its bound: a slow import, not a missing one
        return [], stuck
    fix = ("Install torch in that Python" if primary == "torch"
           else "Point bc_sweep_python at the SGLang venv, or install sglang there")
    failing = [b for b in errors if errors[b]]
    return [], "cannot import the %s backend: %s. %s" % (
        ", ".join(failing), "; ".join(e for e in dict.fromkeys(errors[b] for b in failing)), fix)


def sizing(gpus: list[dict[str, Any]], device: int, need_gib: float, margin: float, backends: list[str],
           host_mib: int | None, fix: str = "sweep fewer or smaller batch sizes, or a larger tp_size") -> dict[str, Any]:
    """Where the sweep can run: `runnable` (it fits the device's total memory: otherwise it can run
    nowhere, and nothing may be stopped for it, with `why`) and `fits` (it fits the free memory
    beside whatever runs now)."""
    need_mib = need_gib * 1024 * (1 + margin)
    return dict(_sizing(gpus, device, need_mib, margin, backends, host_mib, fix), need_mib=round(need_mib))


def _sizing(gpus: list[dict[str, Any]], device: int, need_mib: float, margin: float, backends: list[str],
            host_mib: int | None, fix: str = "sweep fewer or smaller batch sizes, or a larger tp_size") -> dict[str, Any]:
    if not gpus:
        if "torch" not in backends:
            return {"runnable": False, "fits": False, "free_gib": 0, "total_gib": 0, "free_mib": 0,
                    "why": "backend %s needs an NVIDIA GPU and nvidia-smi found none" % ", ".join(backends)}
        total = host_mib or 0
        ok = not host_mib or need_mib <= total
        return {"runnable": ok, "fits": ok, "free_gib": round(total / 1024, 2), "total_gib": round(total / 1024, 2),
                "free_mib": total,
                "why": "" if ok else "the sweep needs ~%.1f GiB and the host has %.1f GiB of memory in all (CPU backend)"
                % (need_mib / 1024, total / 1024)}
    indices = [g["index"] for g in gpus]
    if device not in indices:
        return {"runnable": False, "fits": False, "free_gib": 0, "total_gib": 0, "free_mib": 0,
                "why": "device %d is not present: nvidia-smi lists GPU(s) %s" % (device, ", ".join(map(str, indices)))}
    gpu = next(g for g in gpus if g["index"] == device)
    runnable = need_mib <= gpu["total_mib"]
    return {"runnable": runnable, "fits": need_mib <= gpu["free_mib"], "free_gib": round(gpu["free_mib"] / 1024, 2),
            "free_mib": gpu["free_mib"],
            "total_gib": round(gpu["total_mib"] / 1024, 2),
            "why": "" if runnable else "the sweep needs ~%.1f GiB (with a %d%% margin) and GPU %d (%s) has %.1f GiB in all: "
            "it can run nowhere on this host, so nothing is stopped for it; %s"
            % (need_mib / 1024, margin * 100, device, gpu["name"], gpu["total_mib"] / 1024, fix)}


def run_watched(argv: list[str], stdin: str, timeout_s: float, heartbeat: dict[str, Any] | None,
                **popen: Any) -> tuple[int, str, str, str]:
    """Run the worker to its end, or kill it at `timeout_s`, or as soon as its controller is gone (controller_gone,
    looked at every quarter of the heartbeat's grace, 1-15 s): a sweep whose controller died (`--tags sweep` arms no
    dead-man switch) would hold the GPU to its timeout and skew the next cycle's sizing. Returns (returncode, stdout,
    stderr, why it was killed or "")."""
    check_s = max(1, min(15, heartbeat["for_s"] // 4)) if heartbeat else timeout_s
    deadline = time.monotonic() + timeout_s
    # pylint: disable-next=ansible-bad-function
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    given: str | None = stdin
    seen = False
    while True:
        try:
            out, err = proc.communicate(given, timeout=max(0.1, min(check_s, deadline - time.monotonic())))
            return proc.returncode, out, err, ""
        except subprocess.TimeoutExpired:
            given = None  # sent once: communicate goes on with what it has
        seen = seen or (heartbeat is not None and beat_until(heartbeat["path"]) is not None)
        why = "timeout" if time.monotonic() >= deadline else controller_gone(heartbeat, time.time(), seen)
        if why:
            proc.kill()
            out, err = proc.communicate()
            return proc.returncode, out, err, why


def sweep(module: AnsibleModule, cfg: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The sweep (run_worker). One that does not complete, however it ends (fail_json exits through the finally), or
    where a backend asked for did not run, forgets the preflight's import proof (bc_imports): the next preflight
    imports the backends again."""
    done = False
    try:
        result = run_worker(module, cfg, plan)
        done = not any(b.get("status") == "unavailable" for b in result.get("backends") or [])
        return result
    finally:
        if not done:
            forget(module.params["output"])


def run_worker(module: AnsibleModule, cfg: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """Run the worker in its own process (python -m bc_marlin, staged), past any orphan of a dead
    cycle; a kill, an OOM, a timeout or a wrong kernel fails naming it, the finished points kept."""
    p = module.params
    python = p["python"] or sys.executable
    stage = tempfile.mkdtemp(prefix="bc-sweep-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [stage_sweep_package(stage), os.environ.get("PYTHONPATH")])))
    orphans = kill_orphans(module, p["tag"]) if p["tag"] else []
    ooms_before = oom_kills()
    try:
        # not run_command: it takes no timeout, and the sweep's budget must bound it (and its process group's signal)
        rc, out, err, why = run_watched([python, "-m", SWEEP_MODULE] + (["--tag", p["tag"]] if p["tag"] else []), json.dumps(cfg),
                                        p["timeout"], p.get("heartbeat"), env=env, cwd=stage, preexec_fn=expendable)
    except OSError as exc:
        module.fail_json(msg="cannot run python %s for the sweep: %s" % (python, exc), **plan)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if why == "timeout":
        module.fail_json(msg="the sweep ran past timeout=%d s and was killed; finished points are in %s"
                         % (p["timeout"], p["output"]), **plan)
    if why:
        module.fail_json(msg="the sweep ended itself: %s; finished points are kept in %s" % (why, p["output"]),
                         controller_gone=why, **plan)
    tail = (err or "").strip().splitlines()[-20:]
    if rc < 0:
        sig = signal.Signals(-rc).name
        ooms_after = oom_kills()
        oom = sig == "SIGKILL" and None not in (ooms_before, ooms_after) and ooms_after > ooms_before  # type: ignore[operator]
        if oom:
            hint = (" from the kernel's OOM killer (oom_kill in /proc/vmstat went from %s to %s): the sweep needs about"
                    " %.2f GiB; free host memory, or sweep fewer or smaller batch sizes"
                    % (ooms_before, ooms_after, plan["estimate_peak_gib"]))
        elif sig == "SIGKILL":
            hint = " (not the OOM killer: /proc/vmstat oom_kill did not move; an operator or a watchdog sent it)"
        else:
            hint = ""
        module.fail_json(msg="the sweep process was killed by %s%s; finished points are kept in %s"
                         % (sig, hint, p["output"]), signal=sig, oom_killed=oom, stderr_tail=tail, **plan)
    last = (out or "").strip().splitlines()[-1:] or ["{}"]
    try:
        result = json.loads(last[0])
    except ValueError:
        result = {"status": "error", "error": "no result from the sweep process"}
    if rc != 0 or result.get("status") != "complete":
        module.fail_json(msg="the sweep failed (exit %d): %s" % (rc, result.get("error", "no result")),
                         rc=rc, stderr_tail=tail, **plan)
    result.pop("status", None)
    return dict(result, orphans_killed=orphans)


def problem(p: dict[str, Any]) -> str:
    """The first parameter the sweep cannot take, named with the fix; "" when all are sound."""
    for key, low, what in (("warmup", 0, ""), ("routings", 1, ""), ("timeout", 1, ""), ("iters", 3, " for a median with a spread"),
                           ("device", 0, ""), ("import_timeout", 1, "")):
        if p[key] < low:
            return "%s must be %s>= %d%s, got %d" % (key, "a CUDA device index " if key == "device" else "", low, what, p[key])
    if not 0 <= p["memory_margin"] <= 10:
        return "memory_margin must be 0-10 (a fraction of the estimate), got %s" % p["memory_margin"]
    if not 0 < p["check_bound"] < 1:
        return "check_bound must be above 0 and below 1 (a relative error), got %s" % p["check_bound"]
    if p["tune_budget_s"] < 0:
        return "tune_budget_s must be >= 0 seconds, got %d" % p["tune_budget_s"]
    if "triton_tuned" in p["backends"]:
        if p["tune_budget_s"] < 1:
            return ("backend triton_tuned tunes SGLang's Triton config on this GPU within tune_budget_s: give "
                    "tune_budget_s >= 1 (bc_sweep_tune_budget_s), or drop triton_tuned from backends")
        if p["tune_budget_s"] >= p["timeout"]:
            return ("tune_budget_s=%d leaves the sweep no time within timeout=%d: the timeout includes the tuning"
                    % (p["tune_budget_s"], p["timeout"]))
    extra = sorted(set(p["tune_batch_sizes"]) - set(p["batch_sizes"]))
    if extra:
        return "tune_batch_sizes %s are not batch sizes of the sweep (%s): tune a subset of batch_sizes" % (
            extra, ", ".join(map(str, sorted(set(p["batch_sizes"])))))
    if p["python"] and not os.access(p["python"], os.X_OK):
        return ("python=%s is not an executable on this host: point it at the interpreter that has torch "
                "(and sglang), e.g. /opt/sglang/bin/python" % p["python"])
    return ""


def plan_of(p: dict[str, Any]) -> dict[str, Any]:
    """The checked shape, backends and routing (replay files read and checked here, on the host,
    so that a bad one fails the preflight), and the estimated peak memory. ShapeError names the field."""
    s = validate({k: p[k] for k in SHAPE_KEYS}, p["batch_sizes"], p["backends"])
    specs = routing_specs(p["routing"], s)
    for spec in specs:
        if spec["kind"] == "replay":
            try:
                with open(spec["file"], encoding="utf-8") as fh:
                    replay_ids(json.load(fh), s, spec["file"])
            except (OSError, ValueError) as err:
                if isinstance(err, ShapeError):
                    raise
                raise ShapeError("replay file %s cannot be read as JSON: %s" % (spec["file"], err)) from None
    backends = backend_list(p["backends"])
    estimate = estimate_peak_bytes(s, p["batch_sizes"], backends, p["routings"])
    return {"shape": s, "batch_sizes": sorted(set(p["batch_sizes"])), "backends": backends, "backend": backends[0],
            "routing": [r["name"] for r in specs], "estimate_peak_gib": round(estimate / GIB, 3), "output": p["output"]}


def preflight(module: AnsibleModule, plan: dict[str, Any]) -> dict[str, Any]:
    """Sizing, the GPUs and whether the backends import: what the strategy decides from."""
    p = module.params
    gpus = list_gpus(module)
    errors, proven, stuck = backend_check(module, p["python"] or sys.executable, plan["backends"])
    usable, why = backend_problem(errors, bool(gpus), stuck)
    chosen = usable or plan["backends"]
    if usable and usable != plan["backends"]:  # only what will run is sized (and resident)
        plan["estimate_peak_gib"] = round(estimate_peak_bytes(plan["shape"], plan["batch_sizes"], usable, p["routings"]) / GIB, 3)
    fix = ("drop a backend from bc_sweep_backends (each keeps its weights on the GPU: %s), use a larger tp_size, or sweep "
           "smaller batch sizes" % ", ".join("%s %.1f GiB" % (b, resident_bytes(plan["shape"], b) / GIB) for b in chosen)
           if len(chosen) > 1 else "sweep fewer or smaller batch sizes, or a larger tp_size")
    return dict(gpus=gpus, backend_importable=bool(usable), backend_error=why, usable_backends=usable, backends_proven=proven,
                skipped_backends=skipped(errors, bool(gpus)) if usable else {}, oom_kills=oom_kills(),
                **sizing(gpus, p["device"], plan["estimate_peak_gib"], p["memory_margin"], chosen, meminfo_mib(), fix))
