"""The parallel lab cases start longest first (tests/integration/schedule.py), from the times bench/suite_timings.py
recorded of the last green run's molecule stages."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))
from schedule import load_times, longest_first
from suite_timings import case_times


def test_longest_first_with_new_cases_at_the_median_and_ties_in_collection_order():
    keys = ["a.py::short", "a.py::new", "b.py::long", "b.py::tie1", "b.py::tie2", "c.py::mid"]
    times = {"a.py::short": 5.0, "b.py::long": 300.0, "b.py::tie1": 40.0, "b.py::tie2": 40.0, "c.py::mid": 100.0}
    # median of 5, 40, 40, 100, 300 is 40: the new case ties with tie1 and tie2 and keeps its place before them
    assert [keys[i] for i in longest_first(keys, times)] == ["b.py::long", "c.py::mid", "a.py::new", "b.py::tie1",
                                                            "b.py::tie2", "a.py::short"]


def test_a_group_stays_together_in_collection_order_and_starts_by_its_total():
    keys = ["e.py::warm", "a.py::long", "e.py::hung", "b.py::mid", "e.py::stop", "c.py::short"]
    times = {"e.py::warm": 40.0, "a.py::long": 200.0, "e.py::hung": 100.0, "b.py::mid": 150.0, "e.py::stop": 90.0,
             "c.py::short": 10.0}
    groups = {0: "engines", 2: "engines", 4: "engines"}
    # the group's 230 s comes before the 200 s case; inside it, the file's order (each case reuses the one before)
    assert [keys[i] for i in longest_first(keys, times, groups)] == ["e.py::warm", "e.py::hung", "e.py::stop", "a.py::long",
                                                                    "b.py::mid", "c.py::short"]
    # two groups, each kept whole; with no group the plain order
    two = {0: "g1", 1: "g2", 2: "g1", 3: "g2"}
    assert [keys[i] for i in longest_first(keys, times, two)] == ["a.py::long", "b.py::mid", "e.py::warm", "e.py::hung",
                                                                 "e.py::stop", "c.py::short"]  # 350 s, 140 s, 90 s, 10 s
    assert longest_first(keys, times, {}) == longest_first(keys, times)


def test_no_times_keeps_the_collection_order():
    keys = ["x.py::one", "x.py::two", "y.py::three"]
    assert longest_first(keys, {}) == [0, 1, 2]


def test_a_missing_or_malformed_file_gives_no_times(tmp_path):
    assert load_times(tmp_path / "absent.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert load_times(bad) == {}
    bad.write_text("{not json")
    assert load_times(bad) == {}
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"cases": {"a.py::x": 3, "a.py::y": "slow", "a.py::z": -1}}))
    assert load_times(mixed) == {"a.py::x": 3.0}


def test_the_times_written_from_a_runs_junit_are_the_ones_the_order_reads(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    root = ET.Element("testsuites")
    cases = ET.SubElement(root, "testsuite")
    ET.SubElement(cases, "testcase", classname="tests.integration.test_faults", name="test_drain[force]", time="190.26")
    ET.SubElement(cases, "testcase", classname="tests.integration.test_release", name="test_pause", time="20.0")
    # a case of an xdist_group, as loadgroup names it; and a parameter that holds an @ itself
    ET.SubElement(cases, "testcase", classname="tests.integration.test_faults", name="test_oom@kernel_oom_counter", time="61")
    ET.SubElement(cases, "testcase", classname="tests.integration.test_faults", name="test_kill[user@host]@grp", time="7")
    ET.SubElement(cases, "testcase", classname="tests.integration.test_faults", name="test_mail[a@b]", time="8")
    ET.ElementTree(root).write(suite / "molecule-faults.xml")
    ET.ElementTree(root).write(suite / "unit.xml")  # not the parallel lab stage: not recorded
    ET.ElementTree(root).write(suite / "molecule-default.xml")  # nor the serial default scenario
    times = case_times(suite)
    assert times == {"test_faults.py::test_drain[force]": 190.3, "test_release.py::test_pause": 20.0,
                     "test_faults.py::test_oom": 61.0, "test_faults.py::test_kill[user@host]": 7.0,
                     "test_faults.py::test_mail[a@b]": 8.0}
    out = tmp_path / "case_times.json"
    out.write_text(json.dumps({"run": "x", "cases": times}))
    assert load_times(out)["test_faults.py::test_drain[force]"] == 190.3  # as conftest.test_id names the case
