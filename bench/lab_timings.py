#!/usr/bin/env python3
"""Timing benchmarks of the cycle on the lab (real systemd, real llama-server / SGLang double,
real ansible-playbook through ansible-runner, whose job events carry timestamps).

    .venv/bin/python bench/lab_timings.py            (after ./tasks lab-up && ./tasks provision)

Measures, with the targets of the issues:
  detection lag   server first answers ready (a 20 Hz poller on the published port) -> the
                  readiness task done                                     (<= delay + 1 s)
  dead-unit lag   the server is SIGKILLed while loading -> the readiness task failed (<= one delay)
  probe cost      per probe of an until-loop: task time / attempts - delay - the HTTP call itself
  orchestration   cycle wall time - (drain + sweep + start-to-ready)           (< 10 s)
Prints a JSON summary; docs/timings.md records the numbers with this command.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))
from inject import kill_during_start_pre  # noqa: E402 - the lab's own fault injection

HOSTS = yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]
HOST, HV = next(iter(HOSTS.items()))
DELAY = 1


def ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def runner(playbook: str, extravars: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], float, float]:
    pdd = Path(tempfile.mkdtemp(prefix="bc-bench-"))
    (pdd / "project").symlink_to(ROOT)
    (pdd / "env").mkdir()
    (pdd / "env" / "envvars").write_text(json.dumps({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                                     "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}))
    events: list[dict[str, Any]] = []
    t0 = time.time()
    r = ansible_runner.run(private_data_dir=str(pdd), playbook=playbook, inventory=str(ROOT / "inventory/lab"),
                           extravars=dict(extravars, bc_target=HOST), event_handler=lambda e: events.append(e) or True,
                           quiet=True)
    return r, events, t0, time.time()


def task_events(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event_data", {}).get("task") == name]


def first_ready(port: int, stop: threading.Event, out: dict[str, float]) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.2) as resp:
                if resp.status == 200 and "t" not in out:
                    out["t"] = time.time()
        except OSError:
            out.pop("t", None)  # not ready (again): only the last transition to ready counts
        stop.wait(0.05)


def detection_lag() -> dict[str, Any]:
    stop, seen = threading.Event(), {}
    thread = threading.Thread(target=first_ready, args=(HV["lab_http_port"], stop, seen), daemon=True)
    thread.start()
    _r, events, _t0, _t1 = runner("benchmark_cycle.yml", {"bc_start_delay_s": 4, "bc_readiness_delay_s": DELAY})
    stop.set()
    thread.join()
    done = [e for e in task_events(events, "Wait for the server to be ready") if e["event"] == "runner_on_ok"][-1]
    probe = done["event_data"]["res"]
    return {"lag_s": round(ts(done) - seen["t"], 3), "target_s": DELAY + 1, "probes": probe.get("attempts"),
            "delay_s": DELAY}


def dead_unit_lag() -> dict[str, Any]:
    extra = {"bc_start_delay_s": 3, "bc_readiness_delay_s": DELAY, "bc_readiness_timeout_s": 120}
    killer_done: dict[str, float] = {}

    def killer() -> None:
        t = kill_during_start_pre(HV["lab_container"], "llama-lab")
        if t is not None:
            killer_done["t"] = t

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    _r, events, _t0, _t1 = runner("benchmark_cycle.yml", extra)
    thread.join(timeout=5)
    failed = [e for e in task_events(events, "Wait for the server to be ready") if e["event"] in ("runner_on_ok", "runner_on_failed")]
    first = failed[0]
    res = first["event_data"]["res"]
    return {"lag_s": round(ts(first) - killer_done["t"], 3), "target_s": DELAY, "phase": res.get("phase"),
            "reason": res.get("reason")}


def probe_cost_and_overhead() -> dict[str, Any]:
    r, events, t0, t1 = runner("benchmark_cycle.yml", {"bc_start_delay_s": 3, "bc_readiness_delay_s": DELAY})
    assert r.status == "successful", r.status

    def duration(name: str) -> float:
        evs = [e for e in task_events(events, name) if e["event"] in ("runner_on_ok", "runner_on_failed", "runner_on_skipped")]
        if not evs:  # a renamed task must not silently count as 0 s
            raise SystemExit("no task named %r in the run: update bench/lab_timings.py" % name)
        return sum(e["event_data"].get("duration", 0) or 0 for e in evs)

    wait = [e for e in task_events(events, "Wait for the server to be ready") if e["event"] == "runner_on_ok"][-1]
    retries = [e for e in task_events(events, "Wait for the server to be ready") if e["event"] == "runner_retry"]
    attempts = wait["event_data"]["res"]["attempts"]
    http_ms = statistics.mean([e["event_data"]["res"].get("latency_ms", 0) for e in retries] or [0])
    wait_s = wait["event_data"]["duration"]
    per_probe_s = (wait_s - (attempts - 1) * DELAY) / attempts
    drain = sum(duration(n) for n in ("Wait for in-flight requests to finish", "Stop the unit and prove it stopped"))
    sweep = duration("Sweep tp1 torch")
    start_task = next(e for e in task_events(events, "Start the unit") if e["event"] == "runner_on_ok")
    start_to_ready = ts(wait) - ts(start_task) + start_task["event_data"]["duration"]
    wall = t1 - t0
    return {
        "probe": {"attempts": attempts, "per_probe_s": round(per_probe_s, 3), "http_ms": round(http_ms, 1),
                  "overhead_beyond_http_ms": round(per_probe_s * 1000 - http_ms, 1), "target_ms": 50},
        "orchestration": {"wall_s": round(wall, 2), "drain_s": round(drain, 2), "sweep_s": round(sweep, 2),
                          "start_to_ready_s": round(start_to_ready, 2),
                          "overhead_s": round(wall - drain - sweep - start_to_ready, 2), "target_s": 10},
    }


def main() -> None:
    out = {"host": HOST, "detection": detection_lag(), "dead_unit": dead_unit_lag()}
    out.update(probe_cost_and_overhead())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
