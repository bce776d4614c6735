"""docs/operator-guide.md's commands that need a host, run as written against a lab host (llama.cpp under systemd):
`inventory/mysite` is a copy of the lab's inventory (the real site is never contacted). The page's list of commands
is checked against this file's by tests/unit/test_operator_guide.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import INVENTORY, ROOT, env, sh

CHECK = "ansible-playbook benchmark_cycle.yml -i inventory/mysite --check --diff"
CYCLE = "ansible-playbook benchmark_cycle.yml -i inventory/mysite"
LOOK = ["ls -a /run/lock/ /var/lib/benchmark-cycle/rollback/", "systemctl list-timers --all 'bc-deadman-*'",
        "journalctl -u 'bc-deadman-*' --no-pager -n 20"]
RECOVER = "ansible-playbook playbooks/recover.yml -i inventory/mysite"


def run(command: str, mysite: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command.replace("inventory/mysite", mysite), shell=True, cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=900, check=False)


def pid() -> str:
    return sh("systemctl show -p MainPID --value llama-lab").strip()


@pytest.mark.path("stop.ready", real="the guide's commands as an operator types them (check, cycle, recover)")
def test_the_operators_path_as_the_guide_writes_it(llama, tmp_path):
    mysite = tmp_path / "mysite"
    shutil.copytree(ROOT / INVENTORY, mysite, symlinks=True)
    # 2. check mode: the preflight for real, the worst case said, nothing changed
    before = pid()
    check = run(CHECK, str(mysite))
    assert check.returncode == 0 and "worst case" in check.stdout, (check.stdout + check.stderr)[-3000:]
    assert pid() == before
    # 5. the cycle: the service drained, swept beside or stopped, and serving again
    cycle = run(CYCLE, str(mysite))
    assert cycle.returncode == 0, (cycle.stdout + cycle.stderr)[-3000:]
    assert sh("systemctl is-active llama-lab").strip() == "active"
    # 6. looking at a host changes nothing and works on a host a cycle left clean
    for command in LOOK:
        sh(command)
    assert "benchmark-cycle-llama-lab.lock" not in sh(LOOK[0]).split()  # the lock was freed (its hidden guard stays)
    # the recovery on a host with nothing to recover: says so, leaves the serving unit as it is
    before = pid()
    recover = run(RECOVER, str(mysite))
    assert recover.returncode == 0, (recover.stdout + recover.stderr)[-3000:]
    assert pid() == before and sh("systemctl is-active llama-lab").strip() == "active"
