"""The controller's ansible-core is checked against the collection's own requires_ansible (meta/runtime.yml) at the
start of every run (bc_filters.core_problem): one statement of the supported versions, read, never copied."""

from __future__ import annotations

import pytest
from ansible.release import __version__ as running
from bc_filters import _requires_ansible, core_problem

RANGE = ">=2.19.0,<2.22.0"


@pytest.mark.parametrize(("version", "refused_with"), [
    ("2.19.0", None), ("2.19.4", None), ("2.20.1", None), ("2.21.5", None),
    ("2.21.0rc1", None),                       # a release candidate of a supported minor
    ("2.18.9", "ansible-core 2.18.9 is not supported: benchmark-cycle needs ansible-core >=2.19.0,<2.22.0"),
    ("2.22.0", "is not supported"),
    ("2.22.0b1", "is not supported"),
    ("", "cannot tell whether ansible-core ''"),          # absent: unknown, not fine
    ("devel", "cannot tell whether ansible-core 'devel'"),
])
def test_only_the_ansible_core_the_collection_claims_runs_the_cycle(version, refused_with):
    got = core_problem(version, RANGE)
    assert (refused_with in got) if refused_with else got == "", got


def test_a_range_that_cannot_be_read_refuses_every_version():
    assert "no range found" in core_problem("2.19.4", "")
    assert "cannot tell" in core_problem("2.19.4", "2.19 or newer")


def test_the_range_is_the_collections_own_and_admits_the_core_running_here():
    from packaging.specifiers import SpecifierSet
    assert len(SpecifierSet(_requires_ansible())) == 2  # a floor and a ceiling, read from meta/runtime.yml
    assert core_problem(running) == ""


def test_the_readme_states_every_minor_the_range_admits_and_no_other():
    """#44 item 5: the README tells operators the supported controllers; they are the minors requires_ansible admits."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    line = next(line for line in (root / "README.md").read_text().splitlines() if line.startswith("**Supported controllers:**"))
    stated = set(re.findall(r"\b2\.(\d+)\b", line))
    admitted = {str(minor) for minor in range(10, 40) if not core_problem("2.%d.0" % minor, _requires_ansible())}
    assert stated == admitted, (line, sorted(admitted))
