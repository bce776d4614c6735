"""The lab cases share ansible-core's module payloads between their runs (tests/integration/callback/
bc_shared_ansiballz.py). A payload shared where it could be stale would test another build than the one under test:
these runs of the real ansible-playbook prove it is shared for the clone's collection only, and that an edit of a
plugin, or another installation, gets a key of its own."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALLBACKS = ROOT / "tests/integration/callback"
BIN = Path(sys.executable).parent
PLAY = "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"

spec = importlib.util.spec_from_file_location("bc_shared_ansiballz", CALLBACKS / "bc_shared_ansiballz.py")
shared = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shared)


def run(tmp: Path, cache: Path, root: Path) -> str:
    (tmp / "play.yml").write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), BC_ANSIBALLZ_CACHE=str(cache),
               BC_ANSIBALLZ_ROOT=str(root), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp / "play.yml")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def payloads(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob("*/*") if not p.name.endswith(".lock"))


def test_the_clones_runs_build_a_payload_once_and_share_it(tmp_path):
    cache = tmp_path / "cache"
    run(tmp_path, cache, ROOT)
    first = {p: p.stat().st_mtime_ns for p in cache.glob("*/*")}
    assert payloads(cache) == ["ansible.modules.ping-ZIP_DEFLATED-none"]
    run(tmp_path, cache, ROOT)
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*/*")} == first  # read back, not built again


def test_a_run_of_another_copy_of_the_collection_shares_nothing(tmp_path):
    cache = tmp_path / "cache"
    run(tmp_path, cache, tmp_path)  # the collection is found in the clone, not at this root
    assert not cache.exists()


def test_an_edited_module_or_another_installation_gets_a_key_of_its_own(tmp_path, monkeypatch):
    (tmp_path / "plugins/modules").mkdir(parents=True)
    (tmp_path / "plugins/module_utils").mkdir()
    (tmp_path / "meta").mkdir()
    module, util, runtime = tmp_path / "plugins/modules/m.py", tmp_path / "plugins/module_utils/u.py", tmp_path / "meta/runtime.yml"
    for path in (module, util, runtime):
        path.write_text("one")
    paths = [str(ROOT / "collections")]
    keys = {shared.key(tmp_path, paths)}
    assert shared.key(tmp_path, paths) in keys  # the same sources, the same key
    for path in (module, util, runtime):
        st = path.stat()
        path.write_text("two")  # the same size and, put back, the same mtime: the content is what counts
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        keys.add(shared.key(tmp_path, paths))
    monkeypatch.setenv("ANSIBLE_MODULE_UTILS", str(tmp_path))  # a module_utils path searched before ansible-core's
    keys.add(shared.key(tmp_path, paths))
    monkeypatch.delenv("ANSIBLE_MODULE_UTILS")
    keys.add(shared.key(tmp_path, []))  # the installed collections count
    assert len(keys) == 6
    assert shared.key(tmp_path, paths + paths) == shared.key(tmp_path, paths)  # a path given twice is one path


def test_a_cache_others_may_write_is_never_shared(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    run(tmp_path, cache, ROOT)
    assert payloads(cache) == []  # a pickle another user could plant is never loaded


def test_the_collection_is_where_the_first_path_that_holds_it_says(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    (second / shared.COLLECTION).mkdir(parents=True)
    assert shared.found_collection([str(first), str(second)]) == (second / shared.COLLECTION).resolve()
    (first / shared.COLLECTION).mkdir(parents=True)
    assert shared.found_collection([str(first), str(second)]) == (first / shared.COLLECTION).resolve()
    assert shared.found_collection([]) is None
