"""collection/filter_docs.py: every filter documented for ansible-doc from its docstring and signature, and the
committed sidecars render with the real ansible-doc from the collection (the repository)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collection"))

import filter_docs

FQCN = "inference_ops.benchmark_cycle"


@pytest.mark.parametrize(("annotation", "kind"), [
    (str, "str"), (int, "int"), (float, "float"), (bool, "bool"), (dict[str, Any], "dict"), (list[str], "list"),
    (list[dict[str, Any]] | None, "list"), (dict[str, Any] | None, "dict"), (Any, "raw"), (int | str, "raw"),
])
def test_annotations_become_ansible_doc_types(annotation, kind):
    assert filter_docs.doc_type(annotation) == kind


def sample(text: str, secrets: list[str], *more: Any, width: int = 80) -> str:
    """Redact things.

    Longer words about it."""
    return text


def test_a_filter_is_documented_from_its_docstring_and_signature(tmp_path):
    doc = filter_docs.sidecar("bc_sample", sample, tmp_path, FQCN, "0.9.0")
    d = doc["DOCUMENTATION"]
    assert d["name"] == "bc_sample" and d["short_description"] == "Redact things"
    assert d["description"] == ["Redact things.", "Longer words about it."]
    assert d["options"]["_input"] == {"description": "The value filtered (C(text)).", "type": "str", "required": True}
    assert d["options"]["secrets"]["required"] is True and d["options"]["width"]["default"] == 80
    assert d["positional"] == "secrets, _more_more, width"
    assert doc["EXAMPLES"] == 'result: "{{ text | inference_ops.benchmark_cycle.bc_sample(secrets, more) }}"\n'
    assert doc["RETURN"]["_value"]["type"] == "str"


def test_a_new_filter_is_added_in_the_version_being_made_and_a_written_one_keeps_its_release(tmp_path):
    (tmp_path / "galaxy.yml").write_text("version: 1.2.0\n")
    written = tmp_path / "bc_old.yml"
    written.write_text("---\nDOCUMENTATION:\n  name: bc_old\n  version_added: 0.9.0\n")
    assert filter_docs.version_added(written, tmp_path) == "0.9.0"
    assert filter_docs.version_added(tmp_path / "bc_new.yml", tmp_path) == "1.2.0"


def test_every_filter_has_a_sidecar_that_the_real_ansible_doc_renders(tmp_path):
    names = sorted(filter_docs.filters())
    assert sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")) == names
    assert filter_docs.main(["--check"]) == 0  # each sidecar is what its docstring and signature make
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # none of the project's settings: the collection's only
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-t", "filter", "--json",
                          *("%s.%s" % (FQCN, n) for n in names)], capture_output=True, text=True, env=env, timeout=300,
                         cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    docs = json.loads(out.stdout)
    assert sorted(docs) == sorted("%s.%s" % (FQCN, n) for n in names)
    for name, doc in docs.items():
        assert doc["doc"]["short_description"] and doc["doc"]["options"]["_input"], name
        assert "%s.%s" % (FQCN, name.split(".")[-1]) in doc["examples"], name  # named by its FQCN
