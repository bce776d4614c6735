"""The collection as operators install it: built from the project's layout (collection/build.py), packed by
ansible-galaxy, installed offline into a collections path of its own, and run against the lab by its FQCN
with an ansible.cfg that knows nothing of the project's folders (no library, module_utils, filter or role
paths): every module, module_util, filter, role and the callback the run uses is the collection's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, INVENTORY, ROOT, sh

FQCN = "inference_ops.benchmark_cycle"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tarball built from this tree and installed offline; returns a folder with an ansible.cfg using it."""
    work = tmp_path_factory.mktemp("collection")
    out = subprocess.run([sys.executable, str(ROOT / "collection" / "build.py"), "--out", str(work / "build"), "--tarball"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    tarball = next((work / "build").glob("inference_ops-benchmark_cycle-*.tar.gz"))
    inst = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(work / "collections"),
                           str(tarball)], capture_output=True, text=True, timeout=300, check=False)
    assert inst.returncode == 0 and "was installed successfully" in inst.stdout, inst.stdout + inst.stderr
    run_dir = work / "site"
    run_dir.mkdir()
    # a site's own config: the installed collection and the wheel's collections, none of the project's paths
    (run_dir / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {work / 'collections'}:{ROOT / 'collections'}\n"
        f"callbacks_enabled = {FQCN}.benchmark_cycle_progress\n"
        "gathering = explicit\nhost_key_checking = false\ninterpreter_python = auto_silent\nretry_files_enabled = false\n"
        "[ssh_connection]\npipelining = true\n")
    return run_dir


def site_env(run_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(run_dir / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}", **extra)
    return env


@pytest.mark.path("none.static", real="ansible-doc and --syntax-check of the installed collection")
def test_the_installed_collection_documents_its_modules_and_passes_the_syntax_check(installed):
    doc = subprocess.run([str(BIN / "ansible-doc"), f"{FQCN}.inference_memory_info"], cwd=installed, env=site_env(installed),
                         capture_output=True, text=True, timeout=120, check=False)
    assert doc.returncode == 0 and f"{FQCN}.inference_memory_info" in doc.stdout, doc.stderr
    for playbook in ("benchmark_cycle", "recover", "gpu_benchmark"):
        check = subprocess.run([str(BIN / "ansible-playbook"), f"{FQCN}.{playbook}", "--syntax-check", "-i",
                                str(ROOT / "inventory/ct200")], cwd=installed, env=site_env(installed),
                               capture_output=True, text=True, timeout=120, check=False)  # parsed, never contacted
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.path("stop.ready", real="the installed collection's cycle against the lab")
def test_the_installed_collection_runs_the_cycle_on_the_lab(llama, installed):
    results = installed / "results"
    run = subprocess.run([str(BIN / "ansible-playbook"), f"{FQCN}.benchmark_cycle", "-i", str(ROOT / INVENTORY)],
                         cwd=installed, env=site_env(installed, BC_RESULTS_DIR=str(results)), capture_output=True, text=True,
                         timeout=1800, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    # the collection's roles and modules ran (their FQCNs name the tasks), and the project's own paths were not used
    assert f"{FQCN}.service_drain : " in out and f"{FQCN}.gpu_benchmark : " in out
    assert "/library/" not in out and str(ROOT / "roles") not in out
    assert re.search(r"""["']?answer["']?: ["']4["']""", out), out[-3000:]  # the service answers again
    sweeps = list(results.glob("*/*/sweep-tp1-torch.json"))
    assert sweeps and sweeps[0].with_suffix("").with_suffix(".report.md").exists()
    assert re.search(r"ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out)
    assert sh("systemctl is-active llama-lab").strip() == "active"
