#!/usr/bin/env python3
"""Compare sweep results (JSON written by marlin_sweep, e.g. results/<host>/<stamp>/*.json).

    .venv/bin/python bench/compare_runs.py RUN.json              # backends and routings side by side
    .venv/bin/python bench/compare_runs.py OLD.json NEW.json     # per backend and routing, new/old per M
    .venv/bin/python bench/compare_runs.py --fidelity A.json B.json   # the same, and the worst deviation (target <= 5%)
One run: per routing and M, every backend's time and its ratio to the first backend's, and per
backend the skewed routings against the first routing. Two runs: new/old per M (below 1 is
faster) for every (backend, routing) in both, and each one's knee.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# the repository is the collection: collections/ links back to it (tests/conftest.py does the same)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "collections"))
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import knee, ratios, series_compare
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import series_of as series


def one_run(res: dict[str, Any]) -> None:
    runs = series(res)
    first = runs[0]["backend"]
    print("| routing | backend | M | ms | / %s |\n|---|---|---:|---:|---:|" % first)
    for row in ratios(runs, "backend", first):
        print("| %s | %s | %d | %.4f | %.3f |" % (row["routing"], row["backend"], row["m"], row["ms"], row["ratio"]))
    routings = list(dict.fromkeys(r["routing"] for r in runs))
    if len(routings) > 1:
        print("\n| backend | routing | M | ms | / %s |\n|---|---|---:|---:|---:|" % routings[0])
        for row in ratios(runs, "routing", routings[0]):
            print("| %s | %s | %d | %.4f | %.3f |" % (row["backend"], row["routing"], row["m"], row["ms"], row["ratio"]))


def two_runs(old: dict[str, Any], new: dict[str, Any], fidelity: bool) -> int:
    if old["shape"] != new["shape"]:
        print("note: the shapes differ: %s vs %s" % (old["shape"], new["shape"]), file=sys.stderr)
    worst = 0.0
    compared = series_compare(series(new), series(old))
    pairs = {(c["backend"], c["routing"]) for c in compared if c["rows"]}
    missing = [(r["backend"], r["routing"]) for r in series(old) if (r["backend"], r["routing"]) not in pairs]
    for cmp in compared:
        print("\n%s, %s: worst deviation %.1f%%\n| M | old ms | new ms | new/old |\n|---:|---:|---:|---:|"
              % (cmp["backend"], cmp["routing"], cmp["worst"] * 100))
        for row in cmp["rows"]:
            print("| %d | %.4f | %.4f | %.3f |" % (row["m"], row["previous"], row["current"], row["ratio"]))
        worst = max(worst, cmp["worst"])
    for label, res in (("old", old), ("new", new)):
        for r in series(res):
            k = knee(r["points"], res["shape"]["E"])
            plateau = "-" if k["plateau_ms"] is None else "%.4f" % k["plateau_ms"]
            print("%s %s %s: knee M=%s, plateau %s ms at M=%s" % (label, r["backend"], r["routing"], k["knee_m"],
                                                                 plateau, k["plateau_m"]))
    if missing:
        print("not in both runs (no points to compare): %s" % ", ".join("%s %s" % m for m in missing))
    if fidelity:
        holds = worst <= 0.05 and not missing and bool(pairs)
        print("fidelity: worst run-to-run deviation %.1f%% over every backend, routing and M (target <= 5%%): %s"
              % (worst * 100, "holds" if holds else "DOES NOT HOLD" + (" (series missing from a run)" if missing or not pairs else "")))
        return 0 if holds else 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="one run, or OLD NEW")
    parser.add_argument("--fidelity", action="store_true", help="fail unless every point of the two runs agrees within 5%%")
    args = parser.parse_args()
    if len(args.runs) > 2:
        parser.error("give one run or two (OLD NEW)")
    results = [json.loads(p.read_text()) for p in args.runs]
    if len(results) == 1:
        one_run(results[0])
        return 0
    return two_runs(results[0], results[1], args.fidelity)


if __name__ == "__main__":
    sys.exit(main())
