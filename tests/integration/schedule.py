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


def longest_first(keys: list[str], times: dict[str, float], groups: dict[int, str] | None = None) -> list[int]:
    """The indices of `keys` in start order: by recorded time, longest first, a case with none at the median; ties
    keep their collection order (the sort is stable), so every worker computes the same order from the same file.
    The cases of one group (`groups`: index -> an xdist_group's name; loadgroup runs a group on one worker, one case
    after the other) stay together in their collection order (a case may reuse what the one before it left), and the
    group starts by the sum of its cases' times."""
    unknown = statistics.median(times.values()) if times else 0.0
    groups = groups or {}
    members: dict[str, list[int]] = {}
    for i in sorted(groups):
        members.setdefault(groups[i], []).append(i)
    units = [members[groups[i]] if i in groups else [i] for i in range(len(keys)) if i not in groups or members[groups[i]][0] == i]
    units.sort(key=lambda unit: -sum(times.get(keys[i], unknown) for i in unit))
    return [i for unit in units for i in unit]
