"""The roles' interface: every fact a role sets or registers is either an output documented in its
meta/argument_specs.yml or internal (prefixed __<role>_), so that callers read only documented
outputs; and a role reads no other role's internal facts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())


def facts(tasks: Any, out: set[str]) -> set[str]:
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            facts(task.get(key), out)
        set_fact = task.get("ansible.builtin.set_fact")
        if isinstance(set_fact, dict):
            out |= {k for k in set_fact if k != "cacheable"}
        if "register" in task:
            out.add(task["register"])
    return out


@pytest.mark.parametrize("role", ROLES)
def test_every_fact_a_role_sets_is_a_documented_output_or_internal(role: str) -> None:
    found: set[str] = set()
    for path in (ROOT / "roles" / role / "tasks").glob("*.yml"):
        facts(yaml.safe_load(path.read_text()), found)
    spec = (ROOT / "roles" / role / "meta/argument_specs.yml").read_text()
    assert yaml.safe_load(spec)["argument_specs"]["main"]["options"], role  # the spec parses, with its inputs
    for name in sorted(found):
        if name.startswith("__"):
            assert name.startswith("__%s_" % role), "%s: internal fact %s must be prefixed __%s_" % (role, name, role)
        else:
            assert name.startswith(role + "_"), "%s sets %s: outputs are prefixed %s_" % (role, name, role)
            assert re.search(r"\b%s\b" % name, spec), "%s sets %s, which its meta/argument_specs.yml does not document" % (role, name)


def test_no_role_and_no_playbook_reads_another_roles_internal_facts() -> None:
    # the longest name first: __cycle_lock_x is cycle_lock's, not cycle's
    internal = re.compile(r"\b__(%s)_[a-z0-9_]+" % "|".join(sorted(ROLES, key=len, reverse=True)))
    for path in list((ROOT / "roles").rglob("*.yml")) + list((ROOT / "playbooks").rglob("*.yml")):
        parts = path.relative_to(ROOT).parts
        owner = parts[1] if parts[0] == "roles" else None
        for match in internal.finditer(path.read_text()):
            assert match.group(1) == owner, "%s reads %s, an internal fact of the %s role" % (path, match.group(0), match.group(1))
