"""Extract the command-line flags of one SGLang release from its own `srt/server_args.py`, for the
test double (which must refuse exactly the flags that release refuses). Facts, not code: each flag's
name and whether it takes no value, one value or a list.

    python3 tests/doubles/sglang/extract_flags.py sglang-0.5.16-...whl > tests/doubles/sglang/flags/0.5.16.json

Two styles, both read with `ast` (nothing of SGLang is imported or copied):
- up to 0.5.10: `parser.add_argument("--x", ..., action="store_true" | nargs=...)` calls;
- from 0.5.15: dataclass fields `name: A[T, "help"]` or `A[T, Arg(...)]`, which
  `arg_groups/arg_utils.py add_cli_args_from_dataclass` turns into `--name-with-dashes` (or
  Arg.cli_name, plus Arg.aliases): bool -> store_true, List[...] -> nargs "+", else one value;
  Arg(no_cli=True) has no flag. The few explicit add_argument calls there are read as above.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _kind(action: object, nargs: object) -> str:
    if action in ("store_true", "store_false", "count", "help") or nargs == 0:
        return "switch"
    if nargs in ("+", "*"):
        return "list"
    return "optional" if nargs == "?" else "value"


def _inner(node: ast.expr) -> tuple[str, ast.expr]:
    """(outer name, inner node) of Optional[X] / List[X] / X."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return node.value.id, node.slice
    if isinstance(node, ast.Name):
        return node.id, node
    return "", node


def flags(source: str) -> dict[str, str]:
    tree = ast.parse(source)
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            for name in names:
                out[name] = _kind(_const(_kw(node, "action")), _const(_kw(node, "nargs")))
        if isinstance(node, ast.ClassDef):  # ServerArgs (and, from 0.5.23, its arg-group mixins)
            for name, kind in _annotated_flags(node):
                out.setdefault(name, kind)
    return dict(sorted(out.items()))


def _annotated_flags(node: ast.ClassDef) -> list[tuple[str, str]]:
    """The flags a ServerArgs class declares as `name: A[type, arg(...)]` fields, each with its kind."""
    found = []
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        ann = item.annotation
        if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
        if len(elts) < 2:
            continue
        typ, meta = elts[0], elts[1]
        call = meta if isinstance(meta, ast.Call) else None
        if call is not None and _const(_kw(call, "no_cli")) is True:
            continue
        cli = _const(_kw(call, "cli_name")) if call is not None else None
        aliases = _kw(call, "aliases") if call is not None else None
        names = [cli or "--" + item.target.id.replace("_", "-")]
        if isinstance(aliases, ast.List):
            names += [a.value for a in aliases.elts if isinstance(a, ast.Constant)]
        outer, inner = _inner(typ)
        if outer == "Optional":
            outer, inner = _inner(inner)
        action = _const(_kw(call, "action")) if call is not None else None
        nargs = _const(_kw(call, "nargs")) if call is not None else None
        if action is None and call is not None and _kw(call, "action") is not None:
            action = "custom"
        if outer in ("List", "list"):
            kind = "list"
        elif outer == "bool" and action is None:
            kind = "switch"
        else:
            kind = _kind(action, nargs)
        found += [(name, kind) for name in names]
    return found


def main() -> None:
    with zipfile.ZipFile(sys.argv[1]) as zf:
        version = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")).split("-")[1].split(".dist")[0]
        # 0.5.23 splits ServerArgs' fields over srt/arg_groups/*.py mixins
        groups = sorted(n for n in zf.namelist() if n.startswith("sglang/srt/arg_groups/") and n.endswith(".py"))
        files = ["sglang/srt/server_args.py", *groups]
        found: dict[str, str] = {}
        for name in files:
            for flag, kind in flags(zf.read(name).decode()).items():
                found.setdefault(flag, kind)
    json.dump({"version": version, "source": "sglang/srt/server_args.py and srt/arg_groups/*.py of the %s wheel" % version,
               "flags": dict(sorted(found.items()))}, sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
