"""The fault suite's parallel run relies on pytest-xdist's loadgroup: cases marked with one xdist_group run on one
worker, one after the other (test_faults.py: the two cases that read the kernel-wide OOM counter). With pytest 9.2 and
xdist 3.8 the marks are silently ignored (pytest-dev/pytest-xdist#1386) and those cases ran side by side, one
misreading the other's OOM kill. This runs the pinned pytest and xdist on a suite of their own and fails if a group is
split across workers."""

from __future__ import annotations

import re
import subprocess
import sys

CASES = '''
import os
import time

import pytest

GROUP = pytest.mark.xdist_group("shared_counter")


@pytest.mark.parametrize("i", range(4))
@GROUP
def test_grouped(i):
    time.sleep(0.2)


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    time.sleep(0.2)
'''


def test_cases_of_one_xdist_group_run_on_one_worker(tmp_path):
    (tmp_path / "test_groups.py").write_text(CASES)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider",
                          "-p", "no:randomly", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         check=False).stdout
    ran = re.findall(r"^\[(gw\d+)\] \[ *\d+%\] PASSED \S*::(test_\w+)\[\d+\]", out, re.MULTILINE)
    assert len(ran) == 10, out
    workers = {gw for gw, name in ran if name == "test_grouped"}
    assert len(workers) == 1, "the group ran on %s, not one worker (pytest-dev/pytest-xdist#1386):\n%s" % (workers, out)
