"""collection/vendor.py (collections as Galaxy artifacts from the ansible wheel, installed --offline) and lab/ee.py
(what the execution environment's offline build is given), with real ansible-galaxy and ansible-builder runs (#28)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "collection"))
sys.path.insert(0, str(ROOT / "lab"))
import ee
import vendor

MANIFEST = {"collection_info": {"namespace": "acme", "name": "tools", "version": "1.2.3", "readme": "README.md",
                                "authors": ["someone"], "description": "a test collection", "license": ["MIT"],
                                "license_file": None, "tags": [], "dependencies": {}, "repository": "https://x.example",
                                "documentation": "", "homepage": None, "issues": None},
            "file_manifest_file": {"name": "FILES.json"}, "format": 1}


def fake_wheel(path: Path) -> Path:
    """A wheel laid out as the ansible package's: installed collections under ansible_collections/, their published
    FILES.json naming a file the wheel left out (as the real one does: .azure-pipelines)."""
    base = "ansible_collections/acme/tools/"
    files = {"entries": [{"name": ".azure-pipelines", "ftype": "dir"}, {"name": "README.md", "ftype": "file"}]}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(base + "MANIFEST.json", json.dumps(MANIFEST))
        zf.writestr(base + "FILES.json", json.dumps(files))
        zf.writestr(base + "README.md", "# acme.tools\n")
        zf.writestr(base + "plugins/filter/double.py", "def double(x):\n    return 2 * x\n\n\nclass FilterModule:\n"
                    "    def filters(self):\n        return {'double': double}\n")
        zf.writestr("ansible/__init__.py", "")
    return path


def test_galaxy_yml_takes_what_galaxy_yml_takes_and_drops_empty_values():
    got = vendor.galaxy_yml(MANIFEST)
    assert got == {"namespace": "acme", "name": "tools", "version": "1.2.3", "readme": "README.md", "authors": ["someone"],
                   "description": "a test collection", "license": ["MIT"], "repository": "https://x.example"}
    with pytest.raises(ValueError, match="namespace, name and version"):
        vendor.galaxy_yml({"collection_info": {"namespace": "acme", "name": "tools"}})
    with pytest.raises(ValueError):
        vendor.galaxy_yml({})


def test_a_collection_from_the_wheel_installs_offline_and_loads(tmp_path):
    wheel = fake_wheel(tmp_path / "ansible-0.0.1-py3-none-any.whl")
    dest = tmp_path / "artifacts"
    (dest).mkdir()
    (dest / "acme-tools-0.0.9.tar.gz").write_text("an older artifact")  # replaced, not listed beside the new one
    artifacts = vendor.vendor(wheel, ["acme.tools"], dest, str(BIN / "ansible-galaxy"))
    assert [a.name for a in artifacts] == ["acme-tools-1.2.3.tar.gz"] and sorted(p.name for p in dest.iterdir()) == [
        "acme-tools-1.2.3.tar.gz", "requirements.yml"]
    assert yaml.safe_load((dest / "requirements.yml").read_text()) == {
        "collections": [{"name": "acme-tools-1.2.3.tar.gz", "type": "file"}]}
    # installed as the page says, from the folder, with no server
    proc = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-r", "requirements.yml",
                           "-p", str(tmp_path / "installed")], cwd=dest, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # its filter works in a real run
    proc = subprocess.run([str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                           "-m", "ansible.builtin.debug", "-a", "msg={{ 21 | acme.tools.double }}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": str(BIN) + ":/usr/bin:/bin", "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "installed"),
                               "HOME": str(tmp_path)})
    assert proc.returncode == 0 and '"msg": 42' in proc.stdout and not proc.stderr, proc.stdout + proc.stderr


def test_a_collection_the_wheel_does_not_hold_is_named(tmp_path):
    wheel = fake_wheel(tmp_path / "ansible-0.0.1-py3-none-any.whl")
    with pytest.raises(SystemExit, match=r"holds no collection acme\.missing"):
        vendor.vendor(wheel, ["acme.missing"], tmp_path / "artifacts", str(BIN / "ansible-galaxy"))


def test_the_ee_build_is_given_every_python_requirement_of_its_stages_and_collections():
    definition = ee.definition()
    wanted = ee.pip_requirements(definition)
    deps = definition["dependencies"]
    assert deps["ansible_core"]["package_pip"] in wanted and deps["ansible_runner"]["package_pip"] in wanted
    assert set(deps["python"]) <= set(wanted) and set(ee.BUILDER_PIP) <= set(wanted)
    # what ansible-builder's introspection finds in the collections (awx.awx asks for awxkit, pytz, dateutil)
    assert {"awxkit", "pytz"} <= {r.split(">")[0].split("=")[0] for r in wanted}, wanted


def test_the_ee_definition_and_its_base_agree():
    definition = ee.definition()
    assert definition["options"]["package_manager_path"] == "/usr/bin/apt-get"
    # Debian's python3 refuses ensurepip: the base carries Debian's pip instead and the step is skipped
    assert definition["options"]["skip_pip_install"] is True and "python3-pip" in ee.BASE_PACKAGES
    # every system need the EE declares (for a base without it) the base built here has
    declared = [line.split()[0] for line in definition["dependencies"]["system"]]
    assert declared and set(declared) <= set(ee.BASE_PACKAGES), declared
    assert ee.base_ref(definition).rsplit(":", 1)[1] == "bookworm"  # the suite is the tag: Python 3.11
    # the collections: the vendored requirements, their artifacts beside them in the build's /build
    assert definition["dependencies"]["galaxy"] == "collections/artifacts/requirements.yml"
    assert definition["additional_build_files"] == [{"src": "collections/artifacts", "dest": "."}]
    assert definition["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--offline"


def test_the_ee_reference_follows_its_recipe(tmp_path, monkeypatch):
    (tmp_path / "a-b-1.0.0.tar.gz").write_bytes(b"one")
    monkeypatch.setattr(ee, "ARTIFACTS", tmp_path)
    definition = ee.definition()
    first = ee.image_ref(definition)
    assert first.startswith(ee.EE_REPO + ":") and ee.image_ref(definition) == first
    (tmp_path / "a-b-1.0.0.tar.gz").write_bytes(b"rebuilt")
    assert ee.image_ref(definition) == first  # the same release rebuilt (its timestamps): the same image
    (tmp_path / "a-b-1.0.0.tar.gz").rename(tmp_path / "a-b-1.0.1.tar.gz")
    assert ee.image_ref(definition) != first  # another release: a new image
    first = ee.image_ref(definition)
    monkeypatch.setattr(ee, "BASE_PACKAGES", [*ee.BASE_PACKAGES, "rsync"])
    second = ee.image_ref(definition)
    assert second != first and ee.image_ref(definition) == second  # the base's recipe changed
    for artifact in tmp_path.iterdir():
        artifact.unlink()
    with pytest.raises(SystemExit, match="no collection artifacts"):
        ee.image_ref(definition)
