"""The results_dir action plugin (plugins/action/results_dir.py): a directory on the controller proven writable.
Its decision (ensure_writable) on real directories, and the action itself through the real `ansible` CLI."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.action.results_dir import PROBE_PREFIX, ensure_writable


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_missing_directory_and_its_parents_are_created_0755_whatever_the_umask(tmp_path):
    for umask, target in ((0o077, tmp_path / "a" / "b" / "results"), (0, tmp_path / "c" / "results")):
        old = os.umask(umask)
        try:
            assert ensure_writable(str(target), check_mode=False) == (True, "")
        finally:
            os.umask(old)
        made = (target.parent, target)
        assert [mode(p) for p in made] == [0o755, 0o755], (oct(umask), [oct(mode(p)) for p in made])
        assert list(target.iterdir()) == []  # the probe file was removed


def test_the_hosts_of_a_batch_creating_it_at_once_all_succeed(tmp_path):
    """Each host of a batch runs the action in its own worker process, at once: one creates each directory, the
    others find it made meanwhile and go on (a real race: 8 processes on one start signal, 10 rounds)."""
    ctx = multiprocessing.get_context("fork")

    def worker(start, out, target) -> None:
        start.wait(30)
        out.put(ensure_writable(str(target), check_mode=False))

    for round_ in range(10):
        target = tmp_path / str(round_) / "x" / "y" / "results"
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=worker, args=(start, out, target)) for _ in range(8)]
        for proc in procs:
            proc.start()
        start.set()
        answers = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(60)
        assert all(problem == "" for _created, problem in answers), answers
        assert sum(created for created, _problem in answers) >= 1 and mode(target) == 0o755


def test_an_existing_directory_is_written_and_left_as_it_was(tmp_path):
    target = tmp_path / "results"
    target.mkdir(mode=0o700)
    (target / "kept.json").write_text("{}")
    assert ensure_writable(str(target), check_mode=False) == (False, "")
    assert mode(target) == 0o700 and sorted(p.name for p in target.iterdir()) == ["kept.json"]


def test_a_symlink_to_a_directory_is_that_directory_and_one_to_nothing_is_refused(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (tmp_path / "results").symlink_to(volume)
    assert ensure_writable(str(tmp_path / "results"), check_mode=False) == (False, "")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for check_mode in (False, True):
        assert ensure_writable(str(tmp_path / "dangling"), check_mode) == (False, "a symlink to nothing")
    assert not (tmp_path / "gone").exists()


def test_a_path_that_cannot_be_the_directory_is_refused_with_the_reason(tmp_path):
    (tmp_path / "file").write_text("x")
    assert ensure_writable(str(tmp_path / "file"), check_mode=False) == (False, "not a directory")
    created, said = ensure_writable(str(tmp_path / "file" / "results"), check_mode=False)  # the lab case's /etc/hostname/results
    assert not created and said.startswith("cannot create it: [Errno 20] Not a directory") and str(tmp_path / "file") in said


def test_check_mode_creates_and_writes_nothing_and_still_refuses_what_is_not_a_directory(tmp_path):
    missing = tmp_path / "new" / "results"
    assert ensure_writable(str(missing), check_mode=True) == (True, "")
    assert not (tmp_path / "new").exists()
    assert ensure_writable(str(tmp_path), check_mode=True) == (False, "")
    (tmp_path / "file").write_text("x")
    assert ensure_writable(str(tmp_path / "file"), check_mode=True) == (False, "not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no probe file written


@pytest.mark.parametrize("path", ["results", "./r"])
def test_a_relative_path_is_refused(path):
    assert ensure_writable(path, check_mode=False) == (False, "not an absolute path")


def test_the_action_through_ansible_creates_reports_and_refuses(tmp_path, monkeypatch):
    """The action plugin itself (argument reading, ~ and $VARS, check mode, changed, the failure's msg) as a task runs
    it: the real `ansible` CLI on localhost."""
    monkeypatch.setenv("BC_TEST_RESULTS", str(tmp_path))
    made = adhoc("results_dir", {"path": "$BC_TEST_RESULTS/new/results"})
    assert made["_status"] == "CHANGED" and made["created"] is True and made["path"] == str(tmp_path / "new" / "results")
    assert mode(tmp_path / "new" / "results") == 0o755
    again = adhoc("results_dir", {"path": str(tmp_path / "new" / "results")}, check=True)
    assert again["_status"] == "SUCCESS" and again["created"] is False
    planned = adhoc("results_dir", {"path": str(tmp_path / "planned")}, check=True)
    assert planned["_status"] == "CHANGED" and not (tmp_path / "planned").exists()
    (tmp_path / "file").write_text("x")
    refused = adhoc("results_dir", {"path": str(tmp_path / "file")})
    assert refused["_status"] == "FAILED!" and refused["msg"] == f"{tmp_path / 'file'}: not a directory"
    unknown = adhoc("results_dir", {"path": str(tmp_path), "mode": "0777"})
    assert unknown["_status"] == "FAILED!" and "mode" in unknown["msg"]
    empty = adhoc("results_dir", {"path": ""})
    assert empty["_status"] == "FAILED!" and empty["msg"].startswith("path: give the results directory")
    assert not any(p.name.startswith(PROBE_PREFIX) for p in tmp_path.rglob("*"))
