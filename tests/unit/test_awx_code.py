"""AWX as code, run for real: `ansible-playbook awx/configure.yml` from a throwaway clone against a double of AWX's
API on 127.0.0.1 (AwxApiDouble: it answers the list endpoints from a table and records every request; a POST is
answered 403, so a run that gets as far as creating anything stops at its first creation, which the test reads).
No AWX server runs here; only loopback traffic."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAY = yaml.safe_load((ROOT / "awx/configure.yml").read_text())[0]
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
TAG = "v" + VERSION
MACHINE = {"id": 7, "name": "ct200 root ssh", "kind": "ssh"}
# what configure.yml reads from the tree: the play and its surveys, the version, the contract and the site's settings
# (the survey's derived readiness budget); the collection's plugins come through collections/ (linked below)
TREE = ("awx", "galaxy.yml", "playbooks/vars/contract.yml", "inventory/ct200/group_vars/all.yml",
        "roles/service_drain/defaults/main.yml", "ansible.cfg")


class AwxApiDouble:
    """A double of AWX's REST API (/api/v2/): GET of a list endpoint answers {count, results} from `lists` (empty when
    not there), filtered by ?name=; every request is recorded as (method, path, query); POST/PATCH/PUT get 403."""

    def __init__(self, lists: dict[str, list[dict]]):
        self.lists, self.requests = lists, []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-API-Product-Name", "AWX")
                self.send_header("X-API-Product-Version", "24.6.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                double.requests.append(("GET", url.path, query))
                endpoint = url.path.removeprefix("/api/v2/").strip("/")
                rows = [r for r in double.lists.get(endpoint, []) if "name" not in query or r.get("name") == query["name"]]
                self._answer(200, {"count": len(rows), "next": None, "previous": None, "results": rows})

            def _write(self):
                length = int(self.headers.get("Content-Length") or 0)
                double.requests.append((self.command, urlsplit(self.path).path, self.rfile.read(length).decode()))
                self._answer(403, {"detail": "the double creates nothing"})

            do_POST = do_PATCH = do_PUT = _write

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def writes(self) -> list[tuple]:
        return [r for r in self.requests if r[0] != "GET"]


@pytest.fixture
def awx():
    doubles = []

    def make(lists):
        doubles.append(AwxApiDouble(lists))
        return doubles[-1]

    yield make
    for d in doubles:
        d.close()


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(cwd), *args], env=env, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def checkout(tmp_path: Path, clone: bool = True, tag: bool = True) -> Path:
    """A copy of what configure.yml reads, as a git clone (with the release tag, or not), or as a plain folder."""
    tree = tmp_path / "tree"
    for rel in TREE:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, tree / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / rel, tree / rel)
    (tree / "collections").symlink_to(ROOT / "collections")
    if clone:
        git(tree, "init", "-q", "-b", "main")
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", "release")
        if tag:
            git(tree, "tag", "-a", TAG, "-m", "release " + VERSION)
    return tree


def configure(tree: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), CONTROLLER_HOST=url, CONTROLLER_OAUTH_TOKEN="dummy-token",
               CONTROLLER_VERIFY_SSL="false", ANSIBLE_NOCOLOR="1")
    env.pop("BC_API_KEY", None)
    return subprocess.run([str(BIN / "ansible-playbook"), "awx/configure.yml", "-i", "localhost,",
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_no_task_can_create_the_machine_credential():
    """awx.awx.credential with state present or exists creates a missing credential (modules/credential.py 24.6.1:
    get_one(check_exists=...) returns only when it is found; else create_or_update_if_needed POSTs one): an empty
    machine credential would fail every job at ssh. The play reads it with the controller_api lookup (GET only)."""
    for task in PLAY["tasks"]:
        for module, args in task.items():
            if module in ("awx.awx.credential", "credential", "awx.awx.tower_credential"):
                assert "awx_credential_name" not in str(args.get("name")), task["name"]
    lookups = [t for t in PLAY["tasks"] if "awx.awx.controller_api" in json.dumps(t) and "awx_credential_name" in json.dumps(t)]
    assert lookups and all("ansible.builtin.set_fact" in t for t in lookups)


def test_a_missing_machine_credential_fails_naming_it_and_creates_nothing(tmp_path, awx):
    api = awx({"credentials": []})
    proc = configure(checkout(tmp_path), api.url)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert 'The machine credential "ct200 root ssh" does not exist in AWX' in out and "Create it once" in out, out
    assert ("GET", "/api/v2/credentials/", {"name": "ct200 root ssh"}) in api.requests
    assert api.writes() == [], api.writes()  # nothing created: no credential, and nothing before the check either


@pytest.mark.parametrize("credentials, says", [
    ([dict(MACHINE), dict(MACHINE, id=8)], '2 credentials are named "ct200 root ssh"'),
    ([dict(MACHINE, kind="scm")], 'is not a machine credential (its kind is scm)'),
], ids=["two", "not-machine"])
def test_an_ambiguous_or_wrong_kind_credential_is_refused(tmp_path, awx, credentials, says):
    api = awx({"credentials": credentials})
    proc = configure(checkout(tmp_path), api.url)
    assert proc.returncode != 0 and says in proc.stdout, proc.stdout
    assert api.writes() == []


def test_an_existing_machine_credential_lets_the_play_go_on(tmp_path, awx):
    api = awx({"credentials": [MACHINE], "organizations": [{"id": 1, "name": "Default"}]})
    proc = configure(checkout(tmp_path), api.url)
    # past the checks, the first creation is the execution environment's (the double refuses it with 403)
    assert api.writes() and api.writes()[0][1] == "/api/v2/execution_environments/", (api.requests, proc.stdout)
    assert not any(r[1].startswith("/api/v2/credentials") for r in api.writes())


@pytest.mark.parametrize("clone, tag, ref, passes, says", [
    (True, True, None, True, ""),
    (True, False, None, False, f'is neither a tag nor a commit of this clone: the project would pin a ref AWX cannot check out. '
                               f'The release tag is made when the release is (docs/collection.md, "The changelog"): git tag -a {TAG}'),
    (True, False, "HEAD-SHA", True, ""),
    (True, True, "main", False, "a branch moves, and is refused"),
    (True, True, "0" * 40, False, "is neither a tag nor a commit of this clone"),
    (True, True, "v0.0.0-never", False, "Give a tag (git tag -l) or a full commit id"),
    (False, False, None, False, "is not a git clone"),
], ids=["release-tag", "tag-never-made", "commit", "branch", "unknown-commit", "unknown-tag", "not-a-clone"])
def test_the_project_pins_a_ref_that_exists(tmp_path, awx, clone, tag, ref, passes, says):
    api = awx({"credentials": []})  # past the ref check, the credential's refusal says the run got there
    tree = checkout(tmp_path, clone=clone, tag=tag)
    extra = () if ref is None else ("-e", "awx_scm_branch=" + (git(tree, "rev-parse", "HEAD") if ref == "HEAD-SHA" else ref))
    proc = configure(tree, api.url, *extra)
    out = proc.stdout
    assert proc.returncode != 0
    if passes:
        assert "Resolve the pinned ref" in out and 'The machine credential "ct200 root ssh" does not exist' in out, out
    else:
        assert says in out and (ref or TAG) in out, out
        assert api.requests == []  # refused before AWX is asked anything


def rendered(expr: str, *extra: str):
    """`expr` templated with the play's vars as the play would (playbook_dir: awx/), by a real `ansible` run."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.oneline", ANSIBLE_CALLBACKS_ENABLED="inference_ops.benchmark_cycle.benchmark_cycle_progress")
    proc = subprocess.run([str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "--playbook-dir", str(ROOT / "awx"),
                           "-e", json.dumps(PLAY["vars"]), *extra, "-e", f"ansible_python_interpreter={sys.executable}",
                           "-m", "ansible.builtin.debug", "-a", json.dumps({"msg": expr})],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("=>", 1)[1])["msg"]


