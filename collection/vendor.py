"""The collections this project uses, as Galaxy artifacts made once from the ``ansible`` wheel on PyPI (#28).

Galaxy may not be reachable from a site (nor from CI here); PyPI's ``ansible`` community package carries every
collection it ships. This takes the named ones out of that wheel, rebuilds each with ``ansible-galaxy collection
build`` (its ``galaxy.yml`` written from the wheel's ``MANIFEST.json``: the wheel leaves out files that the published
``FILES.json`` lists, so the published manifest cannot be reused), and writes them with a requirements file:

    <dest>/<namespace>-<name>-<version>.tar.gz ...
    <dest>/requirements.yml      (type: file entries, relative to <dest>)

which ``ansible-galaxy collection install --offline -r <dest>/requirements.yml`` installs without any server: the
project's own ``collections/`` (``./tasks``), the execution environment's build (execution-environment.yml), and an
operator's controller (docs/operator-guide.md) all install from these files.

    python collection/vendor.py --wheel ansible-12.3.0-py3-none-any.whl --dest DIR ansible.posix awx.awx ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

# the MANIFEST.json collection_info keys that galaxy.yml takes as they are (license_file would need the file kept)
GALAXY_KEYS = ("namespace", "name", "version", "readme", "authors", "description", "license", "tags", "dependencies",
               "repository", "documentation", "homepage", "issues")


def galaxy_yml(manifest: dict[str, Any]) -> dict[str, Any]:
    """galaxy.yml for a collection from its MANIFEST.json: the keys galaxy.yml takes, empty ones left out."""
    info = manifest.get("collection_info")
    if not isinstance(info, dict) or not info.get("namespace") or not info.get("name") or not info.get("version"):
        raise ValueError("MANIFEST.json has no collection_info with namespace, name and version")
    return {k: info[k] for k in GALAXY_KEYS if info.get(k) not in (None, "", [], {})}


def extract(wheel: Path, fqcn: str, dest: Path) -> Path:
    """The files of collection ``fqcn`` in the wheel, written under dest/<namespace>/<name>; its folder."""
    namespace, _, name = fqcn.partition(".")
    prefix = f"ansible_collections/{namespace}/{name}/"
    root = dest / namespace / name
    found = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith(prefix) and not info.is_dir():
                target = root / info.filename[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
                found += 1
    if not found:
        raise SystemExit(f"vendor: {wheel.name} holds no collection {fqcn}: check COLLECTIONS in ./tasks")
    return root


def vendor(wheel: Path, names: list[str], dest: Path, galaxy: str = "ansible-galaxy", timeout_s: float = 300) -> list[Path]:
    """Build each named collection of the wheel into dest, with dest/requirements.yml; the artifacts."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.tar.gz"):
        old.unlink()
    artifacts = []
    with tempfile.TemporaryDirectory(prefix="bc-vendor-") as tmp:
        for fqcn in names:
            root = extract(wheel, fqcn, Path(tmp))
            manifest = json.loads((root / "MANIFEST.json").read_text(encoding="utf-8"))
            # JSON is YAML: no PyYAML needed where an operator runs this with the system's python3
            (root / "galaxy.yml").write_text(json.dumps(galaxy_yml(manifest), indent=1), encoding="utf-8")
            (root / "MANIFEST.json").unlink()
            (root / "FILES.json").unlink(missing_ok=True)
            subprocess.run([galaxy, "collection", "build", str(root), "--output-path", str(dest), "--force"],
                           check=True, stdout=subprocess.DEVNULL, timeout=timeout_s)
            info = manifest["collection_info"]
            artifact = dest / f"{info['namespace']}-{info['name']}-{info['version']}.tar.gz"
            if not artifact.is_file():
                raise SystemExit(f"vendor: ansible-galaxy built no {artifact.name}")
            artifacts.append(artifact)
    (dest / "requirements.yml").write_text(
        "---\n# written by collection/vendor.py: install with\n"
        "#   ansible-galaxy collection install --offline -r requirements.yml  (from this folder)\n"
        "collections:\n" + "".join(f"  - name: {a.name}\n    type: file\n" for a in artifacts), encoding="utf-8")
    return artifacts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, required=True, help="the ansible community package's wheel")
    parser.add_argument("--dest", type=Path, required=True)
    beside = Path(sys.executable).parent / "ansible-galaxy"  # the venv's, when this runs from one
    parser.add_argument("--galaxy", default=str(beside) if beside.is_file() else shutil.which("ansible-galaxy") or "ansible-galaxy")
    parser.add_argument("names", nargs="+", help="collections by FQCN")
    args = parser.parse_args(argv)
    for artifact in vendor(args.wheel, args.names, args.dest, args.galaxy):
        print(artifact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
