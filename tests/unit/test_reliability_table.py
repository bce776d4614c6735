"""The reliability table's merge and rendering (tests/integration/reliability.py): pure functions."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from reliability import merge, render

ROW = {"fault": "f", "injected": "i", "did": "d|x", "service_after": "active", "data_kept": "-", "detect_s": 1.234, "run_s": None}


def row(test: str, **kw: object) -> dict:
    return dict(ROW, test=test, **kw)


def test_merge_replaces_the_rows_of_the_tests_that_ran_and_keeps_the_others(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\ndef test_two(p):\n    pass\n")
    kept = [row("test_a.py::test_one", did="old"), row("test_a.py::test_two[x]"), row("test_a.py::test_gone")]
    new = [row("test_a.py::test_one", did="new")]
    merged = merge(kept, new, {"test_a.py::test_one"}, tmp_path)
    assert [(r["test"], r["did"]) for r in merged] == [("test_a.py::test_two[x]", "d|x"), ("test_a.py::test_one", "new")]


def test_a_test_that_ran_and_failed_loses_its_row(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n")
    assert merge([row("test_a.py::test_one")], [], {"test_a.py::test_one"}, tmp_path) == []


def test_render_escapes_cells_and_says_when_rows_are_missing():
    text = render([row("test_a.py::test_one")], complete=False)
    assert "| **f** (i) | d\\|x | active | - | 1.23 s | - | - | `test_a.py::test_one` |" in text
    seen = dict(row("test_a.py::test_two"), site={"total": 9, "health": {"200": 4, "503": 1}, "request": {"refused": 2, "200": 1},
                                                   "scrape": {"200": 1}, "answers": {"4": 1}})
    assert "| health 200 x4 503 x1; request 200 x1 refused x2; scrape 200 x1 | `test_a.py::test_two` |" in render([seen], True)
    assert "their rows are missing" in text
    assert "their rows are missing" not in render([row("test_a.py::test_one")], complete=True)
