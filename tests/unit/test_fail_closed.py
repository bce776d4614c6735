"""Fail closed: each case that once passed the preflight and did the wrong thing quietly (the
"fail closed" issue), refused now before anything is touched, with a message naming the setting and
the fix; and the site inventories themselves pass the contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.bc_contract import installed_key, key_problem, problems, unit_name

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
    ({"bc_gpu_health_rules": {"temperature_c": {"max": "hot"}}}, "bc_gpu_health_rules.temperature_c.max=hot"),
    ({"bc_gpu_health_xid_window_s": 0}, "bc_gpu_health_xid_window_s=0"),
    ({"bc_grafana_annotation": {"url": "https://g", "token": "t0k3n-abc", "dashbord_uid": "x"}}, "unknown key(s) dashbord_uid"),
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
    assert "bc_api_key is empty" in key_problem("u", "", True, "", files)
    assert key_problem("u", "", False, "", files) == ""  # a site without a key, said explicitly
    refused = key_problem("u", "", False, "sk-old-key", files)
    assert "has a key today" in refused and "sk-old-key" not in refused
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
    from ansible.module_utils.bc_contract import server_keys

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
    from ansible.module_utils.bc_contract import hook_secrets

    hook = {"argv": ["/usr/local/bin/lb", "--token", "Zq9xSECRET", "--auth=AbcSECRET2"]}
    assert {"Zq9xSECRET", "AbcSECRET2"} <= set(hook_secrets(hook, {"url": "https://lb/x", "body": {"a": {"t": "BodySECRET3"}}}))
    assert "BodySECRET3" in hook_secrets({"url": "https://lb/x", "body": {"a": {"t": "BodySECRET3"}}})
    bad = {"bc_lb_remove": {"argv": ["curl -H 'X-Auth: Zq9xSECRET' https://lb/out"]}, "bc_lb_restore": HOOK}
    assert not any("Zq9xSECRET" in m for m in problems(CONTRACT, dict(SITE, **bad)))


def test_unrepairable_memory_fails_the_gpu():
    from ansible.module_utils.bc_gpuhealth import judge, parse_smi_xml

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
    refused = [m for m in problems(contract, {"bc_sweep_tp_sizes": blank}) if "bc_lb_" not in m]
    assert refused and all("bc_sweep_tp_sizes" in m for m in refused), refused
