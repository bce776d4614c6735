"""The inventory contract (playbooks/vars/contract.yml): every bc_* setting defined once, with its type,
default and description, one name from the inventory to the code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from bc_filters import effective, unknown_settings

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
# filters are bc_* too: not settings
FILTERS = set(re.findall(r'"(bc_[a-z0-9_]+)":', (ROOT / "filter_plugins/bc_filters.py").read_text()))
# what the plays' own keywords read (hosts, serial, max_fail_percentage): they see no play variables, so
# their defaults stand there, and the contract holds none for them
PLAY_KEYWORDS = {"bc_target", "bc_serial", "bc_max_fail_percentage"}
SOURCES = [p for d in ("playbooks", "roles", "inventory", "awx", "molecule") for p in (ROOT / d).rglob("*")
           if p.is_file() and p.suffix in (".yml", ".yaml", ".json", ".j2") and p.name != "contract.yml"]


# and the shared code's files (module_utils/bc_*.py), named in comments and descriptions
FILES = {p.stem for p in (ROOT / "module_utils").glob("bc_*.py")} | {p.stem for p in (ROOT / "plugins" / "lookup").glob("bc_*.py")}


def names_in(text: str) -> set[str]:
    return set(re.findall(r"\bbc_[a-z0-9_]+\b", text)) - FILTERS - FILES - {"bc_contract", "bc_contract_renamed"}


def test_every_setting_has_a_type_and_a_description():
    for name, spec in CONTRACT.items():
        assert name.startswith("bc_") and spec.get("type") in ("str", "int", "bool", "list", "dict", "path", "raw"), name
        assert len(spec.get("description", "")) > 10, name
        assert spec["type"] != "list" or "elements" in spec, name


def test_every_name_used_anywhere_is_in_the_contract_and_every_one_there_is_used():
    used: set[str] = set()
    for path in SOURCES:
        found = names_in(path.read_text())
        unknown = found - set(CONTRACT)
        assert not unknown, "%s uses %s, which playbooks/vars/contract.yml does not define" % (path, sorted(unknown))
        used |= found
    # read by the wiring, the plays, the roles' tasks and templates, or by the preflight's verdict (module_utils/bc_contract.py)
    wiring = (ROOT / "playbooks/vars/cycle.yml").read_text() + (ROOT / "module_utils/bc_contract.py").read_text() + "".join(
        p.read_text() for p in [*(ROOT / "playbooks").glob("*.yml"), *(ROOT / "roles").glob("*/tasks/*.yml"),
                                *(ROOT / "roles").glob("*/templates/*")])
    dead = {n for n in CONTRACT if "cycle_bc." + n not in wiring and n not in wiring}
    assert not dead, "defined in the contract but read nowhere: %s" % sorted(dead)


def test_each_default_is_written_once_in_the_contract():
    # no `bc_x | default(...)` anywhere but the plays' keywords
    pattern = re.compile(r"\b(bc_[a-z0-9_]+)\s*\|\s*default\(")
    for path in SOURCES:
        for name in pattern.findall(path.read_text()):
            assert name in PLAY_KEYWORDS, "%s writes a default for %s: it belongs in playbooks/vars/contract.yml" % (path, name)
    for name in PLAY_KEYWORDS:
        assert "default" not in CONTRACT[name], name
    # a play keyword's default is the same in every play
    for name in PLAY_KEYWORDS:
        values = {m for p in (ROOT / "playbooks").glob("*.yml") for m in re.findall(r"\b%s \| default\(([^)]*)\)" % name, p.read_text())}
        assert len(values) <= 1, (name, values)


def test_the_survey_asks_only_for_settings_of_the_contract():
    survey = json.loads((ROOT / "awx/survey.json").read_text())
    assert {q["variable"] for q in survey["spec"]} <= set(CONTRACT)


def test_effective_values_take_what_is_given_else_the_default():
    got = effective({"bc_port": 8080, "bc_unit": "sglang-k26", "bc_api_key": ""}, "/srv/results")
    assert got["bc_port"] == 8080 and got["bc_unit"] == "sglang-k26" and got["bc_api_key"] == ""
    assert got["bc_drain_deadline_s"] == 120 and got["bc_sweep_backends"] == ["auto", "torch"]
    assert got["bc_target"] is None  # the play's keyword reads it, with its own default
    assert set(got) == set(CONTRACT)


@pytest.mark.parametrize(("given", "name", "want"), [
    # an AWX answer is a string: read as Ansible reads the setting's type
    ({"bc_readiness_timeout_s": "900"}, "bc_readiness_timeout_s", 900),
    ({"bc_api_key_required": "no"}, "bc_api_key_required", False),
    ({"bc_readiness_timeout_s": "soon"}, "bc_readiness_timeout_s", "soon"),  # unreadable: as given, the check names it
    # derived when absent or empty, by one rule each (bc_contract.DERIVED)
    ({}, "bc_url", "http://127.0.0.1:30001"),
    ({"bc_port": "8080", "bc_url": ""}, "bc_url", "http://127.0.0.1:8080"),
    ({"bc_url": "https://h:1"}, "bc_url", "https://h:1"),
    ({"bc_service_user": "sglang"}, "bc_service_group", "sglang"),
    ({"bc_service_user": "sglang", "bc_service_group": "gpu"}, "bc_service_group", "gpu"),
    ({"bc_drain_deadline_s": "60"}, "bc_stop_timeout_s", 135),
    ({"bc_stop_timeout_s": 500}, "bc_stop_timeout_s", 500),
    ({"bc_engine_python": "~/venv/bin/python"}, "bc_sweep_python", "~/venv/bin/python"),  # a host's path, kept as given
    ({}, "bc_results_dir", "/srv/results"),
    ({"bc_results_dir": "/data/r"}, "bc_results_dir", "/data/r"),
    # one name for the unit and its lock; lists in one form
    ({"bc_unit": "sglang-k26.service"}, "bc_unit", "sglang-k26"),
    ({"bc_sweep_tp_sizes": "1, 8"}, "bc_sweep_tp_sizes", [1, 8]),
    ({"bc_sweep_backends": "sglang, triton,sglang"}, "bc_sweep_backends", ["sglang", "triton"]),
    ({"bc_sweep_tune_batch_sizes": ""}, "bc_sweep_tune_batch_sizes", []),
])
def test_effective_reads_derives_and_normalises_each_setting_once(given, name, want):
    assert effective(given, "/srv/results")[name] == want


@pytest.mark.parametrize("given", [{"bc_sweep_tp_sizes": "1,x"}, {"bc_sweep_batch_sizes": ""}, {"bc_sweep_backends": " , "}])
def test_a_list_that_cannot_be_read_stays_as_given_and_the_preflight_refuses_it(given):
    """A recovery reads the settings too, and never a sweep's list: a bad one must not stop it. The preflight does."""
    from bc_filters import settings_problems

    name, value = next(iter(given.items()))
    assert effective(given)[name] == value
    assert any(name in problem for problem in settings_problems(dict(given, bc_unit="u", bc_api_key="k", bc_lb_required=False), CONTRACT))


