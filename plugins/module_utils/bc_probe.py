# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a probe of an inference server needs besides its own question (inference_health asks whether it serves,
inference_load_info how much work it holds): its base URL and bounds checked, one HTTP call with the keys in turn,
and the unit's state and journal read with argument lists (no shell)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve, with_health_timeout
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import (
    UNIT_PROPERTIES,
    HttpResult,
    journal_stage,
    queued_job,
    request,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    CommandError,
    check_timeout,
    main_process,
    redact,
    unit_show,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run

# the options both probes take besides the server's own (bc_release.SERVER_SPEC); documented once, in the doc
# fragment inference_wait
WAIT_SPEC: dict[str, Any] = {
    "restarts_baseline": {"type": "int"},
    "deadline": {"type": "float"},
    "failures_since": {"type": "float", "default": 0},
    "journal_lines": {"type": "int", "default": 400},
    "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
}


def problem(p: dict[str, Any]) -> str:
    """What is wrong with a probe's URL, bounds or journal window, in words naming the option and the fix; "" when
    nothing is."""
    try:
        parts = urlsplit(p["url"])
        _port = parts.port
        host = parts.hostname
    except ValueError as err:
        return ("url %r has an invalid port or address (%s); give e.g. http://127.0.0.1:30001 or http://[::1]:30001"
                % (p["url"], err))
    if parts.scheme not in ("http", "https") or not host:
        return "url %r is not an http(s) URL with a host; give e.g. http://127.0.0.1:30001" % p["url"]
    if parts.path not in ("", "/"):
        return "url %r has a path; give the base URL only, the engine profile adds the endpoint" % p["url"]
    try:
        check_timeout(p["timeout"], "timeout", 3600)
        if p["deadline"] is not None:
            check_timeout(p["deadline"], "deadline", 1e11)
    except ValueError as err:
        return str(err)
    if p["journal_lines"] < 1:
        return "journal_lines must be >= 1, got %d" % p["journal_lines"]
    return ""


def call(p: dict[str, Any], method: str, url: str, timeout: float, payload: dict[str, Any] | None = None) -> HttpResult:
    """One HTTP call, with O(api_key) first and its fallbacks only on a 401 or 403."""
    keys = [p["api_key"] or "", *p["api_key_fallbacks"]]
    return request(method, url, timeout, payload, keys, p["validate_certs"])


def cut(timeout: float, deadline: float | None) -> float:
    """A request's timeout cut at what is left of its wait's deadline (at least 1 s): the wait overruns its deadline
    by at most this one request."""
    return timeout if deadline is None else max(1.0, min(timeout, deadline - time.time()))


def unit_facts(unit: str, engine: dict[str, Any], lines: int, read_journal: bool,
               failures_since: float = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(unit_state, journal facts) of the unit. The journal is read only where the caller asks (a ready probe needs
    no stage and costs less); it is a hint, and one that cannot be read is left out. Raises bc_host.CommandError when
    systemctl does not answer."""
    state = unit_show(unit, ("Id", *UNIT_PROPERTIES), 15, numbers=True)
    if state.get("ActiveState") in ("deactivating", "inactive"):  # a restart's first half, or a start queued: the job says
        service = unit if unit.endswith(".service") else unit + ".service"  # list-jobs matches full names
        rc, out, _err = host_run(["systemctl", "list-jobs", "--no-legend", "--no-pager", "--", service], 15)
        state["JobType"] = queued_job(out, service) if rc == 0 else ""
    facts: dict[str, Any] = {"stage": "", "stage_line": "", "journal_failure": ""}
    start_us = state.get("InactiveExitTimestampMonotonic")  # the start job began (ExecStartPre included)
    if isinstance(start_us, int) and start_us > 0 and state.get("ActiveState") != "inactive":
        facts["since_start_s"] = round(time.clock_gettime(time.CLOCK_MONOTONIC) - start_us / 1e6, 1)
    invocation = state.get("InvocationID")
    if invocation and read_journal:
        cmd = ["journalctl", "--no-pager", "-o", "short-unix", "-n", str(lines), "_SYSTEMD_INVOCATION_ID=%s" % invocation]
        try:
            rc, out, _err = host_run(cmd, 15)
        except CommandError:  # the journal is a hint; the unit state above is the verdict
            rc, out = 1, ""
        if rc == 0:
            stage, stage_line, failure = journal_stage(out.splitlines(), engine, failures_since)
            facts.update(stage=stage, stage_line=stage_line, journal_failure=failure)
    return state, facts


def start(module: Any, bad: str) -> tuple[dict[str, Any], str, str, dict[str, Any] | None]:
    """A probe's start: its parameters' problem (`bad`) refused; the engine's profile (and the note when its version is
    not a known one), scaled to the health-check timeout the server really runs with; the base URL; the server's main
    process (what it runs with), read once, or None without a unit."""
    p = module.params
    if bad:
        module.fail_json(msg=bad)
    try:
        prof, note = resolve(p["engine"], p["engine_version"])
    except ValueError as err:
        module.fail_json(msg=str(err))
    server = main_process(p["unit"]) if p["unit"] else None
    return with_health_timeout(prof, server["environ"] if server else None), note, p["url"].rstrip("/"), server


def read_unit(module: Any, prof: dict[str, Any], read_journal: bool) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """unit_facts of the probe's unit (None and no journal without one); systemctl that does not answer fails the
    probe, naming the command."""
    p = module.params
    if not p["unit"]:
        return None, {"journal_failure": ""}
    try:
        return unit_facts(p["unit"], prof, p["journal_lines"], read_journal, p["failures_since"])
    except CommandError as exc:
        module.fail_json(msg=str(exc))
        raise  # (fail_json exits)


def report(module: Any, result: dict[str, Any], base: str, note: str, unit_state: dict[str, Any] | None,
           jfacts: dict[str, Any]) -> None:
    """What every probe's result carries besides its own answer: the URL, the host's clock, the profile's note (also a
    warning), whether the wait's deadline passed, the unit's state and journal facts."""
    p = module.params
    result.update(changed=False, url=base, host_time=round(time.time(), 3))
    if note:
        result["profile_note"] = note
        module.warn(note)
    if p["deadline"] is not None:
        result["deadline_passed"] = time.time() >= p["deadline"]
    if unit_state is not None:
        result.update(jfacts, unit_state=unit_state)


def end(module: Any, result: dict[str, Any], texts: tuple[str, ...]) -> None:
    """The probe's end: every key and secret taken out of its `texts`; a failed result fails the task with its reason."""
    p = module.params
    secrets = [s for s in [p["api_key"], *p["api_key_fallbacks"], *p["secrets"]] if s]
    for key in texts:
        if isinstance(result.get(key), str):
            result[key] = redact(result[key], secrets)
    if result["failed"]:
        module.fail_json(msg=result["reason"], **{k: v for k, v in result.items() if k != "failed"})
    module.exit_json(**result)
