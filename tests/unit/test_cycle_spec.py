"""The cycle role's argument spec is the inventory contract (collection/cycle_spec.py): every setting an option with
the contract's type, elements, choices, default and no_log; the file in the tree is what the contract makes; and
ansible-core's own role-argument check, run on it, refuses what the contract refuses by type or choice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collection"))

import cycle_spec

CONTRACT = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]


def test_the_spec_in_the_tree_is_the_one_the_contract_makes():
    assert cycle_spec.TARGET.read_text() == cycle_spec.render(), "run .venv/bin/python collection/cycle_spec.py"
    assert cycle_spec.main(["--check"]) == 0


def test_every_setting_is_an_option_with_the_contracts_rules():
    options = yaml.safe_load(cycle_spec.TARGET.read_text())["argument_specs"]["main"]["options"]
    assert set(options) == set(CONTRACT)
    for name, setting in CONTRACT.items():
        for key in ("type", "elements", "choices", "default", "no_log"):
            assert options[name].get(key) == setting.get(key), (name, key)
        if setting.get("range"):
            assert "From %s to %s." % tuple(setting["range"]) in options[name]["description"], name


def test_a_setting_added_to_the_contract_alone_fails_the_check(tmp_path, monkeypatch):
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())
    contract["bc_contract"]["bc_new_knob"] = {"type": "int", "default": 3, "range": [1, 9], "description": "A new knob."}
    changed = tmp_path / "contract.yml"
    changed.write_text(yaml.safe_dump(contract))
    monkeypatch.setattr(cycle_spec, "CONTRACT", changed)
    text = cycle_spec._render(changed)
    assert "bc_new_knob" in text and "From 1 to 9." in text
    assert cycle_spec.main(["--check"]) == 1  # the tree's spec no longer matches: lint names the fix


@pytest.mark.parametrize(("given", "says"), [
    ({"bc_engine": "llama.cpp"}, "value of bc_engine must be one of: llamacpp, sglang, vllm, got: llama.cpp"),
    ({"bc_port": "http"}, "bc_port"),
])
def test_ansible_cores_role_check_on_the_spec_refuses_a_wrong_type_or_choice(given, says):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    options = yaml.safe_load(cycle_spec.TARGET.read_text())["argument_specs"]["main"]["options"]
    result = ArgumentSpecValidator(options).validate(dict(given))
    assert any(says in m for m in result.error_messages), result.error_messages
