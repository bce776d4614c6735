"""AWX as code and the execution environment. No AWX server can run here: every awx.awx task is
run for real against a closed loopback port, so AnsibleModule validates its arguments and the only
acceptable failure is the connection; `ansible-builder create` must produce a build context."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAY = yaml.safe_load((ROOT / "awx/configure.yml").read_text())[0]
AWX_TASKS = [t for t in PLAY["tasks"] if any(k.startswith("awx.awx.") for k in t)]
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), CONTROLLER_HOST="https://127.0.0.1:9",
           CONTROLLER_OAUTH_TOKEN="dummy-token", CONTROLLER_VERIFY_SSL="false", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
           ANSIBLE_STDOUT_CALLBACK="ansible.builtin.oneline", ANSIBLE_CALLBACKS_ENABLED="inference_ops.benchmark_cycle.benchmark_cycle_progress")


def test_awx_playbook_syntax():
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "awx/configure.yml"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_survey_covers_what_operators_choose():
    survey = json.loads((ROOT / "awx/survey.json").read_text())
    variables = {q["variable"] for q in survey["spec"]}
    assert variables == {"bc_target", "bc_sweep_batch_sizes", "bc_sweep_tp_sizes", "bc_sweep_backends",
                         "bc_readiness_timeout_s", "bc_stop_policy", "bc_lock_break_token", "bc_gpu_health_policy",
                         "bc_gpu_health_dcgm"}
    # what a bad day needs: every answer the survey offers passes the preflight's own check
    from bc_filters import settings_problems
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    site = {"bc_lb_required": False, "bc_unit": "sglang-k26", "bc_api_key": "sk-awx-survey"}
    for q in survey["spec"]:
        for choice in q.get("choices", []):
            assert settings_problems(dict(site, **{q["variable"]: choice}), contract) == [], (q["variable"], choice)
    assert settings_problems(dict(site, bc_gpu_health_policy="keep_stopped"), contract) == [
        "value of bc_gpu_health_policy must be one of: unrouted, serve, got: keep_stopped"]
    read = "".join(p.read_text() for p in [ROOT / "playbooks/vars/cycle.yml", *ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml")])
    assert all(v in read for v in variables)  # every answer is read by the cycle
    # the readiness question's max is derived from the job's timeout by configure.yml (test_awx_code.py)
    assert "max" not in next(q for q in survey["spec"] if q["variable"] == "bc_readiness_timeout_s")
    # the job template hands its timeout to the preflight, which refuses a cycle that could outlast it
    template = next(t for t in PLAY["tasks"] if "awx.awx.job_template" in t)["awx.awx.job_template"]
    assert template["extra_vars"]["bc_job_budget_s"] == "{{ awx_job_timeout_s }}"


def test_survey_answers_never_override_the_inventory_unless_the_operator_gave_them():
    """AWX sends every survey default as an extra var (awx/main/models/mixins.py,
    SurveyJobTemplateMixin._update_unified_job_kwargs: a question's `default`, when it is not None and
    passes _survey_element_validation, goes into extra_vars), and extra vars beat the inventory: a host
    pinned bc_stop_policy: never would get the survey's auto. So no question that has an inventory value
    has a default, none is required (an unanswered one is not sent), and a text answer must be at least
    one character (_survey_element_validation refuses a shorter one: an empty answer never reaches the
    play as "")."""
    questions = [q for name in ("survey.json", "recover_survey.json") for q in json.loads((ROOT / "awx" / name).read_text())["spec"]]
    for q in questions:
        if q["type"] in ("text", "textarea"):
            assert int(q.get("min", 0)) >= 1, q["variable"]
        if q["variable"] == "bc_target":  # the plays' own keyword: no inventory value to override
            continue
        assert "default" not in q and q["required"] is False, q["variable"]
        assert "inventory" in q["question_description"], q["variable"]  # the operator is told what unanswered means


@pytest.mark.parametrize("task", AWX_TASKS, ids=[t["name"] for t in AWX_TASKS])
def test_awx_task_arguments_are_valid(task):
    module = next(k for k in task if k.startswith("awx.awx."))
    args = dict(task[module])
    args.pop("survey_spec", None)  # a lookup relative to the playbook; its JSON is checked above
    extra = json.dumps(PLAY["vars"])
    proc = subprocess.run([str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "--playbook-dir", str(ROOT / "awx"),
                           "-e", extra,
                           "-e", f"ansible_python_interpreter={sys.executable}", "-m", module, "-a", json.dumps(args)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert "Unsupported parameters" not in out and "missing required" not in out and "must be one of" not in out, out
    assert "trying to connect to https://127.0.0.1:9" in out, out  # it got as far as the (absent) controller


def test_ansible_builder_creates_the_build_context(tmp_path):
    proc = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "--context", str(tmp_path / "ctx")],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (tmp_path / "ctx" / "Containerfile").read_text()
    assert "ansible-core==2.19.14" in containerfile or "ansible-core==2.19.14" in "".join(
        p.read_text() for p in (tmp_path / "ctx").rglob("*.txt"))
    assert (tmp_path / "ctx" / "_build" / "requirements.yml").exists()


def test_the_recovery_job_runs_the_recovery_playbook_with_its_own_answers():
    """One job for a host a dead cycle left: playbooks/recover.yml, asking only what recovery needs (which hosts,
    and the token of a lock to break), each a setting of the contract."""
    template = next(t for t in PLAY["tasks"] if t["name"].startswith("Recovery job"))["awx.awx.job_template"]
    assert template["playbook"] == "playbooks/recover.yml" and (ROOT / template["playbook"]).exists()
    assert template["survey_spec"] == "{{ lookup('ansible.builtin.file', 'recover_survey.json') | from_json }}"
    survey = json.loads((ROOT / "awx/recover_survey.json").read_text())
    assert {q["variable"] for q in survey["spec"]} == {"bc_target", "bc_lock_break_token"}
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    assert "bc_lock_break_token" in contract


def task(module: str, name_start: str = "") -> dict:
    return next(t for t in PLAY["tasks"] if module in t and t["name"].startswith(name_start))[module]


def rendered(expr: str) -> str:
    """`expr` templated with the play's vars as the play would (playbook_dir: awx/), by a real `ansible` run."""
    proc = subprocess.run([str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "--playbook-dir", str(ROOT / "awx"),
                           "-e", json.dumps(PLAY["vars"]), "-e", f"ansible_python_interpreter={sys.executable}",
                           "-m", "ansible.builtin.debug", "-a", json.dumps({"msg": expr})],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("=>", 1)[1])["msg"]


