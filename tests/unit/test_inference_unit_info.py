"""inference_unit_info (plugins/modules/inference_unit_info.py over bc_unit.key_texts): the preflight's one read of a
unit - its main PID and every file that may hold its key. A real process's environment, real files, a real hung
command killed at its deadline; the module through the real `ansible` CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_host
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    CommandError,
    CommandFailed,
    CommandTimeout,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import key_texts

KEY = "sk-unit-info-0123456789"


def fake_systemctl(bindir, body: str) -> str:
    """A `systemctl` first on PATH that runs `body` (sh): the module's own command, its argv read back."""
    bindir.mkdir(exist_ok=True)
    script = bindir / "systemctl"
    script.write_text("#!/bin/sh\necho \"$@\" >> %s/argv\n%s\n" % (bindir, body))
    script.chmod(0o755)
    return str(bindir)


@pytest.fixture
def server():
    """A real process whose environment holds the key, as a server started by its unit does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env=dict(os.environ, LLAMA_API_KEY=KEY))
    yield proc
    proc.kill()
    proc.wait(timeout=30)


def test_the_main_pid_and_every_key_file_are_read_in_one_call(tmp_path, server):
    env_file, secret_file = tmp_path / "llama.env", tmp_path / "llama.secret"
    env_file.write_text("LLAMA_API_KEY=new\n")
    kept = tmp_path / "rollback" / "tok1" / "llama.env"
    kept.parent.mkdir(parents=True)
    kept.write_text("LLAMA_API_KEY=old\n")
    (kept.parent / "other.env").write_text("LLAMA_API_KEY=not-this-units\n")
    # a symlink and a FIFO named as the unit's file: never followed, never opened (a FIFO would block the read)
    elsewhere = tmp_path / "elsewhere.env"
    elsewhere.write_text("LLAMA_API_KEY=linked\n")
    (tmp_path / "rollback" / "tok2").mkdir()
    (tmp_path / "rollback" / "tok2" / "llama.env").symlink_to(elsewhere)
    (tmp_path / "rollback" / "tok3").mkdir()
    os.mkfifo(tmp_path / "rollback" / "tok3" / "llama.env")
    path = fake_systemctl(tmp_path / "bin", "echo MainPID=%d" % server.pid)
    got = adhoc("inference_unit_info", {"unit": "llama-lab", "files": [str(env_file), str(secret_file)],
                                        "rollback_dir": str(tmp_path / "rollback"), "timeout": 10}, path=path)
    assert got["_status"] == "SUCCESS" and got["changed"] is False and got["hung"] is False, got
    assert got["main_pid"] == server.pid
    environ = "/proc/%d/environ" % server.pid
    # the secrets file does not exist: left out, not an empty key
    assert sorted(got["texts"]) == sorted([str(env_file), environ, str(kept)]), got["texts"].keys()
    assert got["texts"][str(kept)] == "LLAMA_API_KEY=old\n" and "LLAMA_API_KEY=%s\x00" % KEY in got["texts"][environ]
    assert (tmp_path / "bin" / "argv").read_text().split() == ["--property=MainPID", "--", "show", "llama-lab"]
    # check mode reads the same: nothing here changes anything
    assert adhoc("inference_unit_info", {"unit": "llama-lab", "files": [str(env_file)]}, check=True,
                 path=path)["main_pid"] == server.pid


def test_a_hung_systemctl_is_killed_at_its_deadline_and_said_as_hung(tmp_path):
    path = fake_systemctl(tmp_path / "bin", "exec sleep 313")
    got = adhoc("inference_unit_info", {"unit": "llama-lab", "timeout": 1}, path=path)
    assert got["_status"] == "FAILED!" and got["hung"] is True and "did not finish within 1 s" in got["msg"], got
    assert "main_pid" not in got
    left = subprocess.run(["pgrep", "-f", "[s]leep 313"], capture_output=True, text=True, timeout=30, check=False)
    assert left.stdout.strip() == ""  # killed on the host, not left behind


def test_a_unit_that_runs_nothing_is_pid_0_and_no_environment_is_read(tmp_path):
    def runner(argv, timeout):
        return 0, "MainPID=0\n", ""
    assert key_texts("llama-lab", [str(tmp_path / "none.env")], str(tmp_path / "nowhere"), 5, runner) == \
        {"main_pid": 0, "texts": {}}


@pytest.mark.parametrize(("answer", "error", "words"), [
    ((1, "", "Failed to connect to bus"), CommandFailed, "failed (exit 1): Failed to connect to bus"),
    ((0, "", ""), CommandFailed, "gave no MainPID"),             # no reading is not "not running"
    ((0, "MainPID=\n", ""), CommandFailed, "gave no MainPID"),
    ((0, "MainPID=[not set]\n", ""), CommandFailed, "gave no MainPID"),
])
def test_a_main_pid_that_cannot_be_read_is_never_taken_for_not_running(answer, error, words):
    with pytest.raises(error, match=r".*") as raised:
        key_texts("llama-lab", [], "", 5, lambda argv, timeout: answer)
    assert words in str(raised.value)


def test_a_systemctl_that_cannot_start_is_not_taken_for_a_hung_one(tmp_path):
    # the real runner: a command that is not there is a CommandError, never a CommandTimeout (the module's hung: false)
    with pytest.raises(CommandError) as raised:
        key_texts("llama-lab", [], "", 5, lambda argv, timeout: bc_host.run(["/nonexistent/systemctl", *argv[1:]], timeout))
    assert not isinstance(raised.value, CommandTimeout) and "cannot run /nonexistent/systemctl" in str(raised.value)
    with pytest.raises(CommandTimeout):
        key_texts("llama-lab", [], "", 0.5, lambda argv, timeout: bc_host.run(["sleep", "5"], timeout))


@pytest.mark.parametrize(("args", "message"), [
    ({"unit": "-x"}, "unit=-x is not a systemd unit name"),
    ({"unit": "llama-lab", "timeout": 0}, "timeout"),
])
def test_bad_input_is_refused_naming_the_option(args, message):
    got = adhoc("inference_unit_info", args)
    assert got["_status"] == "FAILED!" and message in got["msg"] and got["hung"] is False, got
