"""The hand-written files one setting crosses, from the inventory to the code that uses it (#46: "a new setting touches
at most 3 hand-written files: definition, use, test").

A setting's names: its `bc_*` name, then every variable of the wiring (playbooks/vars/cycle.yml) and of the roles'
defaults whose value names one of its names, in turn (bc_engine -> service_unit_description, a value derived from it).
Its files: every hand-written file of the product and its tests that says one of those names. Not counted: what a
generator writes (the JSON twins, the cycle role's spec, the roles' READMEs, the generated docs pages), the changelog,
the evidence, the sites' inventories (a value, not the setting), and this script and its test.

    python3 bench/setting_files.py bc_readiness_timeout_s        # the names, then the files, by kind

A new setting is its definition (contract.yml), its uses and its test: the last line says how many files an existing
one crosses between its definition and its uses (the wiring's second names, a role's own input): 0 is one name.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GENERATED = (re.compile(r"^playbooks/vars/.*\.json$"), re.compile(r"^roles/[^/]+/README\.md$"),
             re.compile(r"^roles/cycle/meta/argument_specs\.yml$"), re.compile(r"^docs/(paths|reliability)\.(md|json)$"),
             re.compile(r"^plugins/filter/.*\.yml$"), re.compile(r"^(CHANGELOG\.md|changelogs/|evidence/|inventory/)"),
             re.compile(r"^docs/suite-timings\.json$"),
             re.compile(r"^(bench/setting_files\.py|tests/unit/test_setting_files\.py)$"))  # this script names one, as an example
KINDS = (("definition", re.compile(r"^playbooks/vars/contract\.yml$")), ("wiring", re.compile(r"^playbooks/vars/cycle\.yml$")),
         ("role interface", re.compile(r"^roles/[^/]+/(defaults|meta)/")), ("test", re.compile(r"^tests/")),
         ("docs", re.compile(r"\.md$|^awx/.*\.json$")), ("use", re.compile(r".")))


def names_of(setting: str, root: Path = ROOT) -> list[str]:
    """The setting's name and every variable derived from it, in the order they are found."""
    sources: list[tuple[str, str]] = []  # (variable, its value) of the wiring, then of each role's defaults
    for path in [root / "playbooks/vars/cycle.yml", *sorted(root.glob("roles/*/defaults/main.yml"))]:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        sources += [(k, str(v)) for k, v in data.items() if isinstance(k, str)]
    found = [setting]
    for name in found:  # grows while it is read: each new name is followed in turn
        word = re.compile(r"(?<![\w.])(?:cycle_bc\.)?%s\b" % re.escape(name))
        found += [k for k, v in sources if k not in found and word.search(v)]
    return found


def files_of(names: list[str], root: Path = ROOT) -> dict[str, list[str]]:
    """{kind: [file, ...]} of the tracked, hand-written files that say one of `names`."""
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True, timeout=60).stdout.split()
    word = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, names)))
    out: dict[str, list[str]] = {}
    for rel in tracked:
        path = root / rel
        if any(g.search(rel) for g in GENERATED) or path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if word.search(text):
            kind = next(k for k, pattern in KINDS if pattern.search(rel))
            out.setdefault(kind, []).append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("setting", help="a bc_* setting of playbooks/vars/contract.yml")
    args = parser.parse_args(argv)
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text(encoding="utf-8"))["bc_contract"]
    if args.setting not in contract:
        print("setting_files: %s is not a setting of playbooks/vars/contract.yml" % args.setting, file=sys.stderr)
        return 2
    names = names_of(args.setting)
    files = files_of(names)
    print("names: %s" % ", ".join(names))
    for kind, _pattern in KINDS:
        for rel in files.get(kind, []):
            print("%-15s %s" % (kind, rel))
    product = sum(len(v) for k, v in files.items() if k not in ("docs",))
    print("hand-written files: %d (%d with the docs)" % (product, product + len(files.get("docs", []))))
    # what a new setting costs: its definition, its uses and its test; every file between the two is a second name
    between = len(files.get("wiring", [])) + len(files.get("role interface", []))
    print("between the definition and the uses: %d file(s)%s" % (between, ": one name" if between == 0 and len(names) == 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
