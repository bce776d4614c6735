"""The results_dir action plugin (plugins/action/results_dir.py): a directory on the controller proven writable."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.action.results_dir import ensure_writable


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_missing_directory_and_its_parents_are_created_0755_whatever_the_umask(tmp_path):
    target = tmp_path / "a" / "b" / "results"
    old = os.umask(0)
    try:
        assert ensure_writable(str(target), check_mode=False) == (True, "")
    finally:
        os.umask(old)
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", target)] == [0o755] * 3
    assert list(target.iterdir()) == []  # the probe file was removed


def test_the_hosts_of_a_batch_creating_it_at_once_all_succeed(tmp_path):
    """Each host of a batch runs the action in its own worker process, at once: one creates each directory, the
    others find it made meanwhile and go on (a real race: 8 processes on one start signal, 10 rounds)."""
    import multiprocessing

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


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: p.write_text("x"), "it is not a directory"),  # a file where the directory should be
    (lambda p: None, "cannot create it: Not a directory"),  # its parent is a file (the lab case: /etc/hostname/results)
], ids=["a-file", "parent-a-file"])
def test_a_path_that_cannot_be_the_directory_is_refused_with_the_reason(tmp_path, make, problem):
    target = tmp_path / "results"
    if problem.startswith("cannot create"):
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / "results"
    else:
        make(target)
    created, said = ensure_writable(str(target), check_mode=False)
    assert (created, said) == (False, problem)


def test_check_mode_creates_and_writes_nothing_and_still_refuses_what_is_not_a_directory(tmp_path):
    missing = tmp_path / "new" / "results"
    assert ensure_writable(str(missing), check_mode=True) == (True, "")
    assert not (tmp_path / "new").exists()
    assert ensure_writable(str(tmp_path), check_mode=True) == (False, "")
    (tmp_path / "file").write_text("x")
    assert ensure_writable(str(tmp_path / "file"), check_mode=True) == (False, "it is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no probe file written


@pytest.mark.parametrize("path", ["results", "", "./r"])
def test_a_relative_path_is_refused(path):
    assert ensure_writable(path, check_mode=False)[1].endswith("is not an absolute path")
