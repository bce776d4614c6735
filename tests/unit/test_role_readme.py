"""collection/role_readme.py: each role's README is a view of its meta/argument_specs.yml, never written by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collection"))

import role_readme

SPEC = {"argument_specs": {
    "main": {"short_description": "Stop the unit",
             "description": ["Returns C(x_report) from M(inference_unit) with O(state=stopped).", "I(Never) twice."],
             "options": {"x_unit": {"type": "str", "required": True, "description": "The unit | its name."},
                         "x_key": {"type": "str", "default": "sk-1", "no_log": True, "description": "A key."},
                         "x_empty_key": {"type": "str", "default": "", "no_log": True, "description": "No key."},
                         "x_tags": {"type": "list", "elements": "str", "default": ["a", "b"], "description": "Tags."},
                         "x_mode": {"type": "str", "default": "abort", "choices": ["abort", "force"], "description": "Mode."},
                         "x_hook": {"type": "dict", "description": "A hook."}}},
    "restore": {"short_description": "Put it back", "options": {}}}}


def test_a_spec_renders_as_a_table_with_ansible_doc_markup_made_plain():
    text = role_readme.render("x_role", SPEC, ["playbooks/a.yml"])
    assert "# x_role" in text and "`include_role: name=x_role`" in text
    assert "`include_role: name=x_role tasks_from=restore`" in text
    assert "Returns `x_report` from `inference_unit` (module) with `state=stopped`." in text and "*Never* twice." in text
    assert "| `x_unit` | str | **required** | The unit \\| its name. |" in text  # a pipe never breaks the table
    assert "| `x_key` | str | (secret) | A key. |" in text  # a secret's default is never shown
    assert "| `x_empty_key` | str | `''` | No key. |" in text
    assert "| `x_tags` | list/str | `[a, b]` | Tags. |" in text
    assert "| `x_mode` | str | `abort` | Mode. One of: `abort`, `force`. |" in text
    assert "| `x_hook` | dict | - | A hook. |" in text
    assert "- `playbooks/a.yml`" in text and "`ansible-doc -t role -r roles x_role`" in text


def test_in_the_collection_the_role_is_named_by_its_fqcn():
    text = role_readme.render("x_role", SPEC, [], fqcn="inference_ops.benchmark_cycle")
    assert "# inference_ops.benchmark_cycle.x_role" in text
    assert "`include_role: name=inference_ops.benchmark_cycle.x_role`" in text and "name=x_role`" not in text
    assert "`ansible-doc -t role inference_ops.benchmark_cycle.x_role`" in text and "(no playbook of this project)" in text


def test_every_roles_readme_is_its_spec_as_committed():
    for rel, text in role_readme.readmes().items():
        assert (ROOT / rel).read_text(encoding="utf-8") == text, (
            "%s is out of date with its meta/argument_specs.yml: run .venv/bin/python collection/role_readme.py" % rel)
    assert len(role_readme.readmes()) == len(list(ROOT.glob("roles/*/meta/argument_specs.yml"))) >= 7


def test_a_spec_changed_without_its_readme_fails_the_check(tmp_path, monkeypatch):
    spec = tmp_path / "roles/x_role/meta/argument_specs.yml"
    spec.parent.mkdir(parents=True)
    spec.write_text(yaml.safe_dump(SPEC))
    monkeypatch.setattr(role_readme, "ROOT", tmp_path)
    assert role_readme.main(["--check"]) == 1  # no README yet
    assert role_readme.main([]) == 0 and role_readme.main(["--check"]) == 0
    SPEC_CHANGED = dict(SPEC["argument_specs"]["main"], short_description="Stop the unit, then prove it")
    spec.write_text(yaml.safe_dump({"argument_specs": {"main": SPEC_CHANGED}}))
    assert role_readme.main(["--check"]) == 1


@pytest.mark.parametrize(("role", "caller"), [("cycle", "playbooks/benchmark_cycle.yml"),
                                              ("cycle_lock", "roles/cycle/tasks/main.yml"),
                                              ("service_drain", "roles/cycle/tasks/bring_back.yml")])
def test_a_role_is_listed_with_the_playbooks_and_roles_that_call_it(role, caller):
    callers = role_readme.used_by(role, ROOT)
    assert caller in callers and not any(c.startswith("roles/%s/" % role) for c in callers)
    assert all((ROOT / c).read_text().count(role) for c in callers)
