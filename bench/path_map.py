#!/usr/bin/env python3
"""The map of paths through the cycle (issue #45, item 2): docs/paths.md, generated from the lab cases' markers.

Each lab case (a top-level `test_*` function of tests/integration/test_*.py) carries one marker,
`@pytest.mark.path("<id>", real="...")` or `@pytest.mark.path("<id>", decision="module.function")`: the path it
walks (the ids and what they are: bench/paths.yml, the one place they are defined) and whether what it checks needs
the host's real behaviour or is a decision of a pure function that a table test's row could cover. A parametrized
case whose parameters walk different paths gives a dict, parameter id -> path id. The markers are read with `ast`,
never by importing the tests. The times are tests/integration/case_times.json's; the faults docs/reliability.json's.

    python3 bench/path_map.py           # writes docs/paths.md
    python3 bench/path_map.py --check   # exit 1 when docs/paths.md is not what the tests say (./tasks lint)
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PATHS = ROOT / "bench" / "paths.yml"
TESTS = ROOT / "tests" / "integration"
TIMES = TESTS / "case_times.json"
FAULTS = ROOT / "docs" / "reliability.json"
ROWS = ROOT / "bench" / "decision_rows.yml"
OUT = ROOT / "docs" / "paths.md"
KINDS = ("real", "decision")


@dataclass
class Case:
    """One lab case: its file and function, the path(s) it walks, and what it needs (kind: real or decision)."""

    file: str
    name: str
    path: str | dict[str, str] = ""
    kind: str = ""
    what: str = ""
    params: list[str] = field(default_factory=list)

    @property
    def test(self) -> str:
        return f"{self.file}::{self.name}"

    def path_of(self, param: str = "") -> str:
        """The path id this case (or one of its parameters) walks."""
        if isinstance(self.path, dict):
            return self.path.get(param.split("-", maxsplit=1)[0], "")
        return self.path


def load_paths(source: Path = PATHS) -> dict[str, dict[str, str]]:
    """The path ids, in their order, with `what` and `steps`; a malformed entry is a ValueError naming it."""
    data = yaml.safe_load(source.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a mapping of path id -> {{what, steps}} is expected")
    for pid, entry in data.items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry[k] for k in ("what", "steps")):
            raise ValueError(f"{source}: path {pid!r} needs a `what` and a `steps` text")
    return data


def _is_marker(node: ast.expr, name: str) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    return (isinstance(func, ast.Attribute) and func.attr == name and isinstance(func.value, ast.Attribute)
            and func.value.attr == "mark")


def _param_ids(decorators: list[ast.expr]) -> list[str]:
    """The ids of a literal @pytest.mark.parametrize (its ids=, else its string values); [] when not literal."""
    for node in decorators:
        if isinstance(node, ast.Call) and _is_marker(node, "parametrize") and len(node.args) >= 2:
            try:
                ids = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "ids"), None)
                values = ast.literal_eval(node.args[1])
            except ValueError:
                return []
            ids = ids if ids is not None else values
            return [str(i) for i in ids] if all(isinstance(i, str) for i in ids) else []
    return []


def _read_marker(case: Case, node: ast.Call) -> list[str]:
    problems = []
    try:
        case.path = ast.literal_eval(node.args[0]) if node.args else ""
        given = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
        return [f"{case.test}: the path marker's arguments must be literals"]
    kinds = [k for k in KINDS if given.get(k)]
    if len(kinds) != 1 or set(given) - set(KINDS):
        problems.append(f"{case.test}: give the path marker exactly one of real=\"<what it needs>\" or "
                        f"decision=\"<module.function>\" (given: {', '.join(sorted(given)) or 'none'})")
    else:
        case.kind, case.what = kinds[0], str(given[kinds[0]])
    ok_dict = isinstance(case.path, dict) and all(isinstance(v, str) for v in case.path.values())
    if not (isinstance(case.path, str) and case.path) and not ok_dict:
        problems.append(f"{case.test}: the path marker's first argument is a path id, or a dict parameter id -> path id")
    elif isinstance(case.path, dict) and set(case.path) != set(case.params):
        problems.append(f"{case.test}: the path marker's parameters {sorted(case.path)} are not the case's {case.params}")
    return problems


def read_cases(tests: Path = TESTS) -> tuple[list[Case], list[str]]:
    """Every lab case with its marker, and the problems found (a case with no path marker, or two)."""
    cases, problems = [], []
    for source in sorted(tests.glob("test_*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test_"):
                continue
            case = Case(source.name, node.name, params=_param_ids(node.decorator_list))
            marks = [d for d in node.decorator_list if isinstance(d, ast.Call) and _is_marker(d, "path")]
            if len(marks) != 1:
                problems.append(f"{case.test}: {len(marks)} path markers; give exactly one "
                                f"(@pytest.mark.path(\"<id>\", real=... or decision=...); the ids: bench/paths.yml)")
            else:
                problems += _read_marker(case, marks[0])
            cases.append(case)
    return cases, problems


def unknown_ids(cases: list[Case], paths: dict[str, Any]) -> list[str]:
    """The cases that name a path id bench/paths.yml does not define."""
    out = []
    for case in cases:
        named = case.path.values() if isinstance(case.path, dict) else [case.path] if case.path else []
        out += [f"{case.test}: path {p!r} is not defined in bench/paths.yml" for p in named if p not in paths]
    return out


def case_times(source: Path = TIMES) -> dict[str, float]:
    """Seconds per recorded case id (file::name[param])."""
    return {k: float(v) for k, v in json.loads(source.read_text()).get("cases", {}).items()} if source.exists() else {}


def time_of(case: Case, times: dict[str, float], param: str | None = None) -> float | None:
    """A case's recorded seconds (every parameter summed, or one parameter's); None when none was recorded."""
    found = [v for k, v in times.items() if k == case.test or (k.startswith(case.test + "[")
             and (param is None or k[len(case.test) + 1:-1].split("-")[0] == param))]
    return sum(found) if found else None


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _walks(cases: list[Case], pid: str) -> list[tuple[Case, str | None]]:
    """The cases (and the parameter, for a dict path) that walk `pid`."""
    out: list[tuple[Case, str | None]] = []
    for case in cases:
        if isinstance(case.path, dict):
            out += [(case, param) for param, p in case.path.items() if p == pid]
        elif case.path == pid:
            out.append((case, None))
    return out


def _named(case: Case, param: str | None, times: dict[str, float]) -> str:
    shown = case.test + (f"[{param}]" if param else "")
    return f"`{shown}` ({_secs(time_of(case, times, param))})"


def path_table(paths: dict[str, dict[str, str]], cases: list[Case], times: dict[str, float]) -> list[str]:
    lines = ["| path | what | steps | real lab case(s) | decision cases (rows of a table test instead) |", "|---|---|---|---|---|"]
    for pid, entry in paths.items():
        walks = _walks(cases, pid)
        real = "<br>".join(_named(c, p, times) for c, p in walks if c.kind == "real") or "**none**"
        rows = "<br>".join(f"{_named(c, p, times)}: `{c.what}`" for c, p in walks if c.kind == "decision") or "-"
        lines.append(f"| `{pid}` | {_cell(entry['what'])} | {_cell(entry['steps'])} | {real} | {rows} |")
    return lines


def load_rows(source: Path = ROWS, root: Path = ROOT) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The lab cases replaced by table rows (issue #45): removed case -> {decision, path, rows}; and the problems (an
    entry without them, or naming a unit test that does not exist)."""
    data = (yaml.safe_load(source.read_text()) or {}) if source.exists() else {}
    problems = []
    for name, entry in data.items():
        if not isinstance(entry, dict) or not all(entry.get(k) for k in ("decision", "path", "rows")):
            problems.append(f"{source.name}: {name} needs a decision, a path and its rows (tests/unit/<file>::<test>)")
            continue
        for row in entry["rows"]:
            file, _sep, test = str(row).partition("::")
            found = root / file
            if not (found.is_file() and f"def {test}(" in found.read_text()):
                problems.append(f"{source.name}: {name}: no unit test {row}")
    return data, problems


