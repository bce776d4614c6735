# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's proof that the sweep's backends import (`import torch` costs seconds of CPU a check): a check that
imported them all records what they were imported from, and the next check imports nothing while all of it is the same.

What is recorded (`installation` and `loaded`): the interpreter and its version, its import path, the environment
that steers imports and the loader (PYTHON*, LD_*, CUDA_HOME, CUDA_PATH), the kernels' own code, every distribution's
metadata and the directories on the path (an install, an upgrade, a module added), where each top-level package
imported is found on the path (a package that shadows it), and every file the import loaded - each module's
__file__ and each shared library mapped - by device, inode, mode, size, mtime and ctime (an edited editable install,
a damaged, removed or unreadable package, a new system library). Anything that cannot be read proves nothing. Not
proven: what the import did not load (a CUDA kernel library loaded at its first call), as the import never did.
A sweep that does not complete, or where a backend did not run, forgets the proof (`forget`, bc_sweeprun.sweep), and
the module reads a proof only from a file and directory of its own user that no one else may write (`read_proof`)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import stat
import sys
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_backends import import_errors

# beside the preflight's output (the host's results directory)
PROOF_NAME = "imports-proven.json"
# the names of a distribution's metadata on sys.path: pip writes a new one for each install and upgrade
DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")
ENV_PREFIXES = ("PYTHON", "LD_", "CUDA_HOME", "CUDA_PATH")
# the staged package's root: this file is <root>/ansible_collections/<ns>/<name>/plugins/module_utils/bc_imports.py
STAGE_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 5))


def identity(path: str) -> list[Any] | None:
    """[path, device, inode, mode, size, mtime_ns, ctime_ns] of a file, None when it cannot be read. The ctime moves
    with every change to the file, its content or its permissions, and cannot be set back."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def staged(path: str) -> bool:
    return path == STAGE_ROOT or path.startswith(STAGE_ROOT + os.sep)


def installation() -> dict[str, Any] | None:
    """What the interpreter imports from, short of the files themselves; None when part of it cannot be read."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = hashlib.sha256()
    dists = []
    try:
        for name in sorted(os.listdir(here)):
            if name.endswith(".py"):
                with open(os.path.join(here, name), "rb") as fh:
                    code.update(name.encode() + b"\0" + fh.read())
        path = [p for p in sys.path if p and not staged(os.path.abspath(p))]
        for entry in path:
            if not os.path.exists(entry):
                dists.append("%s absent" % entry)
                continue
            if os.path.isdir(entry):
                dists.append("%s %d" % (entry, os.stat(entry).st_mtime_ns))  # a module or package added or removed
                with os.scandir(entry) as found:
                    dists.extend(sorted("%s/%s %d" % (entry, e.name, e.stat(follow_symlinks=False).st_mtime_ns)
                                        for e in found if e.name.endswith(DIST_SUFFIXES)))
    except OSError:
        return None
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) and k != "PYTHONPATH"}
    return {"python": os.path.realpath(sys.executable), "version": sys.version, "path": path, "env": env,
            "code": code.hexdigest(), "dists": hashlib.sha256("\n".join(dists).encode()).hexdigest()}


def origin(name: str) -> str | None:
    """Where the path finds a top-level package now, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # a finder's own error (any): where it is found is unknown
        return None
    return spec.origin if spec else None


def loaded() -> dict[str, Any] | None:
    """What this process imported: where each top-level package was found, and the identity of every file it
    imported or mapped, short of the staged package; None when one cannot be read."""
    # a module object with a relative __file__ is no file (torch's _ops, _classes): its code is in files that are
    mods = {n: f for n, f in ((n, getattr(m, "__file__", None)) for n, m in list(sys.modules.items())) if isinstance(f, str) and os.path.isabs(f)}
    files = set(mods.values())
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            files.update(line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6)
    except OSError:
        return None
    files = {f for f in files if f.startswith("/") and not f.endswith("(deleted)") and not staged(f)}
    out = [identity(f) for f in sorted(files)]
    # where the path finds each top-level package (frozen and built-in modules are the interpreter's, recorded above)
    tops = sorted([n, o] for n, o in ((n, origin(n)) for n in mods if "." not in n) if o and o.startswith("/") and not staged(o))
    if not out or any(i is None for i in out):
        return None
    return {"files": out, "tops": tops}


def holds(proof: dict[str, Any], here: dict[str, Any] | None, names: list[str]) -> bool:
    """The proof stands for these backends here: the same installation, every top-level package found where it was,
    every file it loaded unchanged."""
    files, tops = proof.get("files"), proof.get("tops")
    if here is None or proof.get("installation") != here or not set(names) <= set(proof.get("imported") or ()):
        return False
    if not (isinstance(files, list) and files and isinstance(tops, list) and tops):
        return False
    return (all(isinstance(f, list) and f and identity(str(f[0])) == f for f in files)
            and all(isinstance(t, list) and len(t) == 2 and origin(str(t[0])) == t[1] for t in tops))


def proven_import_errors(names: list[str], proof: dict[str, Any]) -> dict[str, Any]:
    """import_errors, run only where `proof` does not already stand for these backends (`holds`); with a new proof
    where every one imported (None where part of it cannot be read)."""
    here = installation()
    if holds(proof, here, names):
        return {"errors": dict.fromkeys(names, ""), "proven": True}
    errors = import_errors(names)
    made = loaded() if here is not None and not any(errors.values()) else None
    return {"errors": errors, "proven": False, "proof": dict(made, installation=here, imported=sorted(names)) if made else None}


def proof_path(output: str) -> str:
    return os.path.join(os.path.dirname(output), PROOF_NAME)


def own(path: str, kind: int) -> bool:
    """A file (or directory) of this user that no one else may write, and no link."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_proof(output: str) -> dict[str, Any]:
    """The proof beside `output`, {} when absent, unreadable, not JSON, or not this user's alone (then the check
    imports)."""
    path = proof_path(output)
    if not (own(path, stat.S_IFREG) and own(os.path.dirname(path), stat.S_IFDIR)):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            proof = json.load(fh)
    except (OSError, ValueError):
        return {}
    return proof if isinstance(proof, dict) else {}


def forget(output: str | None) -> None:
    """The proof beside `output` removed (a sweep that did not complete, or where a backend did not run): the next
    check imports again."""
    if output:
        try:
            os.unlink(proof_path(output))
        except OSError:
            pass
