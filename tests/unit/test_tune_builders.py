"""The tuning's build processes (#32), as real processes on the CPU: spawned children that build configs ahead of the
timing, answer per config, are ended at the budget's deadline, report a set-up that failed instead of churning, and
never outlive a killed sweep (PR_SET_PDEATHSIG). What they build on the H200 (Triton configs into its on-disk cache) is
tests/gpu's; here `setup` is a plain function of the driver script, the double of the kernel's build."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_builders, bc_sweepstats, bc_tuner

ROOT = Path(__file__).resolve().parents[2]

DRIVER = '''
import json, os, sys, time
sys.path[:0] = [%(root)r]
sys.path.insert(0, %(mu)r)  # as tests/conftest.py does: the children run this part too
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_builders


class Unreadable:
    """An argument a build process cannot unpickle (a CUDA IPC handle it cannot open, as the pool sees it)."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise OSError("pidfd_getfd: Operation not permitted")


def setup(mode, *_unused):
    """The double of the kernel's build: a config's name says what its build does."""
    if mode == "broken":
        raise RuntimeError("No module named 'sglang'\\n   \\n")

    def build(config):
        if config == "bad":
            raise RuntimeError("out of resources: Required: 262144, Hardware limit: 232448")
        if config == "slow":
            time.sleep(600)
        if config == "pid":
            print(json.dumps({"child": os.getpid()}), flush=True)
        if config == "crash":
            os._exit(9)  # a segfault in Triton's compiler, as the pool sees it

    return build


def children():
    out = set()
    for task in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%%s/children" %% task) as f:
            out |= {int(p) for p in f.read().split()}
    return sorted(out)


if __name__ == "__main__":
    mode, configs, window = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    t0 = time.monotonic()
    b = None
    try:
        args = (mode, Unreadable()) if mode == "unreadable" else (mode,)
        b = bc_builders.Builders(2, setup, args, time.monotonic() + (20 if mode == "unreadable" else 300))  # once both are up
        print(json.dumps({"children": children()}), flush=True)
        t0 = time.monotonic()
        out = b.build(configs, time.monotonic() + window)
    except bc_builders.BuildersFailed as err:
        out = {"failed": str(err)}
    took = time.monotonic() - t0
    closed = b is None or not b.procs
    if b is not None:
        b.close()
    print(json.dumps({"out": out, "took": took, "closed_at_deadline": closed, "after": children()}), flush=True)