def test_every_secret_the_site_reads_is_injected_as_a_file_never_as_a_value():
    """inventory/ct200 reads each secret with lookup('inference_ops.benchmark_cycle.bc_secret', NAME): the credential
    type must inject NAME_FILE (a
    path: ansible-runner records the job's environment in artifacts/<id>/command) from a file template of that input,
    and nothing else into the environment."""
    import re

    site = "\n".join(p.read_text() for p in (ROOT / "inventory/ct200").rglob("*.yml"))
    names = set(re.findall(r"lookup\('(?:inference_ops\.benchmark_cycle\.)?bc_secret', '([A-Z_]+)'\)", site))
    assert "BC_API_KEY" in names and "lookup('ansible.builtin.env', 'BC_API_KEY')" not in site
    injectors = task("awx.awx.credential_type")["injectors"]
    env, files = injectors["env"], injectors["file"]
    assert set(env) >= {n + "_FILE" for n in names} and all(k.endswith("_FILE") for k in env), env
    for var, value in env.items():  # each path names one file template, whose content is one of the type's inputs
        field = re.fullmatch(r"\{% raw %\}\{\{ tower\.filename\.(\w+) \}\}\{% endraw %\}", value).group(1)
        assert files["template." + field] == "{% raw %}{{ " + field + " }}{% endraw %}", var
    fields = {f["id"]: f for f in task("awx.awx.credential_type")["inputs"]["fields"]}
    assert all(f["secret"] for f in fields.values()) and "bc_api_key" in task("awx.awx.credential_type")["inputs"]["required"]


def test_the_jobs_run_on_the_projects_ee_with_the_secrets_and_a_pinned_release():
    ee = task("awx.awx.execution_environment")
    for template in (task("awx.awx.job_template", "Job template"), task("awx.awx.job_template", "Recovery")):
        assert template["execution_environment"] == "{{ awx_ee_name }}"
        assert template["credentials"] == ["{{ awx_credential_name }}", "{{ awx_secrets_credential_name }}"]
    assert ee["name"] == "{{ awx_ee_name }}" and ee["pull"] == "missing"
    project = task("awx.awx.project")
    assert project["allow_override"] is False and project["scm_branch"] == "{{ awx_scm_branch }}"
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert rendered("{{ awx_scm_branch }}") == "v" + version  # the release tag, never a moving branch
    assert rendered("{{ awx_ee_image }}").endswith(":v" + version)
    # the secrets credential: made from BC_API_KEY at apply time without logging it, never modified on a re-apply
    credential = next(t for t in PLAY["tasks"] if t["name"].startswith("Secrets credential"))
    # state exists: awx.awx's credential module creates it when missing and never modifies one that exists
    # (modules/credential.py 24.6.1: "C(exists) will not modify the resource if it is present")
    assert credential["no_log"] is True and credential["awx.awx.credential"]["state"] == "exists"
