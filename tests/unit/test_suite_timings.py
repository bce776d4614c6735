"""bench/suite_timings.py: the suite's timings read from the run's own files (stage log, junit) and rendered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from suite_timings import BEGIN, END, SHOWN, cpu_use, failures, read_run, render

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{}</testsuite></testsuites>"""


def suite(tmp: Path, stages: dict[str, float], cases: dict[str, float]) -> Path:
    (tmp / "stages.jsonl").write_text("".join(json.dumps({"stage": k, "s": v}) + "\n" for k, v in stages.items()))
    rows = "".join(f'<testcase classname="tests.integration.test_x" name="{n}" time="{t}"/>' for n, t in cases.items())
    (tmp / "molecule-faults.xml").write_text(JUNIT.format(rows))
    return tmp


def test_the_slowest_cases_come_from_the_junit_files_slowest_first_ten_at_most(tmp_path):
    run = read_run(suite(tmp_path, {"lint": 30.5, "total": 600}, {f"test_{i}": float(i) for i in range(14)}))
    assert run["stages"] == {"lint": 30.5, "total": 600.0} and run["cases"] == 14
    assert [t for _n, t in run["slowest"]] == [13.0, 12.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
    assert run["slowest"][0][0] == "molecule-faults: test_x::test_13"


def test_render_shows_each_run_and_a_stage_it_lacks_as_a_dash():
    runs = [{"label": "idle 1", "at": "t", "node": "n", "cases": 2, "stages": {"lint": 30, "total": 900}, "slowest": [("a", 200.0)]},
            {"label": "busy 1", "at": "t", "node": "n", "cases": 2, "stages": {"total": 1500}, "slowest": [("b", 5.0)]}]
    text = render(runs)
    assert text.startswith(BEGIN) and text.endswith(END)
    assert "| idle 1 (t, n, 2 cases) | 30 s | 900 s (15.0 min) |" in text
    assert "| busy 1 (t, n, 2 cases) | - | 1500 s (25.0 min) |" in text
    assert "The ten slowest cases of the last run (busy 1)" in text and "| `b` | 5 s |" in text


def test_the_cpu_of_a_run_is_read_from_its_proc_stat_samples_and_each_whole_run_says_its_load(tmp_path):
    log = tmp_path / "cpu.log"
    # two cores for 10 s = 2000 ticks: 1500 busy (user, nice, system, irq, softirq, steal), 500 idle or waiting on IO
    log.write_text("100 cpu 1000 0 500 8000 100 0 0 0 0 0\n"
                   "105 cpu 1400 50 700 8200 150 0 0 0 0 0\n"   # a sample between: only the ends count
                   "110 cpu 1600 100 1000 8400 200 100 100 100 0 0\n")
    assert cpu_use(log) == {"cpu_s": 15, "busy_pct": 75}
    assert cpu_use(tmp_path / "none.log") == {}
    log.write_text("100 cpu 1 2 3 4 5 6 7 8 0 0\n")  # one sample: nothing to measure
    assert cpu_use(log) == {}
    runs = [{"label": "idle 1", "load": "idle", "at": "t1", "node": "n", "cases": 2, "stages": {"total": 1700.4},
             "slowest": [], "cpu_s": 3100, "busy_pct": 91},
            {"label": "old", "at": "t0", "node": "n", "cases": 2, "stages": {"total": 2184}, "slowest": []},
            {"label": "stress 1", "load": "stress", "at": "t2", "node": "n", "cases": 2, "stages": {"total": 2500}, "slowest": []}]
    text = render(runs)
    assert "- whole suite, idle: 1700 s (idle 1, t1; 3100 CPU-s, 91 % of the cores busy)" in text
    assert "- whole suite, stress: 2500 s (stress 1, t2)" in text
    assert "whole suite, idle: 2184" not in text  # a run recorded without its load is in the table only
    more = [dict(runs[0], label="idle %d" % i, stages={"total": 1000 + i}) for i in range(2, 8)]
    text = render(runs + more)
    assert "The newest 6 of 8 runs" in text and "(idle 7, t1;" in text and "(idle 2, t1;" in text
    assert "(idle 1, t1;" not in text and "(stress 1, t2)" not in text  # older lines: in docs/suite-timings.json only


def test_a_side_stages_wrapper_is_not_a_column_of_its_own():
    runs = [{"label": "r", "at": "t", "node": "n", "cases": 1, "slowest": [],
             "stages": {"unit": 190, "molecule default": 78, "molecule": 78, "vllm": 488, "vllm and fleet": 488, "total": 900}}]
    header = render(runs).split("| run |")[1].splitlines()[0]
    assert header == " unit | vllm | molecule default | total |", header


def test_a_stage_the_list_does_not_know_is_shown_before_the_total_not_dropped():
    runs = [{"label": "new", "at": "t", "node": "n", "cases": 1, "stages": {"lint": 30, "sanity": 60, "docs build": 12,
                                                                              "total": 102}, "slowest": []}]
    text = render(runs)
    assert "| run | lint | sanity | docs build | total |" in text
    assert "| new (t, n, 1 cases) | 30 s | 60 s | 12 s | 102 s |" in text


def test_a_run_that_did_not_finish_is_refused_and_the_doc_untouched(tmp_path):
    doc = tmp_path / "timings.md"
    doc.write_text("# Timings\n")
    suite(tmp_path, {"lint": 1}, {"t": 1})
    proc = subprocess.run([sys.executable, str(ROOT / "bench/suite_timings.py"), "--label", "x", "--suite", str(tmp_path),
                           "--data", str(tmp_path / "d.json"), "--doc", str(doc)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "has no total" in proc.stderr
    assert doc.read_text() == "# Timings\n" and not (tmp_path / "d.json").exists()


def test_a_run_is_added_under_its_label_and_the_section_replaced_in_place(tmp_path):
    doc = tmp_path / "timings.md"
    doc.write_text(f"# Timings\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    suite(tmp_path, {"lint": 1, "total": 100}, {"t": 1})
    for _ in range(2):  # the same label twice: one row
        subprocess.run([sys.executable, str(ROOT / "bench/suite_timings.py"), "--label", "idle 1", "--suite", str(tmp_path),
                        "--data", str(tmp_path / "d.json"), "--doc", str(doc), "--case-times", str(tmp_path / "times.json")],
                       capture_output=True, text=True, check=True)
    text = doc.read_text()
    assert text.startswith("# Timings\n\nbefore\n\n" + BEGIN) and text.endswith(END + "\n\nafter\n") and "old" not in text
    assert len(json.loads((tmp_path / "d.json").read_text())) == 1
    # and the lab cases' times, for the next parallel run's order (tests/integration/schedule.py)
    assert json.loads((tmp_path / "times.json").read_text()) == {"run": "idle 1", "cases": {"test_x.py::t": 1.0}}


def test_failures_names_each_failed_case_with_the_end_of_its_report_and_a_killed_stage(tmp_path):
    rows = ('<testcase classname="tests.integration.test_faults" name="test_ok" time="3"/>'
            '<testcase classname="tests.integration.test_faults" name="test_bad" time="61.4">'
            '<failure message="AssertionError: rc 2">' + "\n".join(f"line {i}" for i in range(30)) + "</failure></testcase>"
            '<testcase classname="tests.integration.test_release" name="test_err" time="1">'
            '<error message="fixture">boom</error></testcase>')
    (tmp_path / "molecule-faults.xml").write_text(JUNIT.format(rows))
    (tmp_path / "unit.xml").write_text("<testsuites><testsuite")  # a stage killed mid-write
    text = failures(tmp_path)
    assert "FAILURE molecule-faults: test_faults::test_bad (61 s): AssertionError: rc 2" in text
    assert "    line 29" in text and "    line 10" in text and "line 9\n" not in text  # the last 20 lines of its report
    assert "ERROR molecule-faults: test_release::test_err (1 s): fixture\n    boom" in text
    assert "test_ok" not in text
    assert "unit.xml: unreadable junit" in text


def test_failures_of_a_green_run_is_empty_and_the_command_says_where_to_look(tmp_path):
    suite(tmp_path, {"lint": 1}, {"test_a": 1.0})
    assert failures(tmp_path) == ""
    out = subprocess.run([sys.executable, str(ROOT / "bench/suite_timings.py"), "--suite", str(tmp_path), "--failures"],
                         capture_output=True, text=True, check=True).stdout
    assert "no failed case" in out


def faults_junit(tmp: Path, rows: str) -> subprocess.CompletedProcess[str]:
    (tmp / "faults.xml").write_text(JUNIT.format(rows))
    return subprocess.run([sys.executable, str(ROOT / "bench/suite_timings.py"), "--faults-junit", str(tmp / "faults.xml"),
                           "--label", "alone, 3 workers", "--case-times", str(tmp / "case_times.json")],
                          capture_output=True, text=True, check=False)


def test_the_faults_cases_run_alone_give_the_case_times_a_group_cut_off(tmp_path):
    proc = faults_junit(tmp_path, '<testcase classname="tests.integration.test_x" name="test_a[p]@oom" time="12.34"/>'
                                  '<testcase classname="tests.integration.test_y" name="test_b" time="3"/>')
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "case_times.json").read_text()) == {
        "run": "alone, 3 workers", "cases": {"test_x.py::test_a[p]": 12.3, "test_y.py::test_b": 3.0}}


def test_a_faults_junit_with_a_failed_case_writes_no_case_times(tmp_path):
    proc = faults_junit(tmp_path, '<testcase classname="tests.integration.test_x" name="test_a" time="1">'
                                  '<failure message="boom"/></testcase>')
    assert proc.returncode != 0 and "not a green run" in proc.stderr and "test_a" in proc.stderr
    assert not (tmp_path / "case_times.json").exists()


def test_the_table_shows_the_newest_runs_and_their_stages_only():
    runs = [{"label": f"run {i}", "at": "t", "node": "n", "cases": 1, "stages": {f"old stage {i}": 1, "total": 100 + i},
             "slowest": []} for i in range(6)]
    text = render(runs)
    first = len(runs) - SHOWN  # the oldest run the table shows
    assert f"The newest {SHOWN} of 6 runs" in text and 0 < first
    assert all(f"run {i} " not in text for i in range(first)) and "| run 5 (t, n, 1 cases)" in text
    assert f"old stage {first - 1}" not in text and f"old stage {first}" in text
