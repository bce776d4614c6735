"""module_utils/bc_unit: the unit's install/stop steps. systemd-analyze and /proc are the real ones
(they work without systemd as PID 1); systemctl and nvidia-smi, which need a running systemd and a
GPU, are doubles that answer in the real tools' output formats. The whole module runs against real
systemd in the lab (tests/integration)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import gpu_query, owning_service, parse_gpus, parse_show
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import (
    SWEEP_MODULE,
    SWEEP_PACKAGES,
    Unit,
    UnitError,
    busy_gpus,
    check_name,
    engine_process,
    leftovers,
    processes,
    sweep_tags,
    unit_members,
    verify_problems,
)


def test_a_sweep_is_found_by_its_worker_module_in_either_package():
    """The sweep runs as `python -m <package>.bc_marlin --tag T`: the collection's module_utils package, and
    ansible.module_utils where releases before the repository became the collection ran it (a host upgraded
    mid-sweep still finds its sweep)."""
    assert SWEEP_MODULE == "ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_marlin"
    old = "ansible.module_utils.bc_marlin"
    procs = [{"pid": 1, "argv": ["/venv/bin/python", "-m", SWEEP_MODULE, "--tag", "llama-lab/t1"]},
             {"pid": 2, "argv": ["python3", "-m", old, "--tag", "sglang/t2"]},
             {"pid": 3, "argv": ["python3", "-m", SWEEP_MODULE]},
             {"pid": 4, "argv": ["python3", "-m", "my.bc_marlin", "--tag", "x/y"]},  # someone else's module
             {"pid": 5, "argv": ["vim", SWEEP_MODULE + ".py"]},
             {"pid": 6, "argv": ["python3", "-m", SWEEP_MODULE + "_old", "--tag", "x/y"]},
             {"pid": 7, "argv": ["python3", "-m", "ansible_collections.other.coll.plugins.module_utils.bc_marlin", "--tag", "x/y"]},
             {"pid": 8, "argv": ["pgrep", "-af", SWEEP_MODULE]},  # names it, does not run it
             {"pid": 9, "argv": ["tail", "-f", SWEEP_MODULE, "--tag", "u/t"]}]
    assert sweep_tags(procs) == [(1, "llama-lab/t1"), (2, "sglang/t2"), (3, "")]


def test_the_sweep_package_is_the_one_galaxy_yml_names():
    import yaml
    galaxy = yaml.safe_load((Path(__file__).resolve().parents[2] / "galaxy.yml").read_text())
    assert SWEEP_MODULE == "ansible_collections.%s.%s.plugins.module_utils.bc_marlin" % (galaxy["namespace"], galaxy["name"])
    assert SWEEP_PACKAGES[0] == "ansible.module_utils"


GOOD = "[Unit]\nDescription=t\n[Service]\nExecStart=/bin/sleep 1\n[Install]\nWantedBy=multi-user.target\n"


class SystemctlDouble:
    """systemctl for a host without systemd: records calls, answers `show` and `is-enabled` like systemctl."""

    def __init__(self, active: str = "inactive", enabled: str = "disabled", invocation: str = "") -> None:
        self.calls: list[list[str]] = []
        self.active, self.enabled, self.invocation = active, enabled, invocation

    def __call__(self, argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        if argv[0] != "systemctl":  # systemd-analyze and the rest are the real thing
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
            return proc.returncode, proc.stdout, proc.stderr
        # the unit names come after "--": never read as options
        assert "--" in argv, argv
        words = argv[argv.index("--") + 1:]
        self.calls.append(words + [a for a in argv[1:argv.index("--")] if a == "--no-block"])
        if words[0] == "show":
            return 0, "ActiveState=%s\nNeedDaemonReload=no\nMainPID=0\nInvocationID=%s\n" % (self.active, self.invocation), ""
        if words[0] == "is-active":
            return 3, "inactive\n", ""
        if words[0] == "kill":  # SIGKILL to the unit's processes: it ends failed, as systemd records it
            self.active = "failed"
        if words[0] == "is-enabled":
            return (0 if self.enabled == "enabled" else 1), self.enabled + "\n", ""
        return 0, "", ""


def write(path: str, text: str, mode: int) -> None:
    Path(path).write_text(text)
    os.chmod(path, mode)


def unit(tmp_path: Path, run: SystemctlDouble, check_mode: bool = False, token: str = "cycle-1") -> Unit:
    (tmp_path / "systemd").mkdir(exist_ok=True)
    return Unit("bc-test", run, write, systemd_dir=str(tmp_path / "systemd"), state_dir=str(tmp_path / "state"),
                env_file=str(tmp_path / "etc" / "bc-test.env"), check_mode=check_mode, token=token)


def env(tmp_path: Path, text: str) -> list[tuple[str, str, int]]:
    return [(str(tmp_path / "etc" / "bc-test.env"), text, 0o600)]


@pytest.mark.parametrize("name", ["", "bad name", "a;rm -rf /", "x/y", "-x", "--now"])
def test_unit_names_outside_systemd_syntax_are_refused_naming_the_field(name):
    with pytest.raises(UnitError, match=r"name=.* is not a systemd unit name"):
        check_name(name)


def test_unit_name_may_carry_the_suffix_and_instances():
    assert check_name("sglang-k26-ddtree.service") == "sglang-k26-ddtree"
    assert check_name("sglang@0") == "sglang@0"


def test_verify_problems_are_only_this_units():
    err = ("/etc/systemd/system/other.service:3: Unknown key 'X' in section [Service], ignoring.\n"
           "bc-test.service: Command /nope is not executable: No such file or directory\n")
    assert verify_problems("bc-test", 1, err) == ["bc-test.service: Command /nope is not executable: No such file or directory"]
    assert verify_problems("bc-test", 0, err.splitlines()[0]) == []
    assert verify_problems("bc-test", 1, "Failed to prepare filename: x\n") == ["Failed to prepare filename: x"]


def test_show_and_nvidia_smi_output_parse():
    assert parse_show("ActiveState=active\nNRestarts=2\nExecMainStatus=\n") == {"ActiveState": "active", "NRestarts": "2",
                                                                               "ExecMainStatus": ""}
    # bc_host.gpu_query's output: a number nvidia-smi does not give ([N/A]) keeps the GPU listed, with no reading
    rows = parse_gpus("0, NVIDIA H200, 300, 143771, 81234, 580.159.04\n1, NVIDIA H200, 143000, 143771, 3, 580.159.04\n"
                      "2, NVIDIA H200, [N/A], [N/A], [N/A], 580.159.04\n")
    assert [(g["index"], g["used_mib"], g["driver"]) for g in rows] == [(0, 81234, "580.159.04"), (1, 3, "580.159.04"),
                                                                        (2, None, "580.159.04")]
    used = {g["index"]: g["used_mib"] for g in rows}
    # the GPUs the stop must free: no reading is never free, nor a GPU nvidia-smi does not list
    assert busy_gpus(used, 2048, [1]) == {}
    assert busy_gpus(used, 2048, [1, 2, 3]) == {2: None, 3: None}
    # every GPU: those above the bar; an unreadable one elsewhere on the host does not fail every stop
    assert busy_gpus(used, 2048) == {0: 81234}
    # a name with a comma is read from both ends
    assert parse_gpus("0, NVIDIA H200, SXM, 1, 2, 3, 580.1\n")[0] == {
        "index": 0, "name": "NVIDIA H200, SXM", "free_mib": 1, "total_mib": 2, "used_mib": 3, "driver": "580.1"}


def test_owning_service_reads_v1_and_v2_cgroups():
    v1 = "9:name=systemd:/libpod_parent/libpod-e2f/system.slice/llama-lab.service\n8:pids:/libpod_parent/libpod-e2f\n"
    assert owning_service(v1) == "llama-lab.service"
    assert owning_service("0::/system.slice/sglang-k26.service\n") == "sglang-k26.service"
    assert owning_service("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert owning_service("0::/\n") is None


def test_engine_processes_are_matched_by_exact_titles_and_executables_never_substrings():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES

    sglang, llama = ENGINES["sglang"]["processes"], ENGINES["llamacpp"]["processes"]
    assert engine_process(["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--tp", "8"], sglang)
    assert engine_process(["sglang::scheduler_TP3"], sglang) and engine_process(["sglang::detokenizer"], sglang)
    assert engine_process(["/usr/local/bin/llama-server", "--port", "8080"], llama)
    # a compiler building the server, an editor, a grep: their command lines only mention it
    assert not engine_process(["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "tools/server/llama-server.cpp"], llama)
    assert not engine_process(["grep", "sglang.launch_server"], sglang)
    assert not engine_process(["vim", "sglang::scheduler notes"], sglang)
    assert not engine_process(["llama-server-wrapper.sh"], llama)


def test_leftovers_are_only_the_units_former_processes_with_the_engines_names():
    """Real processes: one started as the unit's (a member before the stop), one with the same
    name that never belonged to it, one member with another name: only the first is a leftover."""
    member = subprocess.Popen(["bash", "-c", "exec -a llama-server sleep 30"])
    stranger = subprocess.Popen(["bash", "-c", "exec -a llama-server sleep 31"])
    helper = subprocess.Popen(["sleep", "32"])
    try:
        time.sleep(0.3)
        before = [p for p in processes() if p["pid"] in (member.pid, helper.pid)]
        from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES

        found = leftovers(before, processes(), ENGINES["llamacpp"]["processes"])
        assert [p["pid"] for p in found] == [member.pid]
        # a reused pid is not the same process: the start time differs
        assert leftovers([dict(before[0], start=before[0]["start"] + 1)], processes(), ENGINES["llamacpp"]["processes"]) == []
    finally:
        for proc in (member, stranger, helper):
            proc.kill()
            proc.wait()


def test_unit_members_are_its_cgroup_and_the_main_pids_descendants():
    procs = [{"pid": 1, "ppid": 0, "service": None}, {"pid": 10, "ppid": 1, "service": "x.service"},
             {"pid": 11, "ppid": 10, "service": None}, {"pid": 12, "ppid": 11, "service": None},
             {"pid": 20, "ppid": 1, "service": "x.service"}, {"pid": 30, "ppid": 1, "service": None}]
    assert sorted(p["pid"] for p in unit_members(procs, "x.service", 10)) == [10, 11, 12, 20]
    assert sorted(p["pid"] for p in unit_members(procs, "y.service", 0)) == []


def test_processes_finds_a_real_renamed_process_and_not_itself():
    proc = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 30"])
    try:
        time.sleep(0.2)
        procs = {p["pid"]: p["cmd"] for p in processes()}
        assert procs.get(proc.pid) == "sglang::scheduler_TP0 30"
        assert os.getpid() not in procs
    finally:
        proc.kill()
        proc.wait()


def test_install_refuses_a_unit_that_fails_verification_and_writes_nothing(tmp_path):
    run = SystemctlDouble()
    with pytest.raises(UnitError, match=r"fails systemd-analyze verify and was not installed: .*not executable"):
        unit(tmp_path, run).install(GOOD.replace("/bin/sleep", "/nonexistent/server"), env(tmp_path, "K=1\n"), True, str(tmp_path))
    assert not (tmp_path / "systemd" / "bc-test.service").exists()
    assert not (tmp_path / "etc").exists()
    assert run.calls == []


def test_install_keeps_the_replaced_unit_and_env_for_rollback_and_writes_env_0600(tmp_path):
    run = SystemctlDouble()
    first = unit(tmp_path, run).install(GOOD, env(tmp_path, "K=1\n"), True, str(tmp_path))
    assert first["changed"] and first["unit_changed"] and first["daemon_reloaded"] and first["enable_changed"]
    assert not first["rollback_kept"]  # nothing was installed before
    env_file = tmp_path / "etc" / "bc-test.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert ["enable", "bc-test.service"] in run.calls

    run = SystemctlDouble(enabled="enabled")
    again = unit(tmp_path, run).install(GOOD, env(tmp_path, "K=1\n"), True, str(tmp_path))
    assert not again["changed"] and run.calls[-1][0] == "is-enabled"  # idempotent: no reload, no enable

    second = unit(tmp_path, run, token="cycle-2").install(GOOD.replace("sleep 1", "sleep 2"), env(tmp_path, "K=2\n"), True,
                                                          str(tmp_path))
    assert second["unit_changed"] and second["env_changed"] and len(second["rollback_kept"]) == 2
    assert (tmp_path / "state/rollback/cycle-2/bc-test.service").read_text() == GOOD
    assert (tmp_path / "state/rollback/cycle-2/bc-test.env").read_text() == "K=1\n"
    assert stat.S_IMODE((tmp_path / "state/rollback/cycle-2/bc-test.env").stat().st_mode) == 0o600
    assert "sleep 1" in second["diff"]["before"] and "sleep 2" in second["diff"]["after"]


def test_install_in_check_mode_diffs_and_changes_nothing(tmp_path):
    run = SystemctlDouble()
    result = unit(tmp_path, run, check_mode=True).install(GOOD, env(tmp_path, "K=1\n"), True, str(tmp_path))
    assert result["changed"] and result["diff"]["after"] == GOOD
    assert not (tmp_path / "systemd" / "bc-test.service").exists() and not (tmp_path / "etc").exists()
    assert [c[0] for c in run.calls] == ["is-enabled"]


def test_rollback_puts_back_what_this_cycle_replaced(tmp_path):
    run = SystemctlDouble()
    unit(tmp_path, run, token="c1").install(GOOD, env(tmp_path, "K=1\n"), None, str(tmp_path))
    u = unit(tmp_path, run, token="c2")
    u.install(GOOD.replace("sleep 1", "sleep 9"), env(tmp_path, "K=9\n"), None, str(tmp_path))
    result = u.rollback()
    assert result["rolled_back"] and (tmp_path / "systemd/bc-test.service").read_text() == GOOD
    assert (tmp_path / "etc/bc-test.env").read_text() == "K=1\n"
    assert run.calls[-4:] == [["daemon-reload"], ["show", "bc-test.service"], ["reset-failed", "bc-test.service"],
                              ["start", "bc-test.service", "--no-block"]]  # it did not run: nothing to end


def test_rollback_of_a_running_server_ends_it_by_a_stop_job_and_sigkill_before_the_start(tmp_path):
    run = SystemctlDouble()
    unit(tmp_path, run, token="c1").install(GOOD, env(tmp_path, "K=1\n"), None, str(tmp_path))
    u = unit(tmp_path, run, token="c2")
    u.install(GOOD.replace("sleep 1", "sleep 9"), env(tmp_path, "K=9\n"), None, str(tmp_path))
    run.active = "active"  # the new server runs, and never got ready
    assert u.rollback()["rolled_back"]
    order = [c for c in run.calls if c[0] in ("stop", "kill", "reset-failed", "start")]
    assert order[-4:] == [["stop", "bc-test.service", "--no-block"], ["kill", "bc-test.service"],
                          ["reset-failed", "bc-test.service"], ["start", "bc-test.service", "--no-block"]]


def test_rollback_of_a_cycle_that_changed_nothing_restores_nothing_and_restarts_nothing(tmp_path):
    """The stale-rollback repro: v1, then v2 with a new key, then v2 unchanged whose server never
    gets ready: the third cycle must not bring v1 and the old key back, nor restart anything."""
    run = SystemctlDouble()
    v1, v2 = GOOD, GOOD.replace("sleep 1", "sleep 2")
    unit(tmp_path, run, token="c1").install(v1, env(tmp_path, "KEY=old\n"), None, str(tmp_path))
    unit(tmp_path, run, token="c2").install(v2, env(tmp_path, "KEY=new\n"), None, str(tmp_path))
    third = unit(tmp_path, run, token="c3")
    assert not third.install(v2, env(tmp_path, "KEY=new\n"), None, str(tmp_path))["changed"]
    calls = len(run.calls)
    result = third.rollback()
    assert not result["rolled_back"] and not result["changed"]
    assert (tmp_path / "systemd/bc-test.service").read_text() == v2 and (tmp_path / "etc/bc-test.env").read_text() == "KEY=new\n"
    assert run.calls[calls:] == []  # nothing restarted


def test_a_restart_for_one_start_of_the_unit_leaves_a_later_start_alone(tmp_path):
    """A dead cycle released invocation aa11: restarted while aa11 runs, left alone once another runs."""
    same = SystemctlDouble(active="active", invocation="aa11")
    result = unit(tmp_path, same).start(restart=True, only_invocation="aa11")
    # a server whose state is not known is ended by a stop job (Restart= never applies to it) and SIGKILL to
    # all its processes (bounded: its front end may hold requests a SIGTERM drain would wait for), read
    # back as ended, then started
    stop, kill, start = ["stop", "bc-test.service", "--no-block"], ["kill", "bc-test.service"], ["start", "bc-test.service", "--no-block"]
    assert result["changed"] and result["ended_by_sigkill"]["ActiveState"] == "failed"
    assert (same.calls.index(stop) < same.calls.index(kill) < same.calls.index(["reset-failed", "bc-test.service"])
            < same.calls.index(start))
    assert ["restart", "bc-test.service", "--no-block"] not in same.calls
    later = SystemctlDouble(active="active", invocation="bb22")
    result = unit(tmp_path, later).start(restart=True, only_invocation="aa11")
    assert not result["changed"] and result["invocation_id"] == "bb22"
    # nothing restarted, reset or stopped: the unit is only read (inference_unit then disarms the switch, whose job
    # is done: tests/unit/test_switch.py)
    assert {c[0] for c in later.calls} == {"show"}, later.calls


def test_a_hung_command_fails_at_its_timeout_naming_it(tmp_path):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import CommandError, run

    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    u = Unit("bc-test", lambda argv, timeout=None: run(argv, timeout), write, systemd_dir="/nonexistent", state_dir="/nonexistent")
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"nvidia-smi.* did not finish within 2 s and was killed"):
        u.wait_gpu_free({"nvidia_smi": str(script), "free_mib": 2048, "wait_s": 2}, time.monotonic, time.sleep)
    assert time.monotonic() - started < 60  # cut at the deadline, not after the hung command


def test_an_end_that_does_not_end_fails_at_its_bound_naming_the_unit(tmp_path):
    """SIGKILL sent, and the unit still deactivating (a process stuck in the GPU driver): the restart
    stops at its bound with the unit's state, a start queued behind the stop (never beside it)."""
    stuck = SystemctlDouble(active="deactivating")
    stuck.calls.clear()
    clock = Clock()
    u = unit(tmp_path, stuck)
    stuck_kill = stuck.__call__

    def never_ends(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        rc = stuck_kill(argv, timeout)
        stuck.active = "deactivating"
        return rc
    u.run = never_ends
    with pytest.raises(UnitError, match=r"bc-test.service is still deactivating.* 30 s after SIGKILL"):
        u.end_now(clock=clock, sleep=clock.sleep)
    assert 30 <= clock.t < 31
    # the start is queued behind the stop all the same: the unit comes back once its processes are gone
    assert [c for c in stuck.calls if c[0] == "start"] == [["start", "bc-test.service", "--no-block"]]


class NvidiaSmiDouble:
    """nvidia-smi's answer to bc_host.gpu_query: the memory of GPU 0 is released after `frees_after` polls; `rows` replaces
    the whole answer (a GPU with no reading, no GPU at all)."""

    def __init__(self, frees_after: int | None, rows: str | None = None) -> None:
        self.polls, self.frees_after, self.rows = 0, frees_after, rows

    def __call__(self, argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        assert argv == gpu_query("nvidia-smi")
        self.polls += 1
        if self.rows is not None:
            return 0, self.rows, ""
        held = self.frees_after is None or self.polls <= self.frees_after
        return 0, "0, H200, %d, 81559, %d, 580.159.04\n1, H200, 81554, 81559, 5, 580.159.04\n" % (
            81559 - (76000 if held else 300), 76000 if held else 300), ""


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_gpu_wait_returns_once_the_memory_is_freed():
    smi, clock = NvidiaSmiDouble(frees_after=3), Clock()
    u = Unit("bc-test", smi, write, systemd_dir="/nonexistent", state_dir="/nonexistent")
    used = u.wait_gpu_free({"nvidia_smi": "nvidia-smi", "free_mib": 2048, "wait_s": 60}, clock, clock.sleep)
    assert used == {0: 300, 1: 5} and smi.polls == 4 and clock.t == 6.0


def test_gpu_wait_fails_naming_the_gpu_and_its_memory_after_the_deadline():
    smi, clock = NvidiaSmiDouble(frees_after=None), Clock()
    u = Unit("bc-test", smi, write, systemd_dir="/nonexistent", state_dir="/nonexistent")
    with pytest.raises(UnitError, match=r"GPU memory is still in use after 10 s: GPU 0 76000 MiB \(free means <= 2048 MiB\)"):
        u.wait_gpu_free({"nvidia_smi": "nvidia-smi", "free_mib": 2048, "wait_s": 10}, clock, clock.sleep)
    assert clock.t == 10.0


@pytest.mark.parametrize(("rows", "indices", "says"), [
    ("0, H200, 81000, 81559, 5, 580.159.04\n1, H200, [N/A], [N/A], [N/A], 580.159.04\n", [0, 1], r"GPU 1 no reading"),
    ("0, H200, 81000, 81559, 5, 580.159.04\n", [0, 1], r"GPU 1 no reading"),  # the GPU to free is not listed
])
def test_a_gpu_with_no_reading_is_never_free(rows, indices, says):
    smi, clock = NvidiaSmiDouble(frees_after=0, rows=rows), Clock()
    u = Unit("bc-test", smi, write, systemd_dir="/nonexistent", state_dir="/nonexistent")
    gpu = {"nvidia_smi": "nvidia-smi", "free_mib": 2048, "wait_s": 6, "indices": indices}
    with pytest.raises(UnitError, match=r"still in use after 6 s: " + says):
        u.wait_gpu_free(gpu, clock, clock.sleep)


def test_an_unreadable_gpu_elsewhere_does_not_fail_the_stop_that_frees_every_readable_one():
    rows = "0, H200, 81554, 81559, 5, 580.159.04\n1, H200, [N/A], [N/A], [N/A], 580.159.04\n"
    u = Unit("bc-test", NvidiaSmiDouble(frees_after=0, rows=rows), write, systemd_dir="/nonexistent",
             state_dir="/nonexistent")
    assert u.wait_gpu_free({"nvidia_smi": "nvidia-smi", "free_mib": 2048, "wait_s": 6}, Clock(), Clock().sleep) == {0: 5, 1: None}


@pytest.mark.parametrize("rows", ["", "No devices were found\n", "0, H200, [N/A], [N/A], [N/A], 580.159.04\n"])
def test_an_answer_with_no_gpu_memory_read_is_not_a_free_gpu(rows):
    u = Unit("bc-test", NvidiaSmiDouble(frees_after=0, rows=rows), write, systemd_dir="/nonexistent",
             state_dir="/nonexistent")
    with pytest.raises(UnitError, match=r"nvidia-smi gave no GPU's memory .* a GPU that cannot be read is not free"):
        u.wait_gpu_free({"nvidia_smi": "nvidia-smi", "free_mib": 2048, "wait_s": 6}, Clock(), Clock().sleep)


def test_found_reads_the_unit_and_its_switch_by_the_name_only_this_module_gives_and_changes_nothing(tmp_path):
    run = SystemctlDouble(active="active", invocation="6f1c2a9b0e8d4c7fa1b2c3d4e5f60718")
    got = unit(tmp_path, run).found()
    assert got["changed"] is False and got["switch"] == "bc-deadman-bc-test"
    assert got["found"]["unit"]["ActiveState"] == "active"
    assert got["found"]["unit"]["InvocationID"] == "6f1c2a9b0e8d4c7fa1b2c3d4e5f60718"
    assert [c[:2] for c in run.calls] == [["show", "bc-test.service"], ["show", "bc-deadman-bc-test.timer"]]
    assert all(c[0] == "show" for c in run.calls)  # read only


def test_a_read_of_the_unit_never_writes_the_controllers_heartbeat(tmp_path):
    """state=found through the real module with a heartbeat given: a read is no contact of the cycle's, so it makes no
    promise for the controller (this machine has no systemd: the read itself fails, naming systemctl, and still
    writes nothing)."""
    from test_modules_adhoc import adhoc

    (tmp_path / "owner.json").write_text(json.dumps({"token": "t1"}))  # the lock is t1's: its contacts beat
    beat = tmp_path / "heartbeat"
    given = {"path": str(beat), "for_s": 60, "token": "t1"}
    r = adhoc("inference_unit", {"name": "bc-test", "state": "found", "heartbeat": given})
    assert not beat.exists(), r
    assert "Traceback" not in json.dumps(r)
    # the same call as a contact (a stop) does beat first: the property above is the read's, not the setup's
    adhoc("inference_unit", {"name": "bc-test", "state": "stopped", "heartbeat": given, "gpu_check": False}, check=False)
    assert beat.exists()


def test_a_systemctl_show_that_fails_is_an_error_naming_the_unit_not_an_empty_state():
    def refusing(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        assert argv[:2] == ["systemctl", "--property=ActiveState,InvocationID"] and argv[-3:] == ["--", "show", "bc-test.service"]
        return 1, "", "Failed to connect to bus: No such file or directory"

    u = Unit("bc-test", refusing, write, systemd_dir="/nonexistent", state_dir="/nonexistent")
    with pytest.raises(UnitError, match=r"systemctl show bc-test.service failed \(exit 1\): Failed to connect to bus"):
        u.show("ActiveState", "InvocationID")
