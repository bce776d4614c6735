"""Each filter's documentation for `ansible-doc -t filter` (a YAML sidecar beside plugins/filter/bc_filters.py),
made from what is already written once: the function's docstring (the description), its signature (the input, the
positional arguments, their types and defaults) and the places a playbook or role of the project uses it (the
example). Nothing here is written by hand for one filter.

    .venv/bin/python collection/filter_docs.py           # write plugins/filter/<name>.yml
    .venv/bin/python collection/filter_docs.py --check   # exit 1 naming each sidecar that differs (./tasks lint)
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
FQCN = "inference_ops.benchmark_cycle"
def version_added(path: Path, root: Path = ROOT) -> str:
    """The release a filter was added in: what its sidecar says once written (a released filter keeps its release), and
    for a new filter the version being made (galaxy.yml)."""
    if path.exists():
        return str((yaml.safe_load(path.read_text()) or {}).get("DOCUMENTATION", {}).get("version_added", ""))
    return str(yaml.safe_load((root / "galaxy.yml").read_text())["version"])
# Python annotations as ansible-doc types
TYPES = {str: "str", int: "int", float: "float", bool: "bool", dict: "dict", list: "list", tuple: "list"}


def doc_type(annotation: Any) -> str:
    """The ansible-doc type of a parameter's or return value's annotation ("raw" when it is not one type)."""
    if isinstance(annotation, str):
        return "raw"
    origin = typing.get_origin(annotation) or annotation
    if origin in (typing.Union, types.UnionType):
        kinds = {doc_type(a) for a in typing.get_args(annotation) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else "raw"
    return TYPES.get(origin, "raw")


def used_in(name: str, root: Path) -> list[str]:
    """The project's playbooks, task files and templates that apply the filter `name`."""
    pattern = re.compile(r"\|\s*(?:%s\.)?%s\b" % (re.escape(FQCN), re.escape(name)))
    paths = sorted([*root.glob("playbooks/**/*.yml"), *root.glob("roles/**/*.yml"), *root.glob("roles/**/*.j2")])
    return [str(p.relative_to(root)) for p in paths if pattern.search(p.read_text(encoding="utf-8"))]


class IndentedDumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (the EXAMPLES read as written); a list indented under its key, as yamllint's
    default (and ansible-lint's, inside the installed collection) wants it."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


IndentedDumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))


def sidecar(name: str, fn: Callable[..., Any], root: Path, fqcn: str, version: str) -> dict[str, Any]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    doc = inspect.getdoc(fn) or ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    first = re.split(r"(?<=[.:;])\s", paragraphs[0], maxsplit=1)[0] if paragraphs else name
    options: dict[str, Any] = {}
    positional = []
    for i, param in enumerate(params):
        if param.kind is param.VAR_POSITIONAL:  # filter(*values): the input is the first, the rest follow it
            if i == 0:
                options["_input"] = {"description": "The first of the values (C(%s))." % param.name, "type": "raw",
                                     "required": True}
            key = "_more_" + param.name
            options[key] = {"description": "Any number of further values (C(%s))." % param.name, "type": "list",
                            "elements": "raw"}
            positional.append(key)
            continue
        key = "_input" if i == 0 else param.name
        option: dict[str, Any] = {"description": ("The value filtered (C(%s))." if i == 0 else "The argument C(%s).") % param.name,
                                  "type": doc_type(hints.get(param.name, Any))}
        if param.default is inspect.Parameter.empty:
            option["required"] = True
        elif param.default not in (None, ()):
            option["default"] = param.default
        options[key] = option
        if i > 0:
            positional.append(key)
    documentation: dict[str, Any] = {
        "name": name, "author": "benchmark-cycle contributors", "version_added": version,
        "short_description": first.rstrip(".:;")[:120],
        "description": paragraphs or [name],
        "options": options,
    }
    if positional:
        documentation["positional"] = ", ".join(positional)
    args = [p.name for p in params[1:] if p.default is inspect.Parameter.empty or p.kind is p.VAR_POSITIONAL]
    call = "%s.%s%s" % (fqcn, name, "(%s)" % ", ".join(args) if args else "")
    where = used_in(name, root)
    example = "%sresult: \"{{ %s | %s }}\"\n" % (
        "".join("# used by %s\n" % w for w in where), params[0].name if params else "value", call)
    returned = {"description": "What the description says it returns.", "type": doc_type(hints.get("return", Any))}
    return {"DOCUMENTATION": documentation, "EXAMPLES": example, "RETURN": {"_value": returned}}


def sidecars(filters: dict[str, Callable[..., Any]], root: Path, fqcn: str) -> dict[str, str]:
    """{filter name: its sidecar's YAML text} for every filter the plugin registers."""
    folder = root / "plugins" / "filter"
    return {name: yaml.dump(sidecar(name, fn, root, fqcn, version_added(folder / ("%s.yml" % name), root)),
                            Dumper=IndentedDumper, sort_keys=False, width=120)
            for name, fn in sorted(filters.items())}


def filters() -> dict[str, Callable[..., Any]]:
    """The filters the plugin registers (FilterModule.filters), imported by the collection's own name."""
    if str(ROOT / "collections") not in sys.path:  # once, however often it is asked
        sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.inference_ops.benchmark_cycle.plugins.filter.bc_filters import FilterModule  # noqa: PLC0415
    return FilterModule().filters()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a sidecar differs from what would be written")
    args = parser.parse_args(argv)
    folder = ROOT / "plugins" / "filter"
    want = {folder / ("%s.yml" % name): "---\n" + text for name, text in sidecars(filters(), ROOT, FQCN).items()}
    have = set(folder.glob("*.yml"))
    stale = sorted(str(p.relative_to(ROOT)) for p in set(want) | have if p not in want or not p.exists() or p.read_text() != want[p])
    if args.check:
        for rel in stale:
            print("%s is out of date: run .venv/bin/python collection/filter_docs.py" % rel, file=sys.stderr)
        return 1 if stale else 0
    for path in have - set(want):
        path.unlink()
    for path, text in want.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
