"""A stop by the cycle leaves the unit inactive: SGLang SIGKILLs its own main process after its drain
(kill_process_tree(include_parent=True): utils/common.py 0.5.16:2022-2026), so systemd marks the unit
failed with Result=signal after every clean stop, and it would show in `systemctl --failed` and fire
OnFailure= hooks on every cycle. The stop reads the unit back and clears exactly that failure; a stop
that ran into TimeoutStopSec (Result=timeout) is reported, not cleared. systemctl is a double here (no
systemd as PID 1 on this machine; the lab runs it for real: tests/integration/test_engines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_unit_lifecycle import SystemctlDouble

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import Unit, UnitError


class StoppingSystemctl(SystemctlDouble):
    """A unit that is active until `stop`, then in the state the engine's exit leaves it in, and
    inactive after `reset-failed` (as systemd does); `reset_keeps` models a reset-failed that did not take."""

    def __init__(self, after: dict[str, str], reset_keeps: bool = False) -> None:
        super().__init__(active="active")
        self.after, self.reset_keeps, self.state = after, reset_keeps, {"ActiveState": "active", "Result": "success"}

    def __call__(self, argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        if argv[0] == "systemctl" and "--" in argv:
            words = argv[argv.index("--") + 1:]
            if words[0] == "show":
                self.calls.append(words)
                props = dict({"MainPID": "0", "ExecMainStatus": "0", "ExecMainCode": "0"}, **self.state)
                return 0, "".join("%s=%s\n" % kv for kv in props.items()), ""
            if words[0] == "stop":
                self.calls.append(words)
                self.state = dict(self.after)
                return 0, "", ""
            if words[0] == "reset-failed":
                self.calls.append(words)
                if not self.reset_keeps:
                    self.state = {"ActiveState": "inactive", "Result": "success"}
                return 0, "", ""
        return super().__call__(argv, timeout)


def unit(run: StoppingSystemctl, tmp_path: Path) -> Unit:
    return Unit("sglang-k26", run, lambda p, t, m: None, systemd_dir=str(tmp_path), state_dir=str(tmp_path / "state"),
                env_file=str(tmp_path / "u.env"), timeout=5)


SPEC = {"modules": ["sglang.launch_server"], "executables": [], "titles": []}
SELF_KILLED = {"ActiveState": "failed", "Result": "signal", "ExecMainCode": "2", "ExecMainStatus": "9"}


def test_the_engines_own_sigkill_after_a_clean_stop_is_cleared_and_read_back(tmp_path):
    run = StoppingSystemctl(SELF_KILLED)
    report = unit(run, tmp_path).stop(SPEC, True, None)
    assert ["reset-failed", "sglang-k26.service"] in run.calls
    assert report["reset_failed"] is True and report["after_stop"]["ActiveState"] == "inactive"


@pytest.mark.parametrize("after", [
    {"ActiveState": "inactive", "Result": "success"},  # an engine that exits 0: nothing to clear
    {"ActiveState": "failed", "Result": "timeout", "ExecMainCode": "2", "ExecMainStatus": "9"},  # TimeoutStopSec's SIGKILL
    {"ActiveState": "failed", "Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "1"},  # it failed on its own
    {"ActiveState": "failed", "Result": "oom-kill", "ExecMainCode": "2", "ExecMainStatus": "9"},  # the OOM killer
])
def test_any_other_end_is_left_as_it_is_and_reported(tmp_path, after):
    run = StoppingSystemctl(after)
    report = unit(run, tmp_path).stop(SPEC, True, None)
    assert not any(c[0] == "reset-failed" for c in run.calls)
    assert report["reset_failed"] is False and report["after_stop"]["Result"] == after["Result"]


def test_a_reset_that_does_not_take_is_an_error(tmp_path):
    with pytest.raises(UnitError, match="still failed after reset-failed"):
        unit(StoppingSystemctl(SELF_KILLED, reset_keeps=True), tmp_path).stop(SPEC, True, None)