def test_a_derived_setting_whose_source_cannot_be_read_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"bc_stop_timeout_s.*soon"):
        effective({"bc_drain_deadline_s": "soon"})


def test_secrets_are_marked_no_log():
    for name in ("bc_api_key", "bc_grafana_annotation"):
        assert CONTRACT[name].get("no_log") is True, name


def test_ansible_checks_the_types_against_the_contract_and_takes_what_awx_sends():
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    # one setting at a time: a required one (bc_unit) missing is the preflight's to name, with every other one missing
    validator = ArgumentSpecValidator({k: {a: b for a, b in v.items() if a != "required"} for k, v in CONTRACT.items()})
    bad = validator.validate({"bc_sweep_iters": "abc", "bc_lock_break": "maybe", "bc_engine_settings": [1]})
    messages = " ".join(bad.error_messages)
    assert "bc_sweep_iters" in messages and "bc_lock_break" in messages and "bc_engine_settings" in messages
    # every answer the AWX survey offers arrives as a string, and must pass
    survey = json.loads((ROOT / "awx/survey.json").read_text())
    for q in survey["spec"]:
        for answer in q.get("choices", []) + ([q["default"]] if "default" in q else []):
            result = validator.validate({q["variable"]: answer})
            assert not result.error_messages, (q["variable"], answer, result.error_messages)
    assert validator.validate({"bc_sweep_tp_sizes": "1,8"}).validated_parameters["bc_sweep_tp_sizes"] == [1, 8]
    # a secret's value never appears in an error
    assert "sk-123456" not in " ".join(validator.validate({"bc_api_key": {"v": "sk-123456"}}).error_messages)


