"""The suite's own timings, from the run itself: the stage times `./tasks test` wrote (results/suite/stages.jsonl)
and each case's time from the junit files of its pytest stages. Adds the run to docs/suite-timings.json under a
label and renders the generated section of docs/timings.md (between its two markers).

    CI=true ./tasks test                                                 # writes results/suite/
    .venv/bin/python bench/suite_timings.py --label "idle 1" --load idle  # adds the run, renders the table, and
                                                                         # writes tests/integration/case_times.json
    .venv/bin/python bench/suite_timings.py --label "stress 1" --load stress   # a run beside `stress-ng --cpu 2`
    .venv/bin/python bench/suite_timings.py --failures   # the failed cases and why (./tasks test prints it last)
"""

from __future__ import annotations

import argparse
import json
import platform
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- suite-timings:begin (bench/suite_timings.py) -->", "<!-- suite-timings:end -->"
STAGES = ["setup: apt", "setup: venv", "setup: collections", "setup: llama-server and model", "setup: lab image", "lint", "sanity", "unit",
          "setup: ee", "integration", "setup: vllm", "vllm", "molecule default", "molecule faults", "molecule fleet", "fleet",
          "total"]


SHOWN = 3  # the runs the table shows, the newest; the data file keeps every run
LOADED_SHOWN = 6  # the `whole suite` lines, the newest runs recorded with their load
# a side stage's wrapper around the stages it runs (`side_start` in tasks): its time is theirs, shown once
WRAPPERS = {"molecule", "vllm and fleet", "molecule default and fleet"}


def case_name(xml: Path, case: ET.Element) -> str:
    """A case as the tables name it: its stage (the junit file), its module and its test."""
    return f"{xml.stem}: {case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"


