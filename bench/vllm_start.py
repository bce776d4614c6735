"""How long a real vLLM (the CPU build ./tasks sets up) takes to answer /health with 200, and the CPU its process group
used by then, started as tests/integration/test_vllm.py starts it (lab/lab.py vllm_serve), once per variant of extra flags
(docs/timings.md, "The lab's torch single-threaded": compiled against --enforce-eager).

    BC_VLLM_PYTHON=... BC_VLLM_MODEL=... .venv/bin/python bench/vllm_start.py "" "--enforce-eager"
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from lab import free_port, vllm_serve  # the lab's own way of serving its vLLM, as tests/integration/test_vllm.py does


def group_cpu(pgid: int) -> float:
    """User + system CPU of the live processes of the group, their reaped children's included."""
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, timeout=30, check=False).stdout
    total = 0.0
    for pid in out.split():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def start(python: str, model: str, extra: list[str], within_s: float = 900) -> tuple[float, float]:
    port = free_port()
    argv, env = vllm_serve(python, model, port, *extra)
    began = time.monotonic()
    with open(os.devnull, "w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while time.monotonic() - began < within_s:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return time.monotonic() - began, group_cpu(proc.pid)
            except OSError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"vLLM exited ({proc.returncode}) while starting")
            time.sleep(0.5)
        raise SystemExit(f"vLLM not healthy within {within_s:.0f} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the whole group gone already: the exit above says why
            pass
        proc.wait(timeout=60)


def main() -> None:
    python, model = os.environ.get("BC_VLLM_PYTHON"), os.environ.get("BC_VLLM_MODEL")
    if not python or not model:
        raise SystemExit("vllm_start: set BC_VLLM_PYTHON and BC_VLLM_MODEL (`.venv/bin/python lab/lab.py vllm --shell` "
                         "prints them)")
    for variant in sys.argv[1:] or [""]:
        ready, cpu = start(python, model, variant.split())
        print(f"flags {variant!r}: healthy in {ready:.1f} s, {cpu:.1f} s of CPU by then", flush=True)
        time.sleep(2)


if __name__ == "__main__":
    main()
