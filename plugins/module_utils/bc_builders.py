# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tuning's build pool: processes that build Triton configs ahead of their timing (bc_tuner), and how many of
them the host and the GPU hold."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_kernels import one_line
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import GIB, call_bytes, triton_call_bytes


class BuildersFailed(RuntimeError):
    """The build processes could not start or broke (a set-up that raised, one that died): the tuning builds in its own
    process instead."""


def _builder_main(parent: int, conn: Any, setup: Callable[..., Callable[[Any], None]], args: tuple[Any, ...]) -> None:
    """A build process: end with the sweep (PR_SET_PDEATHSIG, SIGKILL when its parent exits: no orphan keeps a CUDA
    context or a core past a killed sweep), run `setup(*args)` and say it is up (""), or why not; then build each
    (index, config) it is sent and answer (index, "" or why not), until its pipe closes."""
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)
    except (AttributeError, OSError):  # elsewhere: close() at the tuning's end is the only bound
        pass
    if os.getppid() != parent:  # the sweep ended before the line above
        os._exit(1)
    try:
        build = setup(*args)
    except Exception as err:
        conn.send(one_line(err))
        return
    conn.send("")
    while True:
        try:
            index, config = conn.recv()
        except (EOFError, OSError, TypeError):  # closed, or told to stop (None)
            return
        try:
            build(config)
            conn.send((index, ""))
        except Exception as err:
            conn.send((index, one_line(err)))


class Builders:
    """`width` processes that build the tuning's configs ahead of their timing. A Triton build is seconds of one core
    and the timing needs the GPU alone; the H200's host has 16 cores. Each process runs `setup(*args)` once, which
    returns the function that builds one config (the kernel run once at each tuned size under it, which leaves the
    build in Triton's on-disk cache, where the timing process finds it; it raises where the config cannot be built).
    Spawned, not forked (CUDA cannot be used in a forked child), with torch's reductions, so CUDA tensors in `args`
    are shared through CUDA IPC, not copied; each ends with the sweep. One pipe per process, no pool: a process that
    dies is seen at once (multiprocessing.Pool loses the job it held and can hang in its terminate). The constructor
    returns once every process is up (its set-up done: nothing of theirs runs beside a timing afterwards), by
    `deadline`, else BuildersFailed. close() ends them."""

    def __init__(self, width: int, setup: Callable[..., Callable[[Any], None]], args: tuple[Any, ...], deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import torch.multiprocessing as mp  # noqa: PLC0415 - torch's reductions: CUDA tensors cross by IPC

        ctx = mp.get_context("spawn")
        self.width, self.clock = width, clock
        self.procs: list[tuple[Any, Any]] = []
        try:
            for _i in range(width):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_builder_main, args=(os.getpid(), theirs, setup, args), daemon=True)
                proc.start()
                theirs.close()
                self.procs.append((proc, mine))
            for up, (proc, conn) in enumerate(self.procs):
                why = self._answer(proc, conn, deadline, "%d of %d build processes were up within the budget" % (up, width))
                if why:
                    raise BuildersFailed(why)
        except BaseException:
            self.close()
            raise

    def _answer(self, proc: Any, conn: Any, deadline: float, late: str) -> Any:
        """The next message of one process; BuildersFailed where it ended first, or `late` at the deadline."""
        while True:
            left = deadline - self.clock()
            if left <= 0:
                raise BuildersFailed(late)
            if conn.poll(min(left, 1.0)):
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    break
            if not proc.is_alive() and not conn.poll():
                break
        raise BuildersFailed("a build process ended before it answered (exit code %s)" % proc.exitcode)

    def build(self, configs: list[Any], deadline: float) -> dict[int, str]:
        """Build `configs` at once: {index: "" built, or why not}; an index missing was not built by `deadline`
        (the processes are then ended: what they were building would share the GPU with the timing). BuildersFailed
        where a process died (its config is lost, and waiting for it would spend the budget)."""
        from multiprocessing.connection import wait  # noqa: PLC0415

        if not self.procs:
            raise BuildersFailed("the build processes were ended")
        pending = list(enumerate(configs))
        busy: dict[Any, Any] = {}  # conn -> its process
        out: dict[int, str] = {}
        for proc, conn in self.procs:
            if pending:
                conn.send(pending.pop(0))
                busy[conn] = proc
        while busy:
            left = deadline - self.clock()
            if left <= 0:
                self.close()
                return out
            for conn in wait(list(busy), timeout=min(left, 1.0)):
                try:
                    index, why = conn.recv()
                except (EOFError, OSError):
                    self.close()
                    raise BuildersFailed("a build process died while building (a crash in Triton's compiler?)") from None
                out[index] = why
                if pending:
                    conn.send(pending.pop(0))
                else:
                    del busy[conn]
            if any(not proc.is_alive() for proc in busy.values()):
                self.close()
                raise BuildersFailed("a build process died while building (a crash in Triton's compiler?)")
        return out

    def close(self) -> None:
        procs, self.procs = self.procs, []
        for proc, conn in procs:
            conn.close()  # a process waiting for work reads the end and returns
            if proc.is_alive():
                proc.terminate()
        for proc, _conn in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def build_width(torch: Any, s: dict[str, int], m: int, device: Any, cpus: int | None = None) -> int:
    """How many build processes the tuning starts: a core left to the sweep itself, at most 8, and no more than the
    GPU's free memory holds beside the sweep's own timing and a GiB to spare (each: a CUDA context and one call's
    buffers at the largest tuned size, as the sweep's estimate counts them; free memory is read now, with a server
    beside it where the sweep runs beside one); below 2 it builds in its own process (0)."""
    cores = (cpus if cpus is not None else len(os.sched_getaffinity(0))) - 1
    call = call_bytes(s, m, 2) + triton_call_bytes(s, m, 2)
    each = call + 768 * 1024 * 1024
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0
    # beside the builders: the sweep's own timing at that size (its call's buffers, twice for the graphs) and a GiB
    width = min(cores, 8, max(0, (free - GIB - 2 * call) // each))
    return int(width) if width >= 2 else 0
