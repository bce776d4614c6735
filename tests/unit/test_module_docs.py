"""Every module's DOCUMENTATION, EXAMPLES and RETURN are complete and render: attributes with check_mode and
diff_mode, a seealso naming the project's related modules, and a RETURN entry with description, returned, type
and a sample of that type for every key. The literals are read from the source (never imported) and parsed
with yaml.safe_load, as ansible-doc does; ansible-doc itself must render each module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "library"
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")
MODULES = sorted(path.stem for path in LIBRARY.glob("*.py") if not path.name.startswith("_"))
LITERALS = ("DOCUMENTATION", "EXAMPLES", "RETURN")
SUPPORT = {"full", "partial", "none"}
RETURN_REQUIRED = {"description", "returned", "type", "sample"}
# what a RETURN entry may hold: anything else is a typo or a flow mapping split at a comma
RETURN_ALLOWED = RETURN_REQUIRED | {"elements", "contains", "version_added"}
TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (float, int), "str": (str,), "list": (list,), "dict": (dict,),
}


def literals(module: str) -> dict[str, str]:
    """The module's top-level string constants DOCUMENTATION, EXAMPLES and RETURN, read with ast."""
    tree = ast.parse((LIBRARY / (module + ".py")).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in LITERALS:
                    found[target.id] = node.value.value
    missing = sorted(set(LITERALS) - set(found))
    assert not missing, "%s has no %s string literal" % (module, ", ".join(missing))
    return found


def parsed(module: str, name: str) -> Any:
    return yaml.safe_load(literals(module)[name])


def of_type(value: Any, kind: str) -> bool:
    """`value` is of the documented `kind` (a bool is no int or float; raw or an unknown kind is anything)."""
    if kind not in TYPES:
        return True
    if isinstance(value, bool) and kind != "bool":
        return False
    return isinstance(value, TYPES[kind])


def test_every_module_is_found() -> None:
    assert MODULES, "no module in %s" % LIBRARY


@pytest.mark.parametrize("module", MODULES)
def test_literals_parse(module: str) -> None:
    doc = parsed(module, "DOCUMENTATION")
    assert isinstance(doc, dict) and doc.get("module") == module
    assert isinstance(parsed(module, "EXAMPLES"), list)
    assert isinstance(parsed(module, "RETURN"), dict)


def fragment_attributes(names: list[str]) -> dict[str, Any]:
    """The attributes the named doc fragments (doc_fragments/<name>.py, ModuleDocFragment.DOCUMENTATION) add."""
    merged: dict[str, Any] = {}
    for name in names:
        tree = ast.parse((ROOT / "plugins" / "doc_fragments" / (name.rpartition(".")[2] + ".py")).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets)
                    and isinstance(node.value, ast.Constant)):
                merged.update(yaml.safe_load(node.value.value).get("attributes") or {})
    return merged


@pytest.mark.parametrize("module", MODULES)
def test_attributes_say_check_and_diff_mode_support(module: str) -> None:
    doc = parsed(module, "DOCUMENTATION")
    # a module's own attributes, over those of its doc fragments (as ansible-doc merges them)
    attributes = {**fragment_attributes(doc.get("extends_documentation_fragment") or []), **(doc.get("attributes") or {})}
    assert isinstance(attributes, dict), "%s: DOCUMENTATION has no attributes" % module
    for name in ("check_mode", "diff_mode"):
        attribute = attributes.get(name)
        assert isinstance(attribute, dict), "%s: attributes has no %s" % (module, name)
        assert attribute.get("support") in SUPPORT, "%s: %s.support is %r, not one of %s" % (
            module, name, attribute.get("support"), sorted(SUPPORT))


@pytest.mark.parametrize("module", MODULES)
def test_seealso_names_related_project_modules(module: str) -> None:
    seealso = parsed(module, "DOCUMENTATION").get("seealso")
    assert isinstance(seealso, list) and seealso, "%s: DOCUMENTATION has no seealso list" % module
    named = []
    for entry in seealso:
        assert isinstance(entry, dict), "%s: seealso entry %r is not a mapping" % (module, entry)
        # ansible-doc needs a string: a list here fails the whole page
        assert isinstance(entry.get("description"), str) and entry["description"].strip(), (
            "%s: seealso entry %r has no description string" % (module, entry))
        if "module" in entry:
            target = entry["module"].removeprefix("inference_ops.benchmark_cycle.")
            assert target in MODULES or "." in target, "%s: seealso names %r, which is no module of plugins/modules/" % (module, target)
            assert target != module, "%s: seealso names the module itself" % module
            named.append(target)
        else:
            assert entry.get("name") and entry.get("link"), "%s: seealso entry %r is neither a module nor a link" % (module, entry)
    assert any(name in MODULES for name in named), "%s: seealso names none of this project's modules" % module


@pytest.mark.parametrize("module", MODULES)
def test_every_return_value_is_documented_with_a_sample(module: str) -> None:
    returns = parsed(module, "RETURN")
    assert returns, "%s: RETURN is empty" % module
    for key, entry in returns.items():
        assert isinstance(entry, dict), "%s: RETURN %s is not a mapping" % (module, key)
        missing = sorted(RETURN_REQUIRED - set(entry))
        assert not missing, "%s: RETURN %s lacks %s" % (module, key, ", ".join(missing))
        unknown = sorted(set(entry) - RETURN_ALLOWED)
        assert not unknown, "%s: RETURN %s has unknown keys %s (an unquoted comma in a flow mapping?)" % (module, key, unknown)
        assert entry["description"], "%s: RETURN %s has an empty description" % (module, key)
        assert entry["sample"] is not None, "%s: RETURN %s has a null sample" % (module, key)
        assert of_type(entry["sample"], entry["type"]), "%s: RETURN %s sample %r is not of type %s" % (
            module, key, entry["sample"], entry["type"])
        if entry["type"] == "list" and "elements" in entry:
            bad = [item for item in entry["sample"] if not of_type(item, entry["elements"])]
            assert not bad, "%s: RETURN %s sample items %r are not %s" % (module, key, bad, entry["elements"])


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_attributes_and_see_also(module: str) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([ANSIBLE_DOC, "-M", str(LIBRARY), module], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120, check=False)
    assert proc.returncode == 0, "ansible-doc %s exited %d: %s" % (module, proc.returncode, proc.stderr.strip())
    for heading in ("ATTRIBUTES:", "SEE ALSO:", "RETURN VALUES:"):
        assert heading in proc.stdout, "ansible-doc %s printed no %s section" % (module, heading)
