"""Test harness only, never the product's: ansible-core's AnsiballZ payload cache shared by the suite's runs.

ansible-core builds each module's payload (the module and its module_utils, zipped) once per run and keeps it in the
run's own temporary directory, `ansiballz_cache` under DEFAULT_LOCAL_TMP (executor/module_common.py, 2.19:
`_find_module_utils`); a lab cycle builds 12, 3.4 s of controller CPU that the suite's ~150 runs spent again each
time (docs/timings.md). Loaded by the lab cases' runs (tests/integration/conftest.py `env`), this callback makes that
directory a link to one shared by the runs, so each payload is built by ansible-core once, then read back as a
later run of the same run would; ansible-core's own lock and rename keep parallel runs apart.

Shared only where it cannot be stale:
- the directory is keyed by the ansible-core installation and Python, the stat (size, mtime) of every file of this
  collection's plugins/, and each installed collection's MANIFEST.json: an edit makes a new key;
- only for runs in which inference_ops.benchmark_cycle is found at BC_ANSIBALLZ_ROOT (the clone under test): a run of
  an installed copy of the collection (tests/integration/test_collection.py, the execution environment) builds its
  own payloads, so a file missing from the built collection is never hidden by a payload built from the clone.
Without BC_ANSIBALLZ_CACHE and BC_ANSIBALLZ_ROOT it does nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.utils.collection_loader import AnsibleCollectionConfig

COLLECTION = Path("ansible_collections/inference_ops/benchmark_cycle")


def found_collection(paths: list[str]) -> Path | None:
    """Where ansible-core finds this collection: the first collection path that holds it (its finder's order)."""
    for path in paths:
        candidate = Path(path) / COLLECTION
        if candidate.is_dir():
            return candidate.resolve()
    return None


def key(root: Path, paths: list[str]) -> str:
    """What a payload is built from: the installation, the collection's plugins, the installed collections."""
    digest = hashlib.sha256(f"{ansible.__version__} {Path(ansible.__file__).resolve()} {sys.version}".encode())
    for path in sorted((root / "plugins").rglob("*")) + sorted(m for p in paths for m in Path(p).glob("ansible_collections/*/*/MANIFEST.json")):
        if path.is_file():
            st = path.stat()
            digest.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bc_shared_ansiballz"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        shared, root = os.environ.get("BC_ANSIBALLZ_CACHE"), os.environ.get("BC_ANSIBALLZ_ROOT")
        paths = list(AnsibleCollectionConfig.collection_paths or [])
        if not shared or not root or found_collection(paths) != Path(root).resolve():
            return
        target = Path(shared) / key(Path(root), paths)
        target.mkdir(parents=True, exist_ok=True)
        link = Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target)
