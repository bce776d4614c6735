"""The collection as operators install it: the repository packed by `ansible-galaxy collection build` as it is,
installed offline into a collections path of its own, and run against the lab by its FQCN with an ansible.cfg
that knows nothing of the clone: every module, module_util, filter, role and the callback the run uses is the
installed collection's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import BIN, HOST, INVENTORY, ROOT, sh

# On one worker (the xdist_group): the collection is built and installed once, for all of its cases (`installed`)
pytestmark = pytest.mark.xdist_group("collection")
FQCN = "inference_ops.benchmark_cycle"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tarball built from this tree and installed offline; returns a folder with an ansible.cfg using it."""
    work = tmp_path_factory.mktemp("collection")
    out = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work / "build"), str(ROOT)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    tarball = next((work / "build").glob("inference_ops-benchmark_cycle-*.tar.gz"))
    # --force: run from the clone, ansible-galaxy counts the clone's own view of the collection (collections/) as installed
    inst = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--force", "-p",
                           str(work / "collections"), str(tarball)], capture_output=True, text=True, timeout=300, check=False)
    assert inst.returncode == 0 and "was installed successfully" in inst.stdout, inst.stdout + inst.stderr
    run_dir = work / "site"
    run_dir.mkdir()
    # a site's own config: the installed collection and the wheel's collections (those alone: the clone's collections/
    # also holds its view of itself, which would stand in for a broken install), none of the clone's paths
    vendored = work / "vendored" / "ansible_collections"
    vendored.mkdir(parents=True)
    for ns in (ROOT / "collections" / "ansible_collections").iterdir():
        if ns.name != "inference_ops":
            (vendored / ns.name).symlink_to(ns)
    (run_dir / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {work / 'collections'}:{vendored.parent}\n"
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


@pytest.mark.path("none.static", real="ansible-lint of the installed collection")
def test_the_installed_collection_is_lint_clean(installed):
    """ansible-lint --profile production inside the collection as installed (its filter docs, its changelog, its
    tasks): 47 failures when the collection was compiled from the layout, none now."""
    collections = installed.parent / "collections"
    where = collections / "ansible_collections" / "inference_ops" / "benchmark_cycle"
    run = subprocess.run([str(BIN / "ansible-lint"), "--profile", "production", "--nocolor", "-f", "pep8"], cwd=where,
                         env=site_env(installed, ANSIBLE_COLLECTIONS_PATH=f"{collections}:{installed.parent / 'vendored'}", NO_COLOR="1"),
                         capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


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


def verdict(host: str) -> re.Pattern[str]:
    """A result line of the default callback (result format json) for `host`: a failure, a loop item's failure, or a
    message."""
    h = re.escape(host)
    return re.compile(r"^(?:fatal: \[%s\]: FAILED!|failed: \[%s\](?: \(item=[^)]*\))?|ok: \[%s\]) => (\{.*\})$" % (h, h, h), re.M)


def copy_on_the_lab(tmp: Path, inventory: str) -> Path:
    """A copy of inventory/<inventory>, as an operator makes it, whose one host is the lab host (its address, port and key
    from the lab's inventory; the copied inventory's own address is never contacted): every other line as shipped."""
    inv = tmp / inventory
    shutil.copytree(ROOT / "inventory" / inventory, inv)
    lab = yaml.safe_load((ROOT / INVENTORY / "hosts.yml").read_text())["all"]
    lab_vars = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    (name, host), = hosts["all"]["children"]["inference"]["hosts"].items()
    host.update({k: lab["children"]["inference"]["hosts"][HOST][k] for k in ("ansible_host", "ansible_port")},
                ansible_ssh_private_key_file=lab["vars"]["ansible_ssh_private_key_file"],
                ansible_ssh_common_args=lab_vars["ansible_ssh_common_args"])
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv, name


@pytest.mark.path("refused.preflight", real="the installed collection's preflight against the lab, beside the clone's")
@pytest.mark.parametrize("inventory", ["example", "ct200"])
def test_the_installed_collection_reads_a_copy_of_an_inventory_as_the_clone_does(llama, installed, tmp_path, inventory):
    """The operator's first step: a copy of inventory/example, or of the real site's inventory/ct200 (its key through the
    collection's bc_secret lookup, by its full name), run by the installed collection's playbook reaches the same
    preflight verdict as the clone's; the short lookup name failed there ("The lookup plugin 'bc_secret' was not
    found")."""
    (inv, host), key = copy_on_the_lab(tmp_path, inventory), "sk-example-copy-5e0c7d"
    same = {"BC_API_KEY": key, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    verdicts = []
    for playbook, cwd, env in ((f"{FQCN}.benchmark_cycle", installed, site_env(installed, **same)),
                               ("benchmark_cycle.yml", ROOT, dict(site_env(installed, **same), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))):
        run = subprocess.run([str(BIN / "ansible-playbook"), playbook, "-i", str(inv), "--tags", "preflight"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=900, check=False)
        out = run.stdout + run.stderr
        assert "was not found" not in out and "Traceback" not in out and key not in out, out[-3000:]
        # what the preflight said of the host: its refusal, or its plan (every message of a failed or said task, in order)
        said = [json.loads(m).get("msg") for m in verdict(host).findall(out)]
        said = [m for m in said if isinstance(m, str)]
        assert said, out[-3000:]
        verdicts.append((run.returncode, said))
    assert verdicts[0] == verdicts[1], verdicts
    assert sh("ls /run/lock/ | grep -c benchmark-cycle || true").strip() == "0"  # the preflight touched nothing
