"""AWX's notification as code (awx/configure.yml): a webhook notification template whose URL and headers come from
variables, no secret written in the file, wired to the error notifications of both job templates (the cycle and its
recovery). A host left out of the router always fails its job, so the error notification covers it: the bring-back's
plan never keeps a host out without a failure to say."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_bringback import plan

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "awx/configure.yml").read_text()
PLAY = yaml.safe_load(TEXT)[0]
SECRET_KEY = re.compile(r"(?i)(password|token|secret|authorization|api[_-]?key)")


def notification_task() -> dict[str, Any]:
    found = [t for t in PLAY["tasks"] if "awx.awx.notification_template" in t]
    assert len(found) == 1, [t["name"] for t in found]
    return found[0]


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, "%s.%s" % (path, k) if path else str(k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, "%s[%d]" % (path, i))]
    return [(path, value)]


def test_the_failed_job_notification_is_a_webhook_from_variables_and_never_logged():
    task = notification_task()
    args = task["awx.awx.notification_template"]
    assert args["notification_type"] == "webhook" and args["state"] == "present" and task["no_log"] is True
    config = args["notification_configuration"]
    assert "awx_notify_url" in config["url"] and "BC_NOTIFY_URL" in config["url"]
    assert "awx_notify_headers" in config["headers"] and "BC_NOTIFY_HEADERS" in config["headers"]
    assert config["password"] == "{{ lookup('ansible.builtin.env', 'BC_NOTIFY_PASSWORD') }}"  # AWX encrypts this field
    assert config["http_method"] == "POST" and config["disable_ssl_verification"] is False


def test_both_job_templates_notify_on_error_after_the_notification_exists():
    task = notification_task()
    name = task["awx.awx.notification_template"]["name"]
    templates = [t for t in PLAY["tasks"] if "awx.awx.job_template" in t]
    assert {t["awx.awx.job_template"]["playbook"] for t in templates} == {"benchmark_cycle.yml", "playbooks/recover.yml"}
    for template in templates:
        assert template["awx.awx.job_template"].get("notification_templates_error") == [name], template["name"]
        assert PLAY["tasks"].index(task) < PLAY["tasks"].index(template)  # it exists before a template names it


def test_no_secret_is_written_in_the_awx_playbook():
    for task in PLAY["tasks"]:
        for path, value in leaves(task):
            if SECRET_KEY.search(path.rsplit(".", 1)[-1]) and isinstance(value, str):
                assert value == "" or value.strip().startswith(("{{", "{%")), (task["name"], path)  # given at apply time
    assert not re.search(r"(?i)bearer\s+[A-Za-z0-9]", TEXT)
    assert not re.search(r"https?://[^/\s\"']*@", TEXT)  # no credentials in a URL


def test_a_host_left_out_of_the_router_always_fails_its_job():
    """The bring-back's plan over its inputs: wherever it keeps a host the router is owed (route_back false), it has a
    GPU failure to say (bring_back.yml sets cycle_failure from it), so the job fails and AWX's error notification is
    sent. Where it puts the host back, a restore or a readiness that fails fails the job by itself."""
    for lb_out, healthy, policy, swept in itertools.product([True, False, None], [True, False, None], ["unrouted", "serve"],
                                                            [True, False]):
        got = plan({"stopped": True, "lb_out": lb_out, "gpu_pre": True, "gpu_swept": swept, "gpu_post_healthy": healthy,
                    "policy": policy, "strategy": "stop"})
        if got["router_owed"] and not got["route_back"]:
            assert got["gpu_sick"] and got["gpu_failure"], got
