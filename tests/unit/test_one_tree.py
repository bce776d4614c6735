"""The repository is the collection (#46): every import between the project's Python files is one that resolves from
the tree as checked out (collections/ on the path, no runtime patch), and the playbooks and roles name the project's
filters and roles by their full names, as the installed collection must."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "ansible_collections.inference_ops.benchmark_cycle"
PYTHON = sorted(p for top in ("plugins", "tests", "bench", "lab", "collection") for p in (ROOT / top).rglob("*.py")
                if "__pycache__" not in p.parts)
YAML = sorted([ROOT / "benchmark_cycle.yml", *(ROOT / "playbooks").rglob("*.yml"), *(ROOT / "roles").rglob("*.yml"),
               *(ROOT / "roles").rglob("*.j2"), *(ROOT / "molecule").rglob("*.yml"), *(ROOT / "awx").glob("*.yml")])


def project_imports(path: Path) -> list[str]:
    """The modules of this collection that `path` imports (import X, from X import Y: Y when it is a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(PACKAGE)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            folder = ROOT.joinpath(*node.module.split(".")[3:])
            if folder.is_dir():  # from <package> import <module>, ...
                found += ["%s.%s" % (node.module, a.name) for a in node.names]
            else:
                found.append(node.module)
    return found


def test_the_import_graph_between_the_projects_files_is_whole():
    """An import-graph tool sees the edges: each plugin's imports of module_utils resolve to files of this tree."""
    edges = {}
    for path in (p for p in PYTHON if p.is_relative_to(ROOT / "plugins")):
        for name in project_imports(path):
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.origin, "%s imports %s, which does not resolve" % (path.relative_to(ROOT), name)
            target = Path(spec.origin).resolve()
            assert target.is_relative_to(ROOT / "plugins"), (name, target)
            edges.setdefault(str(path.relative_to(ROOT)), set()).add(str(target.relative_to(ROOT)))
    # every module over module_utils; a module that only documents an action plugin of its name (it runs on the
    # controller: plugins/action/) has no code of its own
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "plugins" / "modules").glob("*.py")
                     if not (ROOT / "plugins" / "action" / p.name).exists())
    assert all(edges.get(m) for m in modules), [m for m in modules if not edges.get(m)]
    assert "plugins/module_utils/bc_strategy.py" in edges["plugins/filter/bc_filters.py"]
    assert "plugins/module_utils/bc_host.py" in edges["plugins/module_utils/bc_unit.py"]


@pytest.mark.parametrize("path", PYTHON, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_patches_an_import_path_or_imports_the_old_layout(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "__path__" and path != Path(__file__):
            pytest.fail("%s:%d touches a package's __path__" % (path.relative_to(ROOT), node.lineno))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible.module_utils.bc_"):
            pytest.fail("%s:%d imports %s: the collection's is %s.plugins.module_utils" % (
                path.relative_to(ROOT), node.lineno, node.module, PACKAGE))


def filters() -> list[str]:
    return sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))


def test_the_filter_documentation_names_every_filter():
    assert len(filters()) > 20  # the sidecars the list below is read from


@pytest.mark.parametrize("path", YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_playbooks_and_roles_name_the_projects_filters_and_roles_by_their_full_names(path):
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if not line.lstrip().startswith("#"))
    for name in filters():
        for hit in re.finditer(r"(?<![\w.])%s\b" % re.escape(name), text):
            line = text.count("\n", 0, hit.start()) + 1
            pytest.fail("%s:%d names the filter %s by its short name: use inference_ops.benchmark_cycle.%s" % (
                path.relative_to(ROOT), line, name, name))
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    if path.suffix == ".yml":
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for item in walk(doc):
                for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                    if isinstance(item.get(key), dict) and item[key].get("name") in roles:
                        pytest.fail("%s names the role %s by its short name" % (path.relative_to(ROOT), item[key]["name"]))
                for role in item.get("roles") or []:
                    name = role.get("role", role.get("name")) if isinstance(role, dict) else role
                    assert name not in roles, "%s lists the role %s by its short name" % (path.relative_to(ROOT), name)


def walk(node: object):
    """Every mapping inside a YAML document."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


SCRIPTS = sorted([*PYTHON, *(ROOT / "tests").rglob("*.sh"), *(ROOT / "lab").rglob("*.sh"), ROOT / "tasks"])


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_ad_hoc_call_names_the_projects_module_by_its_full_name(path):
    """`ansible -m <module>`, in a test's argv or a script: the short name resolves nowhere (the clone's ansible.cfg sets
    no library path), so the call fails; a script that hides its stderr would read as unparsed, not as an error."""
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    short = re.compile(r"""(?:"-m",\s*"|-m\s+)(%s)\b""" % "|".join(map(re.escape, modules)))
    text = path.read_text(encoding="utf-8")
    hit = short.search(text)
    assert not hit, "%s:%d calls the module %s by its short name: use %s.%s" % (
        path.relative_to(ROOT), text.count("\n", 0, hit.start()) + 1, hit.group(1), PACKAGE.split(".", 1)[1], hit.group(1))
