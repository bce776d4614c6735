"""Assemble the collection from the project's layout, rewriting nothing by hand.

The project keeps the layout it was asked for (ansible.cfg, playbooks/, roles/, library/, filter_plugins/, ...:
also what an AWX project syncs). This build lays the same files out as
``<out>/ansible_collections/<namespace>/<name>/`` and applies the few mechanical rewrites a collection needs, each
one a pure function below with its test (tests/unit/test_collection_build.py):

- Python: the shared code is imported as ``ansible.module_utils.bc_*`` in the project (ansible.cfg's module_utils
  setting); in the collection as ``ansible_collections.<ns>.<name>.plugins.module_utils.bc_*``. The blocks marked
  ``# >>> project layout only`` / ``# <<< project layout only`` (the plugins' registration of module_utils/) are
  dropped. Doc fragments are named by their FQCN.
- Playbooks and roles: the project's modules, filters and roles are named by their FQCN.

Then it checks what it built: no short name and no project-layout import left. The version is galaxy.yml's,
stamped ``<version>-dev+g<commit>`` unless HEAD is tagged ``v<version>``.

    python collection/build.py [--out DIR] [--tarball]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from vars_json import SOURCES as VARS_SOURCES
from vars_json import to_json as vars_to_json

from filter_docs import IndentedDumper
from filter_docs import sidecars as filter_sidecars
from role_readme import readmes as role_readmes

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "collection"
# project path -> collection path (a file or every file of a folder)
PYTHON_DIRS = {"library": "plugins/modules", "module_utils": "plugins/module_utils", "filter_plugins": "plugins/filter",
               "callback_plugins": "plugins/callback", "lookup_plugins": "plugins/lookup", "doc_fragments": "plugins/doc_fragments"}
# the product's playbooks (not the lab's nor the GPU test machine's provisioning)
PLAYBOOKS = ("benchmark_cycle.yml", "gpu_benchmark.yml", "recover.yml")
# a module's EXAMPLES literal: the only place a Python file names modules as tasks
EXAMPLES = re.compile(r'(^EXAMPLES = r?""")(.*?)(""")', re.M | re.S)
LAYOUT_ONLY = re.compile(r"^[ \t]*# >>> project layout only.*?^[ \t]*# <<< project layout only[^\n]*\n", re.M | re.S)


class BuildError(Exception):
    pass


def alternation(names: list[str]) -> str:
    """A regex matching any of `names` literally (the longest first, so that no name stops at a shorter one)."""
    return "|".join(map(re.escape, sorted(names, key=len, reverse=True)))


def rewrite_python(text: str, fqcn: str, fragments: list[str], modules: list[str] | None = None) -> str:
    """One Python file of the project as the collection holds it (`fqcn`: "<namespace>.<name>"); a module's
    EXAMPLES name the `modules` by their FQCN."""
    package = "ansible_collections.%s.plugins.module_utils" % fqcn
    if modules:
        alt = alternation(modules)
        # the documentation's references to the project's modules (M(name), a seealso entry)
        text = re.sub(r"\bM\((%s)\)" % alt, r"M(%s.\1)" % fqcn, text)
        text = re.sub(r"\b(O|RV)\((%s)#module:" % alt, r"\1(%s.\2#module:" % fqcn, text)
        text = re.sub(r"^(\s*- module:[ \t]*)(%s)[ \t]*$" % alt, r"\1%s.\2" % fqcn, text, flags=re.M)
        text = EXAMPLES.sub(lambda m: m.group(1) + rewrite_yaml(m.group(2), fqcn, modules, [], []) + m.group(3), text, count=1)
    text = re.sub(r"\n{4,}", "\n\n\n", LAYOUT_ONLY.sub("", text))  # at most two blank lines where a block was
    text = re.sub(r"\bansible\.module_utils\.bc_", package + ".bc_", text)
    text = re.sub(r"^(\s*)from ansible\.module_utils import (bc_)", r"\1from %s import \2" % package, text, flags=re.M)
    # an import the longer package name pushed past pep8's 160 columns (ansible-test sanity): one name a line
    text = re.sub(r"^(\s*)from (%s\.\w+) import ([\w, ]+)$" % re.escape(package),
                  lambda m: m.group(0) if len(m.group(0)) <= 160 else "%sfrom %s import (\n%s)" % (
                      m.group(1), m.group(2), "".join("%s    %s,\n" % (m.group(1), n.strip()) for n in m.group(3).split(","))),
                  text, flags=re.M)

    def fragment_list(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(2).split(",")]
        return "%s[%s]" % (match.group(1), ", ".join("%s.%s" % (fqcn, n) if n in fragments else n for n in names))
    return re.sub(r"^(extends_documentation_fragment:\s*)\[([^\]]*)\]", fragment_list, text, flags=re.M)


def rewrite_yaml(text: str, fqcn: str, modules: list[str], filters: list[str], roles: list[str]) -> str:
    """One playbook, task file or template of the project as the collection holds it: its modules (as task keys),
    filters (after a `|`, or named in map/select) and roles (include_role/import_role `name:`) by their FQCN."""
    if modules:
        lines = text.splitlines(keepends=True)
        for i in task_keys(lines, modules):
            lines[i] = re.sub(r"^(\s*(?:- )?)", r"\g<1>%s." % fqcn, lines[i], count=1)
        text = "".join(lines)
    if filters:
        alt = alternation(filters)
        text = re.sub(r"\|(\s*)(%s)\b" % alt, r"|\1%s.\2" % fqcn, text)
        text = re.sub(r"(\{%%-?\s*filter\s+)(%s)\b" % alt, r"\1%s.\2" % fqcn, text)
        text = re.sub(r"\b(map|select|reject)\((\s*)(['\"])(%s)\3" % alt, r"\1(\2\3%s.\4\3" % fqcn, text)
    if roles:
        text = re.sub(r"^([ \t]*name:[ \t]*)(%s)[ \t]*$" % alternation(roles), r"\1%s.\2" % fqcn, text, flags=re.M)
    return text


def task_keys(lines: list[str], modules: list[str]) -> list[int]:
    """The lines that call one of `modules` as a task: a list item's first key (`- module:`), or a key at the
    indent of the enclosing list item's mapping (`- name: ...` then `  module:`). An option of a module that
    shares a module's name sits deeper, and is left alone."""
    found: list[int] = []
    items: list[int] = []  # the mapping indent of each list item the line is inside
    key = re.compile(r"^(\s*)(- )?(%s):(\s|$)" % alternation(modules))
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while items and items[-1] > indent:
            items.pop()  # a line left of an item's mapping ends that item
        if line.lstrip().startswith("- "):
            while items and items[-1] > indent:
                items.pop()
            items.append(indent + 2)
        hit = key.match(line)
        if hit and (hit.group(2) or (items and len(hit.group(1)) == items[-1])):
            found.append(i)
    return found


def leftovers(text: str, fqcn: str, modules: list[str], filters: list[str], roles: list[str] | None = None) -> list[str]:
    """What the rewrite should have named and did not (empty: the file is the collection's). Fails closed: a filter's
    name anywhere outside a comment, a module named by `action`/`local_action`/`module` or as a flow mapping's key, a
    role named by `name`/`role` in any quoting, count as short names even where the rewrite has no rule for them."""
    found = []
    code = "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))
    if re.search(r"\bansible\.module_utils\.bc_|from ansible\.module_utils import bc_", text):
        found.append("a project-layout import of module_utils")
    if "project layout only" in text:
        found.append("a project-layout-only block")
    for name in filters:
        if re.search(r"(?<![\w.])%s\b" % re.escape(name), code):
            found.append("the filter %s by its short name" % name)
    lines = text.splitlines(keepends=True)
    for name in modules:
        if task_keys(lines, [name]) or re.search(r"\b(action|local_action|module):\s*[\"']?%s\b|^\s*-\s*\{[^}]*[{,]\s*%s:"
                                                 % (re.escape(name), re.escape(name)), code, flags=re.M):
            found.append("the module %s by its short name" % name)
    for name in roles or []:
        if re.search(r"^\s*(?:- )?(?:name|role):\s*[\"']?%s[\"']?\s*(?:#.*)?$" % re.escape(name), code, flags=re.M):
            found.append("the role %s by its short name" % name)
    return found


def plugin_filters(root: Path = ROOT) -> dict[str, Any]:
    """The filters the project's filter plugin registers (FilterModule.filters), loaded as it runs: their names for
    the rewrites and the leftovers check, their functions for their documentation (collection/filter_docs.py)."""
    path = root / "filter_plugins" / "bc_filters.py"
    spec = importlib.util.spec_from_file_location("bc_filters_of_%s" % abs(hash(str(root))), path)
    if spec is None or spec.loader is None:
        raise BuildError("cannot load %s" % path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def stamped_version(version: str, root: Path = ROOT) -> str:
    """galaxy.yml's version if HEAD is tagged v<version>; a build before that release <version>-dev+g<commit>, and one
    after it (the tag exists, HEAD is past it) <next patch>-dev+g<commit>: a development build sorts after the release
    it follows, never below it (semver: a pre-release precedes its version; build metadata does not count)."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    if "v" + version in git("tag", "--points-at", "HEAD").split():
        return version
    if git("tag", "--list", "v" + version):
        major, minor, patch = version.split("+", maxsplit=1)[0].split("-", maxsplit=1)[0].split(".")
        version = "%s.%s.%d" % (major, minor, int(patch) + 1)
    commit = git("rev-parse", "--short=10", "HEAD")
    return "%s-dev+g%s" % (version, commit) if commit else "%s-dev" % version


def build(out: Path, root: Path = ROOT) -> Path:
    galaxy: dict[str, Any] = yaml.safe_load((HERE / "galaxy.yml").read_text())
    fqcn = "%s.%s" % (galaxy["namespace"], galaxy["name"])
    dest = out / "ansible_collections" / galaxy["namespace"] / galaxy["name"]
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    modules = sorted(p.stem for p in (root / "library").glob("*.py"))
    fragments = sorted(p.stem for p in (root / "doc_fragments").glob("*.py"))
    registered = plugin_filters(root)
    filters = sorted(registered)
    roles = sorted(p.name for p in (root / "roles").iterdir() if (p / "tasks").is_dir())
    problems: list[str] = []

    def put(rel: str, text: str) -> None:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        in_yaml = not rel.endswith(".py")
        # a Python file names modules as tasks only in its EXAMPLES (an option may share a module's name)
        tasks = text if in_yaml else "".join(m.group(2) for m in EXAMPLES.finditer(text))
        problems.extend("%s: %s" % (rel, p) for p in leftovers(text, fqcn, [], filters if in_yaml else [], roles if in_yaml else [])
                        + leftovers(tasks, fqcn, modules, []))

    for src, to in PYTHON_DIRS.items():
        for path in sorted((root / src).glob("*.py")):
            put("%s/%s" % (to, path.name), rewrite_python(path.read_text(), fqcn, fragments, modules))
    for tree in ("roles", "playbooks"):
        for path in sorted((root / tree).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts:
                continue
            if tree == "playbooks" and len(rel.parts) == 2 and rel.name not in PLAYBOOKS:
                continue  # the lab's and the GPU test machine's provisioning
            if path.suffix in (".yml", ".yaml", ".j2"):
                text = rewrite_yaml(path.read_text(), fqcn, modules, filters, roles)
                put(str(rel), text)
                if str(rel) in VARS_SOURCES:  # the plays load its JSON: written from the rewritten YAML, not copied
                    put(str(rel.with_suffix(".json")), vars_to_json(text))
            elif path.suffix == ".json" and str(rel.with_suffix(".yml")) in VARS_SOURCES:
                continue  # written above from the rewritten YAML
            else:
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    galaxy["version"] = stamped_version(str(galaxy["version"]), root)
    (dest / "galaxy.yml").write_text(yaml.safe_dump(galaxy, sort_keys=False))
    for rel in ("meta/runtime.yml", "README.md"):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(HERE / rel, dest / rel)
    for rel in ("LICENSE", "CHANGELOG.md"):
        shutil.copy2(root / rel, dest / rel)
    for rel, text in role_readmes(root, fqcn).items():  # each role's README names it as the collection's
        (dest / rel).write_text(text)
    for name, text in filter_sidecars(registered, root, fqcn, str(galaxy["version"]).split("-")[0]).items():
        # a sidecar names its filter by the short name (as ansible-core's own do): written beside the leftovers check
        (dest / "plugins" / "filter" / ("%s.yml" % name)).write_text(rewrite_yaml(text, fqcn, [], filters, []))
    shutil.copytree(root / "changelogs", dest / "changelogs", ignore=shutil.ignore_patterns(".*"))
    for path in (dest / "changelogs").glob("*.yaml"):  # antsibull-changelog's data, its lists indented as yamllint wants
        path.write_text(yaml.dump(yaml.safe_load(path.read_text()), Dumper=IndentedDumper, sort_keys=False, width=110,
                                  explicit_start=True))
    if problems:
        raise BuildError("the collection still names project-layout code:\n  " + "\n  ".join(problems))
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build", help="where ansible_collections/ goes (build/)")
    parser.add_argument("--tarball", action="store_true", help="also ansible-galaxy collection build into --out")
    args = parser.parse_args(argv)
    try:
        dest = build(args.out)
    except (BuildError, OSError, yaml.YAMLError) as exc:
        print("collection build failed: %s" % exc, file=sys.stderr)
        return 1
    print(dest)
    if args.tarball:
        galaxy = Path(sys.executable).parent / "ansible-galaxy"
        proc = subprocess.run([str(galaxy), "collection", "build", "--force", "--output-path", str(args.out), str(dest)],
                              capture_output=True, text=True, timeout=300, check=False)
        print((proc.stdout + proc.stderr).strip())
        return proc.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
