"""Fail closed: each case that once passed the preflight and did the wrong thing quietly (the
"fail closed" issue), refused now before anything is touched, with a message naming the setting and
the fix; and the site inventories themselves pass the contract."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import (
    installed_key,
    key_problem,
    problems,
    unit_name,
)

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
KEY = "sk-fc-3e8d1a7b"
SITE = {"bc_unit": "sglang-k26-ddtree", "bc_api_key": KEY, "bc_lb_required": False}
HOOK = {"argv": ["/usr/local/bin/lb", "remove", "ct200"]}


@pytest.mark.parametrize(("given", "message"), [
    # a router hook with a typo is no hook: the host would stay in the router while stopped
    ({"bc_lb_remove": {"args": ["/usr/local/bin/lb"]}, "bc_lb_restore": HOOK}, "bc_lb_remove needs exactly one of argv"),
    ({"bc_lb_remove": {"URL": "http://lb/x"}, "bc_lb_restore": HOOK}, "unknown key(s) URL"),
    ({"bc_lb_remove": {"argv": []}, "bc_lb_restore": HOOK}, "bc_lb_remove.argv must be a non-empty list"),
    ({"bc_lb_remove": {"argv": ["lb", "x"]}, "bc_lb_restore": HOOK}, "bc_lb_remove.argv[0] is not an absolute path"),
    ({"bc_lb_remove": {"argv": ["/x"], "timeot": 5}, "bc_lb_restore": HOOK}, "unknown key(s) timeot"),
    ({"bc_lb_remove": HOOK}, "bc_lb_remove is given without bc_lb_restore"),
    ({"bc_lb_required": True}, "bc_lb_remove and bc_lb_restore are not given"),
    # serial 0 or negative puts every host in one batch
    ({"bc_serial": 0}, "bc_serial=0"), ({"bc_serial": -1}, "bc_serial=-1"), ({"bc_serial": "0%"}, "bc_serial='0%'"),
    ({"bc_serial": []}, "bc_serial is empty"), ({"bc_serial": "150%"}, "bc_serial='150%'"),
    ({"bc_max_fail_percentage": -5}, "bc_max_fail_percentage=-5"),
    # a sweep that would refuse only after the service was stopped
    ({"bc_sweep_iters": 0}, "bc_sweep_iters=0: give a number from 3"),
    ({"bc_sweep_shape": {"num_experts": 384, "hidden": 7168}}, "bc_sweep_shape: unknown key(s) hidden"),
    # a known answer that every answer contains
    ({"bc_probe_expect": ""}, "bc_probe_expect is empty: every answer contains the empty text"),
    ({"bc_probe_expect": "  "}, "bc_probe_expect"),
    # the key on the command line
    ({"bc_engine_extra_args": ["--api-key", KEY]}, "bc_engine_extra_args[0] carries a secret"),
    ({"bc_engine_extra_args": ["--x", "v" + KEY]}, "bc_engine_extra_args[1] carries a secret"),
    # an unknown engine, by name, with the known ones
    ({"bc_engine": "llama.cpp"}, "value of bc_engine must be one of: llamacpp, sglang, vllm, got: llama.cpp"),
    ({"bc_engine_settings": {"model_pth": "/m"}}, "bc_engine_settings.model_pth: sglang has no such setting"),
    ({"bc_engine_version": "latest"}, "bc_engine_version='latest' has no number"),
    # a rule of the wrong type names the field instead of raising
    ({"bc_gpu_health_rules": {"temperature_c": {"max": "hot"}}}, "bc_gpu_health_rules.temperature_c.max=hot: give a number"),
    ({"bc_gpu_health_xid_window_s": 0}, "bc_gpu_health_xid_window_s=0"),
    ({"bc_grafana_annotation": {"url": "https://g", "token": "t0k3n-abc", "dashbord_uid": "x"}}, "unknown key(s) dashbord_uid"),
    # the lab's preflight refusals, rows here since issue #45 (each was a lab cycle)
    ({"bc_serial": "-1"}, "bc_serial='-1'"),  # as a survey sends it: a string
    ({"bc_sweep_batch_sizes": ""}, "bc_sweep_batch_sizes is empty"),
    ({"bc_sweep_batch_sizes": "1,1000000000"}, "bc_sweep_batch_sizes=1,1000000000: give numbers from 1 to 1048576"),
    ({"bc_sweep_tp_sizes": "1,x"}, "bc_sweep_tp_sizes"),
    ({"bc_readiness_timeout_s": "inf"}, "bc_readiness_timeout_s"),
    ({"bc_sweep_poll_s": 0}, "bc_sweep_poll_s=0"),
    ({"bc_engine_env": {"E\nLD_PRELOAD": "/x.so"}}, "is not an environment variable name"),
    ({"bc_api_key": KEY + "\n"}, "bc_api_key holds whitespace"),
    ({"bc_engine": "llamacpp", "bc_engine_settings": {"model_path": "/m", "mem_fration_static": 0.8}},
     "bc_engine_settings.mem_fration_static: llamacpp has no such setting"),
    ({"bc_unit": "llama-lab;touch /tmp/pwned"}, "bc_unit=llama-lab;touch /tmp/pwned is not a systemd unit name"),
])
def test_each_quiet_failure_is_refused_naming_the_setting(given, message):
    found = problems(CONTRACT, dict(SITE, **given))
    assert any(message in m for m in found), found
    assert not any(KEY in m for m in found)


def test_a_sound_site_passes():
    assert problems(CONTRACT, dict(SITE, bc_lb_remove=HOOK, bc_lb_restore=HOOK, bc_lb_required=True, bc_serial=[1, "25%"])) == []
    assert problems(CONTRACT, dict(SITE, bc_lb_remove={"url": "https://lb.example/x", "method": "DELETE", "timeout": 10},
                                   bc_lb_restore={"url": "https://lb.example/x"})) == []


@pytest.mark.parametrize("inventory", ["ct200", "lab", "gpu"])
def test_the_sites_inventories_pass_the_contract(inventory):
    values = yaml.safe_load((ROOT / "inventory" / inventory / "group_vars/all.yml").read_text())
    given = {k: v for k, v in values.items() if k.startswith("bc_")}
    if "{{" in str(given.get("bc_api_key", "")):  # a lookup (ct200: BC_API_KEY): its value is the operator's
        given["bc_api_key"] = KEY
    assert problems(CONTRACT, given) == []


def test_an_empty_key_is_refused_unless_said_and_never_against_a_unit_that_has_one():
    files = "/etc/benchmark-cycle/u.env or /etc/benchmark-cycle/u.secrets.yaml"
    assert "bc_api_key is empty: the server would be restarted with no authentication" in key_problem("u", "", True, "", files)
    assert key_problem("u", "", False, "", files) == ""  # a site without a key, said explicitly
    refused = key_problem("llama-lab", "", False, "sk-old-key", files)
    assert "bc_api_key is empty but llama-lab has a key today" in refused and "sk-old-key" not in refused
    assert key_problem("u", KEY, True, "sk-old-key", files) == ""  # a rotation is fine


@pytest.mark.parametrize(("engine", "env", "secret", "key"), [
    ("llamacpp", 'LLAMA_API_KEY="sk-a\\"b"\nX="1"\n', "", 'sk-a"b'),
    ("vllm", 'VLLM_API_KEY="sk-v"\n', "", "sk-v"),
    ("sglang", "", 'api-key: "sk-s"\n', "sk-s"),
    ("sglang", 'SGLANG_CACHE_DIR="/c"\n', "", ""),
    ("llamacpp", "", "", ""),
])
def test_the_installed_key_is_read_from_the_engines_own_transport(engine, env, secret, key):
    assert installed_key(engine, env, secret) == key


def test_the_unit_is_one_name():
    assert unit_name("sglang-k26-ddtree.service") == unit_name("sglang-k26-ddtree") == "sglang-k26-ddtree"


def test_the_keys_a_running_server_may_hold_come_from_every_place_on_the_host():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import server_keys

    environ = "PATH=/usr/bin\x00LLAMA_API_KEY=sk-running\x00HOME=/root\x00"
    installed = 'LLAMA_API_KEY="sk-new"\n'
    replaced = 'LLAMA_API_KEY="sk-running"\n'
    assert server_keys("llamacpp", [installed, "", environ, replaced], "sk-new") == ["sk-running"]
    assert server_keys("sglang", ["", 'api-key: "sk-a"\n', "", 'api-key: "sk-b"\n'], "sk-c") == ["sk-a", "sk-b"]
    assert server_keys("llamacpp", ["", ""], "") == []


@pytest.mark.parametrize(("check", "ok"), [
    (["/usr/local/bin/lb", "is-out", "ct200"], True), ([], False), (["lb", "is-out"], False), ("lb is-out", False)])
def test_a_hooks_read_back_is_a_command(check, ok):
    hooks = {"bc_lb_remove": dict(HOOK, check=check), "bc_lb_restore": HOOK, "bc_lb_required": True}
    found = problems(CONTRACT, dict(SITE, **hooks))
    assert (found == []) is ok, found
    assert ok or "bc_lb_remove.check must be a command" in found[0]


# found by an adversarial read of this change (a helper), each fixed
@pytest.mark.parametrize(("given", "message"), [
    ({"bc_engine_extra_args": "--api-key=sk-x1234"}, "bc_engine_extra_args must be a list, not a str"),
    ({"bc_engine_settings": None}, "bc_engine_settings is null"),
    ({"bc_textfile_dir": None}, "bc_textfile_dir is null"),
    ({"bc_engine": ["sglang"]}, "bc_engine"),
    ({"bc_serial": "12.5%"}, "bc_serial='12.5%'"),
    ({"bc_lb_remove": dict(HOOK, timeout=1.5), "bc_lb_restore": HOOK}, "bc_lb_remove.timeout must be a whole number"),
])
def test_what_the_adversarial_read_found_is_refused(given, message):
    found = problems(CONTRACT, dict(SITE, **given))
    assert any(message in m for m in found), found


def test_engine_flags_with_token_in_their_name_are_not_secrets():
    given = {"bc_engine_settings": {"speculative_num_draft_tokens": 8},
             "bc_engine_extra_args": ["--max-prefill-tokens", "16384", "--tokenizer-path", "/m"]}
    assert problems(CONTRACT, dict(SITE, **given)) == []


def test_hook_secrets_take_the_value_after_a_token_flag_and_the_body_and_messages_never_quote_them():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_endpoints import hook_secrets

    hook = {"argv": ["/usr/local/bin/lb", "--token", "Zq9xSECRET", "--auth=AbcSECRET2"]}
    assert {"Zq9xSECRET", "AbcSECRET2"} <= set(hook_secrets(hook, {"url": "https://lb/x", "body": {"a": {"t": "BodySECRET3"}}}))
    assert "BodySECRET3" in hook_secrets({"url": "https://lb/x", "body": {"a": {"t": "BodySECRET3"}}})
    bad = {"bc_lb_remove": {"argv": ["curl -H 'X-Auth: Zq9xSECRET' https://lb/out"]}, "bc_lb_restore": HOOK}
    assert not any("Zq9xSECRET" in m for m in problems(CONTRACT, dict(SITE, **bad)))


def test_unrepairable_memory_fails_the_gpu():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import judge, parse_smi_xml

    xml = (ROOT / "tests/unit/fixtures/h200/nvidia-smi-q.xml").read_text()
    bad = xml.replace("<unrepairable_memory>No</unrepairable_memory>", "<unrepairable_memory>Yes</unrepairable_memory>")
    assert judge(parse_smi_xml(xml), [], [])["healthy"]
    verdict = judge(parse_smi_xml(bad), [], [])
    assert not verdict["healthy"] and any("unrepairable_memory=True" in p for p in verdict["problems"])


@pytest.mark.parametrize("blank", ["", "  ", []])
def test_a_blank_answer_to_a_list_whose_empty_has_a_meaning_is_that_meaning(blank):
    """An AWX survey sends a blank answer as ""; bc_sweep_tune_batch_sizes says what empty means (the sizes from 256
    up), so blank is accepted, where a list that must not be empty (bc_sweep_tp_sizes) still refuses it, by name."""
    contract = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    assert not [m for m in problems(contract, {"bc_sweep_tune_batch_sizes": blank}) if "bc_sweep_tune_batch_sizes" in m]
    refused = problems(contract, dict(SITE, bc_sweep_tp_sizes=blank))
    assert refused and all("bc_sweep_tp_sizes" in m for m in refused), refused


# bad operator input (#44), each refused by the preflight's one verdict before anything is touched, naming the field
# and the fix, never the key: it once passed, and hung the job, ended in a traceback or did the wrong thing
BOM_KEY = "\ufeff" + KEY


@pytest.mark.parametrize(("given", "message"), [
    # 1. ansible-core counts a batch out host by host (playbook_executor: `for x in range(serial)`): the controller spins
    ({"bc_serial": "99999999999999999999"}, "bc_serial='99999999999999999999': give at most 10000 hosts a batch"),
    ({"bc_serial": 10 ** 20}, "give at most 10000 hosts a batch"),
    ({"bc_serial": [1, 10001]}, "give at most 10000 hosts a batch"),
    ({"bc_max_fail_percentage": "50%"}, "bc_max_fail_percentage=50%: give a whole number from 0 to 100, without the % sign"),
    ({"bc_max_fail_percentage": 10 ** 20}, "bc_max_fail_percentage=100000000000000000000: give a number from 0 to 100"),
    # 2. ansible-core's pct_to_int reads '50% ' as int('50% '): a traceback
    ({"bc_serial": "50% "}, "bc_serial='50% ' holds whitespace: write it without spaces, e.g. '50%'"),
    ({"bc_serial": [1, " 25%"]}, "holds whitespace"),
    # 3. one sizing run per tensor-parallel shape (and per point, per routing): a huge list takes the preflight minutes
    ({"bc_sweep_tp_sizes": list(range(1, 65)) * 1000}, "bc_sweep_tp_sizes has 64000 items: give at most 8"),
    ({"bc_sweep_batch_sizes": ",".join(map(str, range(1, 200001)))}, "bc_sweep_batch_sizes has 200000 items: give at most 64"),
    ({"bc_sweep_routing": [{"kind": "uniform"}] * 100000}, "bc_sweep_routing has 100000 items: give at most 16"),
    ({"bc_serial": [1] * 100000}, "bc_serial has 100000 items: give at most 64"),
    ({"bc_engine_env": {"E%d" % i: "v" for i in range(100000)}}, "bc_engine_env has 100000 items: give at most 128"),
    # 4. a list of choices with one twice: the same sweep twice, its result files overwritten
    ({"bc_sweep_tp_sizes": [1, 8, 8]}, "bc_sweep_tp_sizes=[1, 8, 8] lists 8 more than once: give each once"),
    ({"bc_sweep_tp_sizes": "8,08"}, "bc_sweep_tp_sizes=8,08 lists 8 more than once"),
    ({"bc_sweep_batch_sizes": [1, 2, 2]}, "bc_sweep_batch_sizes=[1, 2, 2] lists 2 more than once"),
    # 5. a key no HTTP header can carry (http.client encodes headers as latin-1: a codec exception mid-cycle)
    ({"bc_api_key": BOM_KEY}, "bc_api_key holds a character that cannot go in an HTTP header"),
    ({"bc_api_key": "sk-fc-\u201c3e8d1a7b\u201d"}, "save the key as plain ASCII (the value is not shown)"),
    ({"bc_grafana_annotation": {"url": "https://g.example", "token": "\ufeffglsa-token-1"}}, "bc_grafana_annotation.token"),
    # 6. SGLANG_MOE_CONFIG_DIR relative to the server's working directory, or climbing out of where it says
    ({"bc_engine_settings": {"moe_config_dir": "moe-config"}}, "bc_engine_settings.moe_config_dir=moe-config: give an absolute path"),
    ({"bc_engine_settings": {"moe_config_dir": "/var/lib/../../tmp/x"}}, "with no '..'"),
    ({"bc_engine_settings": {"moe_config_dir": "/var/lib/x\n"}}, "bc_engine_settings.moe_config_dir"),
    # 7. what the operator reads as the host is not where the requests (and the key) go
    ({"bc_url": "http://127.0.0.1:30001@evil.example:80"}, "has user-info (what stands before @ is not the host: requests, and "
                                                           "their key or token, would go to evil.example)"),
    ({"bc_url": "http://127.0.0.1:30001#@evil.example"}, "bc_url=http://127.0.0.1:30001#@evil.example has a query or fragment"),
    ({"bc_url": "http://127.0.0.1:30001\\@evil.example"}, "holds whitespace, a backslash"),
    ({"bc_url": "ftp://127.0.0.1:30001"}, "bc_url=ftp://127.0.0.1:30001: the scheme must be http or https"),
    ({"bc_url": " http://127.0.0.1:30001"}, "holds whitespace"),
    ({"bc_url": "http://127.0.0.1:99999"}, "cannot be read as a URL (Port out of range"),
    ({"bc_url": "http://gpu\u0430.example:30001"}, "a non-ASCII character"),
    ({"bc_url": "http://:30001"}, "'' is not a host name or address"),
    ({"bc_grafana_annotation": {"url": "https://grafana.example@evil.example", "token": "glsa-token-1"}},
     "bc_grafana_annotation.url=<redacted> has user-info"),  # its values are no_log
])
def test_bad_operator_input_is_refused_naming_the_field_and_the_fix(given, message):
    started = time.monotonic()
    found = problems(CONTRACT, dict(SITE, **given))
    assert time.monotonic() - started < 1.0  # a huge list is refused by its length, before its items are read
    assert any(message in m for m in found), found
    assert not any(KEY in m for m in found)


@pytest.mark.parametrize("given", [
    {"bc_serial": "50%"}, {"bc_serial": [1, "25%", 10000]}, {"bc_serial": "100%"}, {"bc_max_fail_percentage": 100},
    {"bc_sweep_tp_sizes": [1, 2, 4, 8, 16, 32, 64]}, {"bc_sweep_tp_sizes": "1,8"},
    {"bc_sweep_batch_sizes": list(range(1, 65))}, {"bc_sweep_backends": ["auto", "torch", "torch"]},
    {"bc_api_key": "sk-" + "".join(map(chr, range(0x21, 0x7f)))},
    {"bc_engine_settings": {"moe_config_dir": "/var/lib/benchmark-cycle/moe-config"}},
    {"bc_engine_settings": {"moe_config_dir": ""}},
    {"bc_url": "http://127.0.0.1:30001"}, {"bc_url": "https://gpu-7.example:8443/v1"}, {"bc_url": "http://[::1]:30001"},
    {"bc_url": "http://ct200"}, {"bc_url": ""},
])
def test_sound_operator_input_passes(given):
    assert problems(CONTRACT, dict(SITE, **given)) == []


def test_every_missing_required_setting_is_named_in_one_verdict_before_any_template_reads_it():
    """#44 item 7: a site that gives no unit, no key and no router hooks learns all three from one run, each in the
    contract's words (bc_unit once surfaced only after the others, as a template error)."""
    found = problems(CONTRACT, {"bc_engine": "sglang"})
    assert any(m.startswith("bc_unit is not given: set it in the inventory") for m in found), found
    assert any(m.startswith("bc_api_key is empty: the server would be restarted with no authentication") for m in found), found
    assert any(m.startswith("bc_lb_remove and bc_lb_restore are not given") for m in found), found
    assert len(found) == 3 and not any("Nothing was touched" in m for m in found)  # the preflight says it once
    assert problems(CONTRACT, {"bc_unit": "u", "bc_api_key_required": False, "bc_lb_required": False}) == []


@pytest.mark.parametrize(("found", "message"), [
    ({"exists": False}, "does not exist on the host: create it"),
    ({}, "does not exist on the host"),
    ({"exists": True, "isdir": False, "mode": "0644"}, "is not a directory on the host"),
    ({"exists": True, "isdir": True, "mode": "0777"}, "is world-writable (mode 0777)"),
    ({"exists": True, "isdir": True, "mode": "1777"}, "is world-writable (mode 1777)"),
    ({"exists": True, "isdir": True, "mode": None}, "its mode could not be read"),
    ({"exists": True, "isdir": True, "mode": "0755"}, ""),
    ({"exists": True, "isdir": True, "mode": "2775"}, ""),
])
def test_the_moe_config_dir_is_a_directory_on_the_host_no_other_user_can_write(found, message):
    """What the preflight's stat of bc_engine_settings.moe_config_dir (followed) finds on the host, judged."""
    from bc_filters import moe_config_dir_host_problem

    said = moe_config_dir_host_problem("/var/lib/moe", found)
    assert (message in said and said.startswith("bc_engine_settings.moe_config_dir=/var/lib/moe")) if message else said == ""