def fault_table(rows: list[dict[str, Any]], cases: list[Case], replaced: dict[str, dict[str, Any]] | None = None) -> list[str]:
    by_test = {c.test: c for c in cases}
    lines = ["| fault (docs/reliability.md) | lab case | path | covered by |", "|---|---|---|---|"]
    for row in rows:
        test = str(row.get("test", ""))
        name, _sep, param = test.partition("[")
        case = by_test.get(name)
        gone = (replaced or {}).get(name)
        if case is None and gone:
            units = "<br>".join(f"`{u}`" for u in gone["rows"])
            lines.append(f"| {_cell(str(row.get('fault', '?')))} | `{_cell(test)}` (removed) | `{gone['path']}` | "
                         f"decision: a row of `{gone['decision']}`'s table test: {units} |")
            continue
        if case is None:
            lines.append(f"| {_cell(str(row.get('fault', '?')))} | `{_cell(test)}` | - | **no lab case of that name** |")
            continue
        cover = (f"real: the lab case (it needs {_cell(case.what)})" if case.kind == "real"
                 else f"decision: a row of `{case.what}`'s table test")
        lines.append(f"| {_cell(str(row.get('fault', '?')))} | `{_cell(test)}` | `{case.path_of(param.rstrip(']'))}` | {cover} |")
    return lines


