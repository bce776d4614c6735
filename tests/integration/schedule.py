"""The order the lab cases start in when they run in parallel (pytest-xdist, one lab host per worker): the longest
first, by each case's time in the last green run (tests/integration/case_times.json, written by
bench/suite_timings.py). Started in collection order, a long case that comes last runs alone at the end while the other
workers idle: on two cores the stage is as long as its CPU plus that tail. Longest first (LPT) leaves the short ones
to fill in at the end. A case with no time yet (a new one) counts as the median case."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

TIMES = Path(__file__).with_name("case_times.json")


def load_times(path: Path = TIMES) -> dict[str, float]:
    """The recorded times, each case named as conftest.test_id names it (`test_faults.py::test_x[param]`); none (an
    empty map) where the file is missing or is not a map of numbers."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.get("cases", {}).items() if isinstance(v, (int, float)) and v >= 0}


def longest_first(keys: list[str], times: dict[str, float]) -> list[int]:
    """The indices of `keys` in start order: by recorded time, longest first, a case with none at the median; ties
    keep their collection order (the sort is stable), so every worker computes the same order from the same file."""
    unknown = statistics.median(times.values()) if times else 0.0
    return sorted(range(len(keys)), key=lambda i: -times.get(keys[i], unknown))