def worst_case_s(readiness_s: int) -> int:
    """The cycle's worst case (bc_strategy.budget, the preflight's) on ct200 with the survey's most expensive answers:
    derived here from the survey's choices, the site's inventory over the contract's defaults, and the roles' defaults."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import budget

    survey = {q["variable"]: q for q in json.loads((ROOT / "awx/survey.json").read_text())["spec"]}
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    site = {k: s.get("default") for k, s in contract.items()} | yaml.safe_load((ROOT / "inventory/ct200/group_vars/all.yml").read_text())
    drain = yaml.safe_load((ROOT / "roles/service_drain/defaults/main.yml").read_text())
    return budget({"drain_deadline_s": site["bc_drain_deadline_s"],
                   "release": bool({"auto", "release"} & set(survey["bc_stop_policy"]["choices"])),
                   "stop_timeout_s": site["bc_stop_timeout_s"] or site["bc_drain_deadline_s"] + 75,
                   "gpu_wait_s": drain["service_drain_gpu_wait_s"], "has_gpu": True,
                   "sweep_runs": max(len(c.split(",")) for c in survey["bc_sweep_tp_sizes"]["choices"]),
                   "sweep_timeout_s": site["bc_sweep_timeout_s"], "readiness_timeout_s": readiness_s,
                   "margin_s": site["bc_switch_margin_s"]})["total_s"]


@pytest.mark.parametrize("timeout_s", [None, 5400, 9000], ids=["template", "shorter", "longer"])
def test_every_readiness_budget_the_survey_allows_fits_the_job_timeout(timeout_s):
    """The survey's readiness question is bounded by the job's timeout through the preflight's own worst case: its
    largest answer, with the survey's most expensive other answers, fits; one second more would be refused."""
    extra = () if timeout_s is None else ("-e", "awx_job_timeout_s=%d" % timeout_s)
    job_s = timeout_s or PLAY["vars"]["awx_job_timeout_s"]
    spec = rendered("{{ awx_survey_spec }}", *extra)
    question = next(q for q in spec["spec"] if q["variable"] == "bc_readiness_timeout_s")
    assert worst_case_s(question["max"]) <= job_s < worst_case_s(question["max"] + 1)
    assert worst_case_s(question["min"]) <= job_s
    # nothing else of the survey changed, in its order
    survey = json.loads((ROOT / "awx/survey.json").read_text())
    assert [q["variable"] for q in spec["spec"]] == [q["variable"] for q in survey["spec"]]
    assert [q for q in spec["spec"] if q is not question] == [q for q in survey["spec"] if q["variable"] != question["variable"]]
    assert {k: v for k, v in question.items() if k != "max"} in survey["spec"]
    # the job template asks with that survey
    template = next(t for t in PLAY["tasks"] if t["name"].startswith("Job template"))["awx.awx.job_template"]
    assert template["survey_spec"] == "{{ awx_survey_spec }}"
