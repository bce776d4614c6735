"""docs/operator-guide.md (#28): every command on it is run by a test, and its figures are the formula's. The commands
that need no host run here, literally, in a copy of the tree; those that need one run in
tests/integration/test_operator_guide.py against a lab host; a command added to the page without a test fails here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs/operator-guide.md"
# each command of the page, and where it runs (the integration test's list is checked against its source)
COLLECTIONS = ["pip download --no-deps --only-binary=:all: -d wheels ansible==12.3.0",
               "python3 collection/vendor.py --wheel wheels/ansible-12.3.0-py3-none-any.whl --dest collections/artifacts "
               "ansible.posix awx.awx",
               "(cd collections/artifacts && ansible-galaxy collection install --offline -r requirements.yml -p ..)"]
OFFLINE = ["cp -r inventory/example inventory/mysite", "ansible-inventory -i inventory/mysite --graph"]
ON_A_HOST = ["ansible-playbook benchmark_cycle.yml -i inventory/mysite --check --diff",
             "ansible-playbook benchmark_cycle.yml -i inventory/mysite",
             "ls -a /run/lock/ /var/lib/benchmark-cycle/rollback/",
             "systemctl list-timers --all 'bc-deadman-*'",
             "journalctl -u 'bc-deadman-*' --no-pager -n 20",
             "ansible-playbook playbooks/recover.yml -i inventory/mysite"]


def commands() -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^\s*\$ (.+)$", GUIDE.read_text(), re.M)]


def test_every_command_on_the_page_is_run_by_a_test():
    assert commands() == COLLECTIONS + OFFLINE + ON_A_HOST  # in the order of the page
    source = (ROOT / "tests/integration/test_operator_guide.py").read_text()
    for command in ON_A_HOST:
        assert repr(command) in source or f'"{command}"' in source, command


def test_the_commands_that_need_no_host_work_as_written(tmp_path):
    """In a copy of the tree (the page's cp writes into inventory/): the minimal example copied, and read."""
    work = tmp_path / "tree"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("inventory", ".git"):
            (work / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "inventory", work / "inventory", symlinks=True)
    environ = dict({k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
                   ANSIBLE_CONFIG=str(work / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    outs = []
    for command in OFFLINE:
        proc = subprocess.run(command, shell=True, cwd=work, env=environ, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, (command, proc.stdout + proc.stderr)
        outs.append(proc.stdout)
    assert "@inference:" in outs[-1] and "gpu1" in outs[-1]  # the copy is the example's groups and host


def test_the_collections_install_offline_as_the_page_says(tmp_path):
    """The page's three commands, literally, in a copy of the tree without its collections. The one download is served
    from the wheel ./tasks already fetched (PIP_NO_INDEX, PIP_FIND_LINKS: the same file PyPI gives); the rest touch no
    network, Galaxy included (ansible-galaxy --offline)."""
    version = re.search(r"^ANSIBLE_WHEEL_VERSION=(\S+)", (ROOT / "tasks").read_text(), re.M).group(1)
    assert all(version in c for c in COLLECTIONS[:2]), version  # the page names the release ./tasks uses
    cache = Path(os.environ.get("BC_CACHE", "/var/cache/benchmark-cycle")) / "ansible-wheel"
    assert list(cache.glob(f"ansible-{version}-*.whl")), f"no ansible {version} wheel in {cache}: run ./tasks setup"
    work = tmp_path / "tree"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("collections", ".git"):
            (work / entry.name).symlink_to(entry)
    (work / "collections").mkdir()
    environ = dict({k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_"))},
                   ANSIBLE_CONFIG=str(work / "ansible.cfg"), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(cache),
                   PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    # in one shell, as an operator types them: a command that leaves the shell elsewhere breaks the next one
    script = "set -e\n" + "\n".join(COLLECTIONS) + "\ntest \"$PWD\" = " + str(work) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=environ, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = subprocess.run(["ansible-galaxy", "collection", "list", "-p", str(work / "collections"), "--format", "json"],
                            cwd=work, env=environ, capture_output=True, text=True, timeout=120, check=True).stdout
    found = {name for path, names in json.loads(listed).items() if path.startswith(str(work / "collections")) for name in names}
    assert found == {"ansible.posix", "awx.awx"}, found
    # and the project's callback loads from there: the plays' own collection, found through ansible.cfg's path
    proc = subprocess.run(["ansible-doc", "-t", "callback", "ansible.posix.profile_tasks"], cwd=work, env=environ,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "profile_tasks" in proc.stdout, proc.stdout + proc.stderr


def ct200() -> dict:
    """The settings inventory/ct200 gives, over the contract's defaults."""
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    given = yaml.safe_load((ROOT / "inventory/ct200/group_vars/all.yml").read_text())
    return {name: given.get(name, spec.get("default")) for name, spec in contract.items()}


def test_the_worst_case_on_the_page_is_the_formulas_with_ct200s_numbers():
    sys.path.insert(0, str(ROOT / "module_utils"))
    from bc_strategy import budget

    v = ct200()
    drain = int(v["bc_drain_deadline_s"])
    got = budget({"drain_deadline_s": drain, "release": v["bc_stop_policy"] in ("auto", "release"),
                  "stop_timeout_s": int(v["bc_stop_timeout_s"] or drain + 45 + 30), "gpu_wait_s": 60, "has_gpu": True,
                  "sweep_runs": len(v["bc_sweep_tp_sizes"]), "sweep_timeout_s": int(v["bc_sweep_timeout_s"]),
                  "readiness_timeout_s": int(v["bc_readiness_timeout_s"]), "margin_s": int(v["bc_switch_margin_s"])})
    text = " ".join(GUIDE.read_text().split())
    assert " + ".join(str(p) for p in got["phases"].values()) + " = **%d s**" % got["total_s"] in text, got
    assert "(%d s)" % got["lease_s"] in text
    # the AWX page and the job template's comment say the same
    assert "worst case is %d s" % got["total_s"] in " ".join((ROOT / "docs/awx.md").read_text().split())
    assert "%d s" % got["total_s"] in (ROOT / "awx/configure.yml").read_text()


def test_the_guide_is_the_first_link_of_the_readme():
    links = re.findall(r"\]\((docs/[^)]+)\)", (ROOT / "README.md").read_text())
    assert links and links[0] == "docs/operator-guide.md", links[:3]