def test_the_unit_roles_settings_are_exactly_the_engines_flags():
    """The settings the service_unit role takes (its argument spec, which types them and refuses a typo
    naming it) are the union of the engines' flags (bc_engines.ENGINES[*]["flags"]), and each engine's
    program is the role's: one list of what the unit can be told."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES

    spec = yaml.safe_load((ROOT / "roles/service_unit/meta/argument_specs.yml").read_text())
    settings = spec["argument_specs"]["main"]["options"]["service_unit_settings"]["options"]
    flags = set().union(*(set(e["flags"]) for e in ENGINES.values()))
    assert set(settings) == flags, (sorted(set(settings) - flags), sorted(flags - set(settings)))
    programs = yaml.safe_load((ROOT / "roles/service_unit/vars/main.yml").read_text())["service_unit_engines"]
    assert set(programs) == set(ENGINES) and all({"exec", "restart"} <= set(p) <= {"exec", "restart", "settings"}
                                                 for p in programs.values())
    # an engine's own settings (what the project needs its server to run with) are settings of that engine
    for engine, program in programs.items():
        assert set(program.get("settings", {})) <= set(ENGINES[engine]["flags"]), engine


def test_a_renamed_setting_is_refused_with_what_to_write_instead():
    renamed = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract_renamed"]
    for old, hint in renamed.items():
        assert old not in CONTRACT, old
        assert any(name in hint for name in CONTRACT), (old, hint)  # the hint names the setting to use
        assert unknown_settings({old: 1}) == ["%s -> %s" % (old, hint)]
    assert unknown_settings({"bc_readiness_timeout": 1, "bc_port": 1}) == ["bc_readiness_timeout -> did you mean bc_readiness_timeout_s?"]
    assert unknown_settings({"bc_zzzz_qqqq": 1}) == ["bc_zzzz_qqqq -> no such setting"]
    assert "bc_unknown_settings" in (ROOT / "roles/cycle/tasks/preflight.yml").read_text()


def test_a_setting_has_one_name_no_variable_renames_one():
    """#46: a setting keeps its name from the inventory to the task that reads it (cycle_bc.bc_*). No variable of the
    wiring, of a role's defaults or of its vars is a bare second name for one (`x: "{{ cycle_bc.bc_y }}"`)."""
    files = [ROOT / "playbooks/vars/cycle.yml", *sorted(ROOT.glob("roles/*/defaults/main.yml")), *sorted(ROOT.glob("roles/*/vars/main.yml"))]
    renamed = {}
    for path in files:
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if isinstance(value, str) and (m := re.fullmatch(r"\{\{\s*cycle_bc\.(bc_\w+)\s*\}\}", value.strip())):
                renamed["%s: %s" % (path.relative_to(ROOT), name)] = m.group(1)
    assert renamed == {}, "second names for settings (read cycle_bc.<setting> where it is used): %s" % renamed
    assert len(files) > 5  # the wiring and every role's files were read


ROLE_VARIABLE = re.compile(r"(?<![\w.'\"/-])((?:service_unit|service_drain|service_start|service_readiness|gpu_benchmark|gpu_health|cycle_lock|cycle)"
                           r"_[a-z0-9_]+)\b")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
BARE_JINJA = ("when", "that", "until", "failed_when", "changed_when", "loop")


def test_every_variable_the_roles_and_plays_read_is_defined_somewhere():
    """A renamed or removed variable still read somewhere fails only on the path that reads it (a key probe, a release):
    every role or cycle variable read in a template expression is a key, a register or a loop_var of some YAML file of
    the roles and plays, or set in a template."""
    defined: set[str] = set()
    used: dict[str, set[str]] = {}

    def walk(node: Any, key: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                defined.update([k] if isinstance(k, str) else [])
                defined.update([v] if k in ("register", "loop_var") and isinstance(v, str) else [])
                walk(v, k, where)
        elif isinstance(node, list):
            for v in node:
                walk(v, key, where)
        elif isinstance(node, str):
            for part in [node] if key in BARE_JINJA else JINJA.findall(node):
                for name in ROLE_VARIABLE.findall(part):
                    used.setdefault(name, set()).add(where)

    for path in [p for d in ("roles", "playbooks") for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in (".yml", ".j2")]:
        text, where = path.read_text(), str(path.relative_to(ROOT))
        if path.suffix == ".j2":
            used.update({n: used.get(n, set()) | {where} for part in JINJA.findall(text) for n in ROLE_VARIABLE.findall(part)})
            defined.update(re.findall(r"\{%-?\s*set\s+(\w+)", text))
        else:
            walk(yaml.safe_load(text), None, where)
    assert len(used) > 100  # the scan read the roles' expressions
    missing = {name: sorted(where) for name, where in used.items() if name not in defined}
    assert not missing, "read but defined nowhere: %s" % missing