def proposals(paths: dict[str, Any], cases: list[Case], times: dict[str, float]) -> tuple[list[tuple], list[tuple]]:
    """(merges, rows): the paths walked by several real cases (ids, summed s, s a merge into one cycle saves), and the
    decision cases (id, function, s), largest first."""
    merges = []
    for pid in paths:
        real = [(c, p) for c, p in _walks(cases, pid) if c.kind == "real"]
        if len(real) > 1:
            secs = [time_of(c, times, p) or 0.0 for c, p in real]
            merges.append((pid, [c.test + (f"[{p}]" if p else "") for c, p in real], sum(secs), sum(secs) - max(secs)))
    rows = [(c.test, c.what, time_of(c, times) or 0.0) for c in cases if c.kind == "decision"]
    return sorted(merges, key=lambda m: (-m[3], m[0])), sorted(rows, key=lambda r: (-r[2], r[0]))


def render(paths: dict[str, dict[str, str]], cases: list[Case], times: dict[str, float], faults: list[dict[str, Any]],
           replaced: dict[str, dict[str, Any]] | None = None) -> str:
    merges, rows = proposals(paths, cases, times)
    real = sum(1 for c in cases if c.kind == "real")
    lines = [
        "# Paths through the cycle, and the lab cases that walk them",
        "",
        "Generated by `bench/path_map.py` from the lab cases' `@pytest.mark.path` markers (the ids: `bench/paths.yml`),",
        "`tests/integration/case_times.json` and `docs/reliability.json`; do not edit by hand. `./tasks lint` runs",
        "`bench/path_map.py --check`. Issue #45: a fault whose handling is a decision of a pure function is a row of that",
        "function's table test; the lab keeps one real cycle per distinct path, and the cases whose handling lives in the",
        "host's real behaviour (systemd, a real server, a signal, the process table, a lock race, a clock).",
        "",
        f"{len(cases)} lab cases: {real} need the lab (*real*), {len(cases) - real} check a decision a table row could cover.",
        "A time is the case's recorded run (`-`: none recorded; a parametrized case's parameters summed).",
        "",
        "## Paths", "",
        *path_table(paths, cases, times),
        "", "## Faults of docs/reliability.md, and what covers each", "",
        *fault_table(faults, cases, replaced),
        "", "## Merge proposals", "",
        "Paths walked by several real cases: one cycle could assert all they do (saves: their time but the longest's).", "",
        "| path | real cases | their time | a merge saves |", "|---|---|---|---|",
        *[f"| `{pid}` | {'<br>'.join(f'`{t}`' for t in tests)} | {total:.0f} s | {saved:.0f} s |"
          for pid, tests, total, saved in merges],
        "", "Cases that check a decision: a row of the function's table test instead (saves their time).", "",
        "| lab case | decision | time |", "|---|---|---|",
        *[f"| `{test}` | `{what}` | {secs:.0f} s |" for test, what, secs in rows],
        "",
    ]
    return "\n".join(lines)


def build(root: Path = ROOT) -> tuple[str, list[str]]:
    """docs/paths.md's text as the tree says it, and the problems that keep it from being written."""
    paths = load_paths(root / "bench" / "paths.yml")
    cases, problems = read_cases(root / "tests" / "integration")
    problems += unknown_ids(cases, paths)
    faults_file = root / "docs" / "reliability.json"
    faults = json.loads(faults_file.read_text()) if faults_file.exists() else []
    replaced, bad = load_rows(root / "bench" / "decision_rows.yml", root)
    problems += bad + [f"decision_rows.yml: {c.test} is still a lab case" for c in cases if c.test in replaced]
    times = case_times(root / "tests" / "integration" / "case_times.json")
    return render(paths, cases, times, faults, replaced), problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/paths.md is not current (writes nothing)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the map goes (default: docs/paths.md)")
    args = parser.parse_args(argv)
    try:
        text, problems = build()
    except (OSError, ValueError, SyntaxError, yaml.YAMLError) as err:
        print(f"path_map: {err}", file=sys.stderr)
        return 1
    if problems:
        print("path_map: the lab cases' path markers are not complete:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            print(f"path_map: {args.out} is stale: run python3 bench/path_map.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"path_map: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