def read_run(suite: Path) -> dict[str, Any]:
    """One run: its stages (seconds) and every case's time (seconds) from the junit files."""
    stages: dict[str, float] = {}
    for line in (suite / "stages.jsonl").read_text().splitlines():
        row = json.loads(line)
        stages[row["stage"]] = float(row["s"])
    cases: list[tuple[str, float]] = []
    for xml in sorted(suite.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            cases.append((case_name(xml, case), float(case.get("time", 0))))
    cases.sort(key=lambda kv: -kv[1])
    return {"stages": stages, "slowest": cases[:10], "cases": len(cases), **cpu_use(suite / "cpu.log")}


def cpu_use(log: Path) -> dict[str, float]:
    """The machine's busy CPU-seconds through the run and their share of all its cores' time, from the /proc/stat
    samples ./tasks test took (`epoch cpu user nice system idle iowait irq softirq steal ...`); {} without two."""
    rows = []
    for line in log.read_text().splitlines() if log.exists() else []:
        fields = line.split()
        if len(fields) >= 9 and fields[1] == "cpu":
            ticks = [int(f) for f in fields[2:10]]
            rows.append((sum(ticks), ticks[3] + ticks[4]))  # all, idle + iowait
    if len(rows) < 2:
        return {}
    total, idle = rows[-1][0] - rows[0][0], rows[-1][1] - rows[0][1]
    hz = 100  # USER_HZ: /proc/stat counts in 1/100 s on Linux
    return {"cpu_s": round((total - idle) / hz), "busy_pct": round(100 * (total - idle) / total) if total else 0}


def case_times(suite: Path) -> dict[str, float]:
    """Each lab case's time in the parallel stage (molecule `faults`, its junit file), named as
    tests/integration/conftest.py's test_id names a case (`test_faults.py::test_x[param]`): the order
    tests/integration/schedule.py starts the next run's cases in.
    pytest-xdist's loadgroup names a case of an xdist_group `test_x[param]@group` (xdist/remote.py): the group is cut off,
    after the parameters as loadgroup reads it (scheduler/loadgroup.py `_split_scope`)."""
    xml = suite / "molecule-faults.xml"
    return junit_case_times(xml) if xml.exists() else {}


def junit_case_times(xml: Path) -> dict[str, float]:
    """case_times from one junit file of the faults cases."""
    times: dict[str, float] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        if "@" in name.rpartition("]")[2]:
            name = name[:name.rindex("@")]
        times[f"{module}.py::{name}"] = round(float(case.get("time", 0)), 1)
    return dict(sorted(times.items()))


def red_cases(root: ET.Element) -> list[tuple[ET.Element, ET.Element]]:
    """Each failed or erroring case of one junit tree, with its failure or error element."""
    return [(case, bad) for case in root.iter("testcase") for bad in [*case.findall("failure"), *case.findall("error")]]


def write_case_times(path: Path, label: str, times: dict[str, float]) -> None:
    """The lab cases' times, under the run that made them (tests/integration/schedule.py reads them)."""
    path.write_text(json.dumps({"run": label, "cases": times}, indent=1) + "\n")


def failures(suite: Path, lines_each: int = 20) -> str:
    """Every failed or erroring case of the run's junit files, each with the end of its report: what ./tasks test
    prints last when it fails, so the tail of a CI log names the cases and why (a scenario's log is long)."""
    out: list[str] = []
    for xml in sorted(suite.glob("*.xml")):
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as exc:
            out.append(f"{xml.name}: unreadable junit ({exc}): the stage was killed before pytest finished it")
            continue
        for case, bad in red_cases(root):
            text = (bad.text or "").rstrip().splitlines()
            seconds = float(case.get("time") or 0)
            out.append(f"{bad.tag.upper()} {case_name(xml, case)} ({seconds:.0f} s): {bad.get('message', '')[:300]}")
            out += ["    " + line for line in text[-lines_each:]]
    return "\n".join(out)


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def render(runs: list[dict[str, Any]]) -> str:
    table = runs[-SHOWN:]
    known = [s for s in STAGES if any(s in r["stages"] for r in table)]
    # a stage this list does not know yet is shown too (before the total), never dropped
    other = sorted({s for r in table for s in r["stages"]} - set(STAGES) - WRAPPERS)
    shown = [s for s in known if s != "total"] + other + [s for s in known if s == "total"]
    lines = [BEGIN, "", f"The newest {min(len(runs), SHOWN)} of {len(runs)} runs (all of them: docs/suite-timings.json).", "",
             "| run | " + " | ".join(shown) + " |", "|" + "---|" * (len(shown) + 1)]
    for r in table:
        lines.append(f"| {r['label']} ({r['at']}, {r['node']}, {r['cases']} cases) | "
                     + " | ".join(fmt(r["stages"].get(s)) for s in shown) + " |")
    loaded = [r for r in runs if r.get("load")]
    if loaded:
        lines += ["", f"The newest {min(len(loaded), LOADED_SHOWN)} of {len(loaded)} runs on a fresh clone with warm caches "
                  "(`CI=true ./tasks test`), by what ran beside it:", ""]
        loaded = loaded[-LOADED_SHOWN:]
        lines += [f"- whole suite, {r['load']}: {r['stages']['total']:.0f} s ({r['label']}, {r['at']}"
                  + (f"; {r['cpu_s']} CPU-s, {r['busy_pct']} % of the cores busy" if "cpu_s" in r else "") + ")"
                  for r in loaded]
    for r in runs[-1:]:
        lines += ["", f"The ten slowest cases of the last run ({r['label']}):", "", "| case | time |", "|---|---|"]
        lines += [f"| `{name}` | {fmt(t)} |" for name, t in r["slowest"]]
    return "\n".join([*lines, "", END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", help="how the run was made, e.g. 'idle 1' or 'stress-ng --cpu 2, 1'")
    parser.add_argument("--load", choices=["idle", "stress"],
                        help="what ran beside it: nothing (idle) or `stress-ng --cpu 2` (stress)")
    parser.add_argument("--failures", action="store_true", help="print the run's failed cases and the end of each report")
    parser.add_argument("--suite", type=Path, default=ROOT / "results/suite")
    parser.add_argument("--data", type=Path, default=ROOT / "docs/suite-timings.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs/timings.md")
    parser.add_argument("--case-times", type=Path, default=ROOT / "tests/integration/case_times.json",
                        help="where the lab cases' times go (the next parallel run starts the longest first)")
    parser.add_argument("--faults-junit", type=Path,
                        help="write only the case times, from this junit file of the faults cases run alone (a green "
                             "pytest -n N --dist loadgroup --junitxml over molecule faults' files), under --label")
    args = parser.parse_args()
    if args.faults_junit:
        if not args.label:
            parser.error("--faults-junit needs --label (how the run was made)")
        try:
            root = ET.parse(args.faults_junit).getroot()
        except (OSError, ET.ParseError) as exc:
            raise SystemExit(f"suite_timings: cannot read {args.faults_junit} ({exc}): give the junit file of a finished run") from None
        red = sorted({case.get("name", "") for case, _ in red_cases(root)})
        if red:
            raise SystemExit(f"suite_timings: {args.faults_junit} is not a green run: {len(red)} case(s) failed, e.g. {red[0]}")
        times = junit_case_times(args.faults_junit)
        if not times:
            raise SystemExit(f"suite_timings: no case in {args.faults_junit}")
        write_case_times(args.case_times, args.label, times)
        print(f"suite_timings: {len(times)} case times written to {args.case_times}")
        return
    if args.failures:
        text = failures(args.suite)
        print(text or f"suite_timings: no failed case in {args.suite}/*.xml (a stage failed outside pytest: see above)")
        return
    if not args.label:
        parser.error("--label is required (how the run was made), unless --failures")
    if not (args.suite / "stages.jsonl").exists():
        raise SystemExit(f"suite_timings: no {args.suite}/stages.jsonl: run ./tasks test first")
    run = read_run(args.suite)
    if "total" not in run["stages"]:
        raise SystemExit(f"suite_timings: {args.suite}/stages.jsonl has no total: the run did not finish green")
    runs = json.loads(args.data.read_text()) if args.data.exists() else []
    runs = [r for r in runs if r["label"] != args.label]
    at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: UP017
    runs.append(dict(run, label=args.label, **({"load": args.load} if args.load else {}), node=platform.node(), at=at))
    args.data.write_text(json.dumps(runs, indent=1) + "\n")
    doc = args.doc.read_text()
    section = render(runs)
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + section + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n## The suite, stage by stage (generated)\n\n" + section + "\n"
    args.doc.write_text(doc)
    times = case_times(args.suite)
    if times:  # a run without molecule faults (no times) keeps the last file
        write_case_times(args.case_times, args.label, times)
    print(section)


if __name__ == "__main__":
    main()