'''


@pytest.fixture
def driver(tmp_path: Path) -> Path:
    path = tmp_path / "driver.py"
    path.write_text(DRIVER % {"root": str(ROOT), "mu": str(ROOT / "collections")})
    return path


def run(driver: Path, mode: str, configs: list, window: float) -> dict:
    proc = subprocess.run([sys.executable, str(driver), mode, json.dumps(configs), str(window)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {k: v for line in lines for k, v in line.items()}


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids: list[int], within: float = 60) -> list[int]:
    """The pids of `pids` still alive after waiting up to `within` s for them to end (multiprocessing's resource
    tracker, also a child, ends when it reads its parent's exit)."""
    deadline = time.monotonic() + within
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def test_each_config_is_answered_built_or_why_not(driver):
    got = run(driver, "ok", ["a", "bad", "b"], 120)
    assert got["out"] == {"0": "", "1": "RuntimeError: out of resources: Required: 262144, Hardware limit: 232448",
                          "2": ""}
    assert not got["closed_at_deadline"]
    assert gone(got["children"]) == []  # close() ended them


def test_the_deadline_ends_the_builds_and_the_processes(driver):
    # a build that would outlast the budget is not waited for: the call returns at the deadline, without it, and the
    # processes are ended there (what they were building would share the GPU with the timing)
    got = run(driver, "ok", ["a", "slow"], 5)
    assert "1" not in got["out"] and got["closed_at_deadline"]
    assert got["took"] < 300  # slow's build is 600 s
    assert gone(got["children"]) == []


def test_a_set_up_that_fails_is_said_once_not_retried_per_config(driver):
    got = run(driver, "broken", ["a", "b", "c"], 120)
    assert got["out"]["failed"] == "RuntimeError: No module named 'sglang'"  # the last line that says something
    assert got["took"] < 120  # said as soon as it is known, not at the deadline


def test_a_killed_sweep_leaves_no_build_process_behind(driver):
    proc = subprocess.Popen([sys.executable, str(driver), "ok", json.dumps(["slow", "slow"]), "600"],
                            stdout=subprocess.PIPE, text=True)
    try:
        children: list[int] = []
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith('{"children"'):
                children = json.loads(line)["children"]
                break
        assert len([p for p in children if alive(p)]) >= 2
        time.sleep(1)  # both are in their 600 s build
        os.kill(proc.pid, signal.SIGKILL)  # the sweep, as marlin_sweep's timeout or an OOM kill ends it
        proc.wait(timeout=30)
        assert gone(children) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_number_of_build_processes_leaves_a_core_and_fits_the_gpu():
    s = bc_sweepstats.validate({"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8,
                            "group_size": 32, "num_bits": 4, "tp_size": 8}, [4096], ["triton_tuned"])

    class Cuda:  # a double of torch.cuda's one call here
        def __init__(self, free: int) -> None:
            self.free = free

        def mem_get_info(self, _device):
            return self.free, 141 * bc_sweepstats.GIB

    class Torch:
        def __init__(self, free: int) -> None:
            self.cuda = Cuda(free)

    gpu = type("Device", (), {"type": "cuda"})()
    assert bc_builders.build_width(Torch(100 * bc_sweepstats.GIB), s, 4096, gpu, cpus=16) == 8
    assert bc_builders.build_width(Torch(100 * bc_sweepstats.GIB), s, 4096, gpu, cpus=4) == 3
    assert bc_builders.build_width(Torch(100 * bc_sweepstats.GIB), s, 4096, gpu, cpus=2) == 0  # one build process: none
    assert bc_builders.build_width(Torch(2 * bc_sweepstats.GIB), s, 4096, gpu, cpus=16) == 0  # no room beside the sweep
    assert bc_builders.build_width(Torch(0), s, 4096, type("Device", (), {"type": "cpu"})(), cpus=16) == 0


def test_the_packaged_configs_come_along_and_never_replace_a_tuned_file(tmp_path):
    packaged, into = tmp_path / "pkg/configs", tmp_path / "tuned/configs"
    (packaged / "triton_3_6_0").mkdir(parents=True)
    (packaged / "triton_3_6_0/E=8,N=64,device_name=X.json").write_text('{"1": {"packaged": 1}}')
    (packaged / "triton_3_6_0/E=384,N=128,device_name=X.json").write_text('{"1": {"packaged": 1}}')
    (packaged / "README.md").write_text("not a config")
    (into / "triton_3_6_0").mkdir(parents=True)
    (into / "triton_3_6_0/E=384,N=128,device_name=X.json").write_text('{"1": {"tuned": 1}}')
    assert bc_tuner.keep_packaged(str(packaged), str(into)) == 1
    assert json.loads((into / "triton_3_6_0/E=384,N=128,device_name=X.json").read_text()) == {"1": {"tuned": 1}}
    assert json.loads((into / "triton_3_6_0/E=8,N=64,device_name=X.json").read_text()) == {"1": {"packaged": 1}}
    assert not (into / "README.md").exists()
    assert bc_tuner.keep_packaged(str(packaged), str(into)) == 0  # again: nothing new


def test_a_process_that_cannot_start_fails_the_builders_at_once_not_at_the_deadline(driver):
    # its arguments fail to unpickle: it ends before it can say it is up
    got = run(driver, "unreadable", ["a"], 120)
    assert got["out"]["failed"].startswith("a build process ended before it answered (exit code ")
    assert got["took"] < 120


def test_a_process_that_dies_while_building_fails_the_builders_at_once_not_at_the_deadline(driver):
    got = run(driver, "ok", ["a", "crash", "b"], 240)
    assert got["out"] == {"failed": "a build process died while building (a crash in Triton's compiler?)"}
    assert got["took"] < 120  # found within seconds, not at the 240 s deadline
    assert gone(got["children"]) == []
