"""module_utils/bc_unit: the unit's install/stop steps. systemd-analyze and /proc are the real ones
(they work without systemd as PID 1); systemctl and nvidia-smi, which need a running systemd and a
GPU, are doubles that answer in the real tools' output formats. The whole module runs against real
systemd in the lab (tests/integration)."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from ansible.module_utils.bc_unit import (
    Unit,
    UnitError,
    busy_gpus,
    check_name,
    list_processes,
    match_processes,
    owning_service,
    parse_gpu_memory,
    parse_show,
    verify_problems,
)

GOOD = "[Unit]\nDescription=t\n[Service]\nExecStart=/bin/sleep 1\n[Install]\nWantedBy=multi-user.target\n"


class SystemctlDouble:
    """systemctl for a host without systemd: records calls, answers `show` and `is-enabled` like systemctl."""

    def __init__(self, active: str = "inactive", enabled: str = "disabled") -> None:
        self.calls: list[list[str]] = []
        self.active, self.enabled = active, enabled

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[0] != "systemctl":  # systemd-analyze and the rest are the real thing
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            return proc.returncode, proc.stdout, proc.stderr
        self.calls.append(argv[1:])
        if argv[1] == "show":
            return 0, "ActiveState=%s\nNeedDaemonReload=no\n" % self.active, ""
        if argv[1] == "is-enabled":
            return (0 if self.enabled == "enabled" else 1), self.enabled + "\n", ""
        return 0, "", ""


def write(path: str, text: str, mode: int) -> None:
    Path(path).write_text(text)
    os.chmod(path, mode)


def unit(tmp_path: Path, run: SystemctlDouble, check_mode: bool = False) -> Unit:
    (tmp_path / "systemd").mkdir(exist_ok=True)
    return Unit("bc-test", run, write, systemd_dir=str(tmp_path / "systemd"), state_dir=str(tmp_path / "state"),
                env_file=str(tmp_path / "etc" / "bc-test.env"), check_mode=check_mode)


@pytest.mark.parametrize("name", ["", "bad name", "a;rm -rf /", "x/y"])
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
    # nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits
    used = parse_gpu_memory("0, 81234\n1, 3\n2, [N/A]\n")
    assert used == {0: 81234, 1: 3}
    assert busy_gpus(used, 2048) == {0: 81234}
    assert busy_gpus(used, 2048, [1]) == {}


def test_owning_service_reads_v1_and_v2_cgroups():
    v1 = "9:name=systemd:/libpod_parent/libpod-e2f/system.slice/llama-lab.service\n8:pids:/libpod_parent/libpod-e2f\n"
    assert owning_service(v1) == "llama-lab.service"
    assert owning_service("0::/system.slice/sglang-k26.service\n") == "sglang-k26.service"
    assert owning_service("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert owning_service("0::/\n") is None


def test_match_processes_uses_the_engine_profiles_names():
    procs = [(10, "/opt/sglang/bin/python -m sglang.launch_server --tp 8"), (11, "sglang::scheduler_TP3"), (12, "vim notes")]
    assert [p for p, _ in match_processes(procs, ["sglang.launch_server", "sglang::scheduler"])] == [10, 11]


def test_list_processes_finds_a_real_renamed_process_and_not_itself():
    proc = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 30"])
    try:
        time.sleep(0.2)
        procs = {pid: cmd for pid, cmd, _service in list_processes()}
        assert procs.get(proc.pid) == "sglang::scheduler_TP0 30"
        assert os.getpid() not in procs
    finally:
        proc.kill()
        proc.wait()


def test_install_refuses_a_unit_that_fails_verification_and_writes_nothing(tmp_path):
    run = SystemctlDouble()
    with pytest.raises(UnitError, match=r"fails systemd-analyze verify and was not installed: .*not executable"):
        unit(tmp_path, run).install(GOOD.replace("/bin/sleep", "/nonexistent/server"), "K=1\n", True, str(tmp_path))
    assert not (tmp_path / "systemd" / "bc-test.service").exists()
    assert not (tmp_path / "etc").exists()
    assert run.calls == []


def test_install_keeps_the_replaced_unit_and_env_for_rollback_and_writes_env_0600(tmp_path):
    run = SystemctlDouble()
    first = unit(tmp_path, run).install(GOOD, "K=1\n", True, str(tmp_path))
    assert first["changed"] and first["unit_changed"] and first["daemon_reloaded"] and first["enable_changed"]
    assert not first["rollback_kept"]  # nothing was installed before
    env = tmp_path / "etc" / "bc-test.env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert ["enable", "bc-test.service"] in run.calls

    run = SystemctlDouble(enabled="enabled")
    again = unit(tmp_path, run).install(GOOD, "K=1\n", True, str(tmp_path))
    assert not again["changed"] and run.calls[-1][0] == "is-enabled"  # idempotent: no reload, no enable

    second = unit(tmp_path, run).install(GOOD.replace("sleep 1", "sleep 2"), "K=2\n", True, str(tmp_path))
    assert second["unit_changed"] and second["env_changed"] and second["rollback_kept"]
    assert (tmp_path / "state/rollback/bc-test.service").read_text() == GOOD
    assert (tmp_path / "state/rollback/bc-test.env").read_text() == "K=1\n"
    assert "sleep 1" in second["diff"]["before"] and "sleep 2" in second["diff"]["after"]


def test_install_in_check_mode_diffs_and_changes_nothing(tmp_path):
    run = SystemctlDouble()
    result = unit(tmp_path, run, check_mode=True).install(GOOD, "K=1\n", True, str(tmp_path))
    assert result["changed"] and result["diff"]["after"] == GOOD
    assert not (tmp_path / "systemd" / "bc-test.service").exists() and not (tmp_path / "etc").exists()
    assert [c[0] for c in run.calls] == ["is-enabled"]


def test_rollback_puts_back_the_kept_unit_and_env(tmp_path):
    run = SystemctlDouble()
    u = unit(tmp_path, run)
    u.install(GOOD, "K=1\n", None, str(tmp_path))
    u.install(GOOD.replace("sleep 1", "sleep 9"), "K=9\n", None, str(tmp_path))
    result = u.rollback()
    assert result["rolled_back"] and (tmp_path / "systemd/bc-test.service").read_text() == GOOD
    assert (tmp_path / "etc/bc-test.env").read_text() == "K=1\n"
    assert run.calls[-3:] == [["daemon-reload"], ["reset-failed", "bc-test.service"], ["restart", "--no-block", "bc-test.service"]]


class NvidiaSmiDouble:
    """nvidia-smi --query-gpu=index,memory.used: the memory of GPU 0 is released after `frees_after` polls."""

    def __init__(self, frees_after: int | None) -> None:
        self.polls, self.frees_after = 0, frees_after

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        assert argv[1:] == ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
        self.polls += 1
        held = self.frees_after is None or self.polls <= self.frees_after
        return 0, "0, %d\n1, 5\n" % (76000 if held else 300), ""


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
