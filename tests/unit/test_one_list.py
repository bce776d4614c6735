"""Every copy of the engine list and of the sweep backends' list, held to the one table each comes from
(bc_engines.ENGINES, bc_sweepstats.BACKENDS): a role's argument spec, a module's documentation and its argument
spec, the contract. An engine or a backend added to its table and not to a copy fails here, naming the file."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import BACKENDS

ROOT = Path(__file__).resolve().parents[2]


def options(tree: Any, path: str = ""):
    """(dotted name, option) of every option of an argument spec or a module's DOCUMENTATION, suboptions included."""
    for name, opt in (tree or {}).items():
        if isinstance(opt, dict):
            yield path + name, opt
            for key in ("options", "suboptions"):
                yield from options(opt.get(key), path + name + ".")


def copies() -> list[tuple[str, str, list[Any]]]:
    """(where, option, choices) of every option named like an engine or the sweep's backends."""
    found = []
    for spec in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        for entry, body in yaml.safe_load(spec.read_text())["argument_specs"].items():
            for name, opt in options(body.get("options")):
                found.append(("%s (%s)" % (spec.relative_to(ROOT), entry), name, opt.get("choices")))
    for module in sorted(ROOT.glob("library/*.py")):
        text = module.read_text()
        doc = yaml.safe_load(re.search(r'^DOCUMENTATION = r?"""(.*?)"""', text, re.M | re.S).group(1))
        for name, opt in options(doc.get("options")):
            found.append(("%s DOCUMENTATION" % module.relative_to(ROOT), name, opt.get("choices")))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                for key, value in zip(keys, node.values, strict=False):
                    if key in ("engine", "backends") and isinstance(value, ast.Dict):
                        spec = {k.value: v for k, v in zip(value.keys, value.values, strict=False) if isinstance(k, ast.Constant)}
                        if "choices" in spec and isinstance(spec["choices"], ast.List):
                            found.append(("%s argument spec" % module.relative_to(ROOT), key,
                                          [ast.literal_eval(e) for e in spec["choices"].elts]))
    contract = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
    found += [("playbooks/vars/contract.yml", name, opt.get("choices")) for name, opt in contract.items()]
    return found


def test_the_engine_list_is_the_engine_table_and_is_written_once():
    """bc_engines.ENGINES is the list; the contract's bc_engine (the inventory's one check) is its only copy, and no
    role spec or module lists the engines again: the modules refuse another through bc_engines.resolve/profile."""
    engines = [(w, n, c) for w, n, c in copies() if re.search(r"(^|_|\.)engine$", n)]
    # the scan sees the contract, the modules' docs and their specs (the roles read cycle_bc.bc_engine: no input of their own)
    assert {"playbooks/vars/contract.yml"} <= {w for w, _n, _c in engines} and any("DOCUMENTATION" in w for w, _n, _c in engines), engines
    # (the cycle role's spec is generated from the contract: collection/cycle_spec.py, --check in ./tasks lint)
    listed = [(w, n, c) for w, n, c in engines if c and not w.startswith("roles/cycle/")]
    assert listed == [("playbooks/vars/contract.yml", "bc_engine", sorted(ENGINES))], listed


def test_every_backend_list_is_the_backends_table():
    backends = [(w, n, c) for w, n, c in copies() if re.search(r"(^|_|\.)backends$", n) and c]
    assert len(backends) >= 2, backends
    wrong = [(w, n, c) for w, n, c in backends if set(c) != {"auto", *BACKENDS}]
    assert not wrong, "not auto + bc_sweepstats.BACKENDS (%s): %s" % (BACKENDS, wrong)
