"""Test harness only, never the product's: ansible-core's AnsiballZ payload cache shared by the suite's runs.

ansible-core builds each module's payload (the module and its module_utils, zipped) once per run and keeps it in the
run's own temporary directory, `ansiballz_cache` under DEFAULT_LOCAL_TMP (executor/module_common.py, 2.19:
`_find_module_utils`); a lab cycle builds 12, 3.4 s of controller CPU that the suite's ~150 runs spent again each
time (docs/timings.md). Loaded by the lab cases' runs (tests/integration/conftest.py `env`) and the unit tests' ad-hoc
runs (tests/unit/test_modules_adhoc.py `adhoc`), this callback makes that directory a link to one shared by the runs,
so each payload is built by ansible-core once, then read back as a later task of the same run would; ansible-core's
own lock (a flock per payload, 2.19's named_mutex) and rename keep parallel runs apart.

Shared only where it cannot be stale:
- the directory is keyed by what a payload is built from: ansible-core (its version and path) and Python; the content
  of every module and module_util of this collection and its meta/runtime.yml (module_utils redirects); the module
  and module_utils search paths that come before ansible-core's own; each installed collection's MANIFEST.json;
- only for runs in which inference_ops.benchmark_cycle is found at BC_ANSIBALLZ_ROOT (the clone under test): a run of
  an installed copy of the collection (tests/integration/test_collection.py, the execution environment) builds its
  own payloads, so a file missing from the built collection is never hidden by a payload built from the clone;
- only in a directory of this user's that no one else may write (a payload is a pickle ansible-core loads).
Without BC_ANSIBALLZ_CACHE and BC_ANSIBALLZ_ROOT, or where anything of this cannot be read, it does nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.utils.collection_loader import AnsibleCollectionConfig

COLLECTION = Path("ansible_collections/inference_ops/benchmark_cycle")
# what ansible-core's search for a module or module_util reads before its own (module_common.py: recursive_finder)
SEARCH = ("ANSIBLE_MODULE_UTILS", "ANSIBLE_LIBRARY")


def settings(root: Path) -> dict[str, str]:
    """The environment in which a run of the clone at `root` loads this callback and shares its payloads: the one
    place the suite's runs take it from (BC_ANSIBALLZ_CACHE, when the caller gives it: the shared directory)."""
    return {"ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).resolve().parent), "BC_ANSIBALLZ_ROOT": str(root),
            "BC_ANSIBALLZ_CACHE": os.environ.get("BC_ANSIBALLZ_CACHE") or str(root / ".lab/ansiballz")}


def found_collection(paths: list[str]) -> Path | None:
    """Where ansible-core finds this collection: the first collection path that holds it (its finder's order)."""
    for path in paths:
        candidate = Path(path) / COLLECTION
        if candidate.is_dir():
            return candidate.resolve()
    return None


def key(root: Path, paths: list[str]) -> str:
    """What a payload is built from: the installation, the collection's modules and module_utils (their content),
    the search paths before ansible-core's own, the installed collections."""
    digest = hashlib.sha256(f"{ansible.__version__} {Path(ansible.__file__).resolve()} {sys.version}".encode())
    digest.update(repr([(name, os.environ.get(name, "")) for name in SEARCH]).encode())
    sources = [root / "meta/runtime.yml", *sorted((root / "plugins/modules").glob("*.py")),
               *sorted((root / "plugins/module_utils").glob("*.py"))]
    for path in sources:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root)} {len(data)}\n".encode() + data)
    collections = dict.fromkeys(os.path.realpath(p) for p in paths)  # a path given twice is one path
    for manifest in sorted(m for p in collections for m in Path(p).glob("ansible_collections/*/*/MANIFEST.json")):
        st = manifest.stat()
        digest.update(f"{manifest} {st.st_size} {st.st_mtime_ns} {st.st_ino}\n".encode())
    return digest.hexdigest()[:16]


def private(path: Path) -> bool:
    """A directory of this user's, no link, that no one else may write."""
    st = path.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def share(shared: str, root: str) -> None:
    """This run's payload cache made a link to the shared one, where it may be shared (the module's docstring)."""
    paths = list(AnsibleCollectionConfig.collection_paths or [])
    if found_collection(paths) != Path(root).resolve():
        return
    base = Path(shared)
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = base / key(Path(root), paths)
    target.mkdir(mode=0o700, exist_ok=True)
    if not (private(base) and private(target)):
        return
    link = Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"
    if not link.exists() and not link.is_symlink():
        link.symlink_to(target)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bc_shared_ansiballz"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        shared, root = os.environ.get("BC_ANSIBALLZ_CACHE"), os.environ.get("BC_ANSIBALLZ_ROOT")
        if not shared or not root:
            return
        try:
            share(shared, root)
        except OSError:
            pass  # nothing shared: the run builds its own payloads, as without this callback
