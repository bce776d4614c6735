#!/usr/bin/env python3
"""Compare two sweep results (JSON written by marlin_sweep, e.g. results/<host>/<stamp>/*.json).

    .venv/bin/python bench/compare_runs.py OLD.json NEW.json
Prints per M: old ms, new ms, new/old (below 1 is faster), and the knee of each.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "module_utils"))
from bc_sweepstats import knee, sweep_compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args()
    old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    if old["shape"] != new["shape"]:
        print("note: the shapes differ: %s vs %s" % (old["shape"], new["shape"]), file=sys.stderr)
    print("| M | old ms | new ms | new/old |\n|---:|---:|---:|---:|")
    for row in sweep_compare(new["points"], old["points"]):
        print("| %d | %.4f | %.4f | %.3f |" % (row["m"], row["previous"], row["current"], row["ratio"]))
    for label, res in (("old", old), ("new", new)):
        k = knee(res["points"], res["shape"]["E"])
        print("%s: knee M=%s, plateau %.4f ms at M=%s" % (label, k["knee_m"], k["plateau_ms"], k["plateau_m"]))


if __name__ == "__main__":
    main()
