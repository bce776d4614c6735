"""bench/path_map.py: every lab case names the one path through the cycle it walks (an id bench/paths.yml defines),
and whether it needs the lab or checks a decision; docs/paths.md is what the tests say (issue #45, item 2)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import path_map


def test_every_lab_case_has_exactly_one_path_marker_with_real_or_decision():
    cases, problems = path_map.read_cases()
    assert problems == []
    assert len(cases) >= 50  # tests/integration/test_*.py: a glob that found nothing would pass vacuously
    assert all(c.kind in ("real", "decision") and c.what for c in cases)


def test_every_path_id_a_case_names_is_one_the_map_defines():
    cases, _problems = path_map.read_cases()
    assert path_map.unknown_ids(cases, path_map.load_paths()) == []


def test_docs_paths_md_is_current():
    text, problems = path_map.build()
    assert problems == []
    assert (ROOT / "docs/paths.md").read_text() == text, "docs/paths.md is stale: run python3 bench/path_map.py"


def test_every_fault_of_the_reliability_table_is_covered_by_a_marked_case():
    text, _problems = path_map.build()
    rows = json.loads((ROOT / "docs/reliability.json").read_text())
    assert "no lab case of that name" not in text
    faults = text.split("## Faults", 1)[1].split("## Merge", 1)[0]
    assert faults.count("| real: the lab case") + faults.count("| decision: a row of") == len(rows)


CASES = '''
import pytest
import yaml

@pytest.mark.path("stop.ready", real="systemd")
def test_marked():
    pass

def test_unmarked():
    pass

@pytest.mark.path("stop.ready", real="x")
@pytest.mark.path("beside.ready", decision="bc_strategy.choose")
def test_twice():
    pass

@pytest.mark.path("no.such.path", decision="bc_health.classify")
def test_unknown_id():
    pass

@pytest.mark.path("stop.ready", real="systemd", decision="bc_bringback.plan")
def test_both_kinds():
    pass

@pytest.mark.parametrize("policy", ["abort", "force"])
@pytest.mark.path({"abort": "drain.aborted", "force": "stop.drain_forced.ready"}, real="a clock")
def test_by_param(policy):
    pass

@pytest.mark.parametrize("policy", ["abort", "force"])
@pytest.mark.path({"abort": "drain.aborted"}, real="a clock")
def test_a_param_left_out(policy):
    pass
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the map's inputs with a test file of its own (real files: the generator reads a tree)."""
    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench/paths.yml", tmp_path / "bench/paths.yml")
    (tmp_path / "tests/integration").mkdir(parents=True)
    (tmp_path / "tests/integration/test_sample.py").write_text(CASES)
    (tmp_path / "tests/integration/case_times.json").write_text(json.dumps({"cases": {
        "test_sample.py::test_marked": 10.0, "test_sample.py::test_by_param[abort]": 30.0,
        "test_sample.py::test_by_param[force]": 50.0}}))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/reliability.json").write_text(json.dumps([
        {"fault": "forced drain", "test": "test_sample.py::test_by_param[force]"},
        {"fault": "gone", "test": "test_sample.py::test_removed"}]))
    return tmp_path


@pytest.mark.parametrize(("case", "says"), [
    ("test_unmarked", "0 path markers; give exactly one"),
    ("test_twice", "2 path markers; give exactly one"),
    ("test_both_kinds", "exactly one of real="),
    ("test_a_param_left_out", "parameters ['abort'] are not the case's ['abort', 'force']"),
    ("test_unknown_id", "path 'no.such.path' is not defined in bench/paths.yml"),
])
def test_a_case_without_one_known_path_is_named_with_the_fix(tree: Path, case: str, says: str):
    _text, problems = path_map.build(tree)
    mine = [p for p in problems if p.startswith(f"test_sample.py::{case}:")]
    assert len(mine) == 1 and says in mine[0], problems


def test_the_map_puts_each_parameter_on_its_path_with_its_time_and_names_a_missing_case(tree: Path):
    text, _problems = path_map.build(tree)
    forced = next(ln for ln in text.splitlines() if ln.startswith("| `stop.drain_forced.ready`"))
    assert "`test_sample.py::test_by_param[force]` (50 s)" in forced and "[abort]" not in forced
    assert "| forced drain | `test_sample.py::test_by_param[force]` | `stop.drain_forced.ready` | real:" in text
    assert "| gone | `test_sample.py::test_removed` | - | **no lab case of that name** |" in text


def test_check_fails_on_a_stale_map_and_passes_on_a_current_one(tmp_path: Path):
    out = tmp_path / "paths.md"
    assert path_map.main(["--check", "--out", str(out)]) == 1  # missing
    out.write_text("stale\n")
    assert path_map.main(["--check", "--out", str(out)]) == 1
    assert path_map.main(["--out", str(out)]) == 0
    assert path_map.main(["--check", "--out", str(out)]) == 0


@pytest.mark.parametrize(("entry", "problem"), [
    ({"decision": "bc_health.classify", "path": "stop.ready", "rows": ["tests/unit/test_health.py::test_no_such_test"]},
     "no unit test tests/unit/test_health.py::test_no_such_test"),
    ({"decision": "bc_health.classify", "rows": ["tests/unit/test_health.py::test_refused_without_a_unit_is_down"]},
     "needs a decision, a path and its rows"),
    ({"decision": "bc_health.classify", "path": "stop.ready", "rows": ["tests/unit/test_health.py::test_refused_without_a_unit_is_down"]},
     ""),
])
def test_a_removed_case_names_the_unit_rows_that_cover_it(tmp_path, entry, problem):
    rows = tmp_path / "decision_rows.yml"
    rows.write_text(yaml.safe_dump({"test_x.py::test_gone": entry}))
    _data, problems = path_map.load_rows(rows, ROOT)
    assert (problems == []) if not problem else any(problem in p for p in problems), problems
