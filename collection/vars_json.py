"""The plays' vars files as JSON, written from their YAML (#29): playbooks/vars/contract.yml and cycle.yml are the
source (each setting defined once, with its comments); the plays load the JSON beside each.

Why: ansible-core parses a play's vars_files again for every task (it keeps a parsed vars file only when it was
vaulted: vars/manager.py, cache='vaulted'), and its loader reads JSON first: both files cost 2.9 ms a load as JSON
against 13.6 ms as YAML, about 3 s of controller CPU per lab cycle (docs/timings.md). Written once here, never by hand.

    .venv/bin/python collection/vars_json.py           # write playbooks/vars/*.json
    .venv/bin/python collection/vars_json.py --check   # exit 1 naming each JSON that differs (./tasks lint)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("playbooks/vars/contract.yml", "playbooks/vars/cycle.yml")


def to_json(text: str) -> str:
    """The YAML vars file's data as the JSON the plays load: the same mapping, keys in the same order."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("a vars file must hold a mapping")
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for rel in SOURCES:
        src = ROOT / rel
        dest = src.with_suffix(".json")
        want = to_json(src.read_text(encoding="utf-8"))
        if args.check:
            if not dest.exists() or dest.read_text(encoding="utf-8") != want:
                stale.append(str(dest.relative_to(ROOT)))
        else:
            dest.write_text(want, encoding="utf-8")
    for path in stale:
        print("vars_json: %s is out of date with its YAML; run .venv/bin/python collection/vars_json.py" % path,
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
