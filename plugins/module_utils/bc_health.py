# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One probe of an inference server, and what it means.

The I/O (HTTP, `systemctl show`, `journalctl`) is done by the caller and handed in as plain
values, so the decision (`classify`) is a pure function that the unit tests drive with the
exact answers each engine gives. The module `inference_health` is a thin shell around this.
"""

from __future__ import annotations

import json
import math
import re
import socket
import time
from typing import Any
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import profile
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import flag_on, option_values

UNIT_PROPERTIES = (
    "ActiveState", "SubState", "NRestarts", "ExecMainStatus", "ExecMainPID",
    "InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic", "InvocationID", "LoadState",
)


class HttpResult:
    """What one HTTP exchange gave: a status and body, or an error kind."""

    def __init__(self, status: int | None = None, body: str = "", error: str = "",
                 error_kind: str = "", latency_ms: float = 0.0) -> None:
        self.status = status
        self.body = body
        self.error = error
        self.error_kind = error_kind  # "refused", "timeout", "other" or ""
        self.latency_ms = latency_ms


def request(method: str, url: str, timeout: float, payload: dict[str, Any] | None = None,
            api_key: str | list[str] | None = None, validate_certs: bool = True) -> HttpResult:
    """One HTTP exchange with an inference server: its status and body, or what kind of error
    (refused, timeout, other). Never raises for a network error; never follows a redirect.
    `api_key` may list the keys the server may hold (a rotation: the new key, then the one the
    running server started with): the next is tried only on a 401 or 403."""
    keys = [k for k in (api_key if isinstance(api_key, list) else [api_key]) if k] or [None]
    for key in keys:
        result = _request(method, url, timeout, payload, key, validate_certs)
        if result.status not in (401, 403):
            break
    return result


def _request(method: str, url: str, timeout: float, payload: dict[str, Any] | None, api_key: str | None,
             validate_certs: bool) -> HttpResult:
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = None
    if payload is not None:
        data = json.dumps(payload)
        headers["Content-Type"] = "application/json"
    start = time.monotonic()
    try:
        resp = open_url(url, method=method, data=data, headers=headers, timeout=timeout,
                        validate_certs=validate_certs, follow_redirects="none")
        body = resp.read().decode("utf-8", "replace")
        return HttpResult(resp.status, body, latency_ms=(time.monotonic() - start) * 1000)
    except HTTPError as err:
        body = err.read().decode("utf-8", "replace") if err.fp else ""
        return HttpResult(err.code, body, latency_ms=(time.monotonic() - start) * 1000)
    except (URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        kind = "other"
        if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason).lower():
            kind = "refused"
        elif isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason).lower():
            kind = "timeout"
        return HttpResult(None, "", error="%s: %s" % (url, reason), error_kind=kind,
                          latency_ms=(time.monotonic() - start) * 1000)


# the jobs after which a deactivating unit runs again: its stop is the first half of a restart
STARTING_JOBS = ("start", "restart", "try-restart", "reload-or-start")


def queued_job(list_jobs: str, unit: str) -> str:
    """The type of the job systemd holds for `unit`, from `systemctl list-jobs --no-legend` (columns: id,
    unit, type, state), or "" when it holds none."""
    for line in list_jobs.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0].isdigit() and cols[1] == unit:
            return cols[2]
    return ""


def journal_stage(lines: list[str], engine: str | dict[str, Any], failures_since: float = 0) -> tuple[str, str, str]:
    """(stage, stage_line, failure_line) from the unit's journal since its start.

    `stage` is the label of the last progress line, `failure_line` the first line matching one
    of the engine's failure patterns ("" if none). Lines may start with journalctl's short-unix
    stamp; with `failures_since`, a failure line counts only from then on (the probe's own window:
    an old line of this run is history, not the state now)."""
    prof = profile(engine)
    stage, stage_line, failure = "", "", ""
    progress = [(re.compile(p, re.I), label) for p, label in prof["progress"]]
    failures = [re.compile(p, re.I) for p in prof["failure"]]
    for raw in lines:
        stamp, line = _stamped(raw)
        for rx, label in progress:
            match = rx.search(line)
            if match:
                stage = label.format(*[g or "" for g in match.groups()])
                stage_line = line.strip()[:240]
        recent = stamp is None or stamp >= failures_since
        if not failure and recent and any(rx.search(line) for rx in failures):
            failure = line.strip()[:240]
    return stage, stage_line, failure


def _stamped(line: str) -> tuple[float | None, str]:
    """(epoch, text) of a `journalctl -o short-unix` line; (None, line) for a line without a stamp."""
    match = re.match(r"^(\d{9,}\.\d+) \S+ \S+?: (.*)$", line)
    return (float(match.group(1)), match.group(2)) if match else (None, line)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> {name: [(labels, value), ...]}. Malformed lines are skipped."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    rx = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = rx.match(line)
        if not match:
            continue
        try:
            value = float(match.group(4))
        except ValueError:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        out.setdefault(match.group(1), []).append((labels, value))
    return out


def json_path(data: Any, dotted: str) -> float | None:
    """The number at `dotted` in `data` ("a.b"; "a[].b" sums b over the list a), or None."""
    head, sep, rest = dotted.partition(".")
    if head.endswith("[]"):
        items = data.get(head[:-2]) if isinstance(data, dict) else None
        if not isinstance(items, list) or not items:
            return None
        values = [json_path(item, rest) for item in items]
        return None if any(v is None for v in values) else float(sum(v for v in values if v is not None))
    value = data.get(head) if isinstance(data, dict) else None
    if sep:
        return json_path(value, rest)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def in_flight(metrics_text: str, engine: str | dict[str, Any]) -> tuple[float | None, dict[str, float]]:
    """In-flight work (running + queued) and each count: from the engine's JSON load endpoint where
    its profile names one (`load_json`: dotted paths), else the sum of its Prometheus gauges.
    None when none is there (metrics off, another answer)."""
    prof = profile(engine)
    if prof.get("load_json"):
        try:
            data = json.loads(metrics_text)
        except ValueError:
            return None, {}
        each = {}
        for dotted in prof["load_json"]:
            value = json_path(data, dotted)
            if value is not None:
                each[dotted] = value
        return (sum(each.values()) if len(each) == len(prof["load_json"]) else None), each
    parsed = parse_prometheus(metrics_text)
    each: dict[str, float] = {}
    for name in prof["inflight_metrics"]:
        if name in parsed:
            each[name] = sum(v for _labels, v in parsed[name])
    return (sum(each.values()) if each else None), each


def front_end(body: str, engine: str | dict[str, Any], server: dict[str, Any] | None = None) -> tuple[float | None, str]:
    """(count, why): the requests the server's HTTP front end holds that are work, from the profile's
    `frontend_gauge`, `body` being the answer of its path (the metrics path unless it names one): a live
    Prometheus gauge summed over every endpoint but those that are not work (`metric`), or a JSON count
    (`json`). None with why when it is not there or not to be believed: off, another version, a value that
    is no count; where the profile says (`needs_flag`, `one_process`), a server whose main process (`server`:
    bc_host.main_process, None when not read) does not show the flag that makes it count, or runs more than one
    front-end process (each with a count of its own, the answer being one of them)."""
    gauge = profile(engine).get("frontend_gauge")
    if not gauge:
        return None, "the engine has no front-end count"
    turn_on = "set bc_engine_settings.%s: true (it applies at the unit's next restart)" % gauge["setting"]
    if gauge.get("needs_flag") or gauge.get("one_process"):
        if server is None:
            return None, ("whether the server's count can be believed is unknown: its main process was not read (give "
                          "the probe its unit)")
        problem = count_problem(gauge, server)
        if problem:
            return None, problem
    if gauge.get("json"):
        try:
            work = [json_path(json.loads(body), gauge["json"])]
        except ValueError:
            work = [None]
        where = "%s in %s" % (gauge["json"], gauge["path"])
    else:
        samples = parse_prometheus(body).get(gauge["metric"])
        if samples is None:
            return None, "%s is not in the server's metrics (it runs without %s: %s)" % (
                gauge["metric"], gauge["setting"], turn_on)
        work = [value for labels, value in samples if labels.get("endpoint") not in gauge["not_work"]]
        where = gauge["metric"]
    if not all(v is not None and math.isfinite(v) and v >= 0 for v in work):
        return None, "%s is not a count of requests: %s" % (where, work)
    return float(sum(work)), ""  # type: ignore[arg-type]


def count_problem(gauge: dict[str, Any], server: dict[str, Any]) -> str:
    """Why the front-end count of a server running as `server` (its argv and environ) is not to be believed; ""."""
    argv, environ = server["argv"], server.get("environ")
    flag = gauge.get("needs_flag")
    if flag:
        on = flag_on(argv, flag)
        if on is None:
            return "whether the server runs with %s is unknown: its command line abbreviates it (spell it out)" % flag
        if not on:
            return ("the running server lacks %s, and its count then always reads 0: set bc_engine_settings.%s: true "
                    "(the project's vLLM unit has it unless turned off); a server started without it needs one restart "
                    "(this cycle once with bc_drain_on_deadline=force, or a restart of the unit in a quiet moment)"
                    % (flag, gauge["setting"]))
    one = gauge.get("one_process") or {}
    every = tuple(name for spellings in one.get("flags", []) for name in spellings)
    for spellings in one.get("flags", []):
        problem = one_process_problem(argv, spellings, every)
        if problem:
            return problem
    config = one.get("config_flag")
    if config and option_values(argv, [config]):
        return ("whether the server runs one front-end process is unknown: its command line reads settings from %s, which "
                "this check does not read (%s); give them on the command line" % (config, ", ".join(s[0] for s in one["flags"])))
    for name in one.get("env", []):
        if environ is None:
            return "whether the server runs with %s is unknown: its environment could not be read" % name
        if environ.get(name, "").strip() not in ("", "0"):
            return "the server runs with %s=%s, whose front end's count this project has not read" % (name, environ[name])
    return ""


def one_process_problem(argv: list[str], spellings: list[str], others: tuple[str, ...] = ()) -> str:
    """Why `argv` may run more than one front-end process by the option spelt `spellings` (its long name first);
    "". Every value given must read 1 as argparse's int() reads it: more, none, or one that is not a number fails
    closed, as does a token that abbreviates a spelling (but for `others`, options of their own)."""
    values = option_values(argv, spellings, others)
    name = "/".join(spellings)
    if values is None:
        return "whether the server runs %s is unknown: its command line abbreviates it" % name
    for value in values:
        try:
            count = int(value) if value is not None else None
        except ValueError:
            count = None
        if count is None:
            return ("whether the server runs one front-end process is unknown: %s is given %s, not a number" % (
                name, "no value" if value is None else "%r" % value[:40]))
        if count != 1:
            return ("the server runs %s %s: each of its front-end processes counts only its own requests and the "
                    "answer is one of them" % (spellings[0], value.strip()))
    return ""


def startup_phases(metrics_text: str, engine: str | dict[str, Any]) -> dict[str, float]:
    """SGLang's start-up time gauges by phase ("total" where the gauge has no phase label)."""
    parsed = parse_prometheus(metrics_text)
    out: dict[str, float] = {}
    for name in profile(engine)["startup_metrics"]:
        out.update({labels.get("phase", "total"): value for labels, value in parsed.get(name, [])})
    return out


def completion_answer(body: str) -> tuple[str | None, str]:
    """(text, reason): the first choice's text of an OpenAI completion, or None and why not."""
    try:
        data = json.loads(body)
    except ValueError:
        snippet = body.strip().replace("\n", " ")[:80]
        return None, "the completion answer is not JSON (starts %r)" % snippet
    try:
        text = data["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        text = None
    if text is None:  # absent or null: not an answer (str(None) would read as the text "None")
        return None, "the completion answer has no choices[0].text"
    return str(text), ""


def server_message(body: str) -> str:
    """The error message of an OpenAI-style error body ({"error": {"message"}}, {"message"},
    {"detail"}), or the body's start."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip().replace("\n", " ")[:200] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key])[:300]
    return json.dumps(data)[:200]


def classify(engine: str | dict[str, Any], probe: str, http: HttpResult, unit: dict[str, Any] | None = None,
             restarts_baseline: int | None = None, journal_failure: str = "",
             expect: str | None = None) -> dict[str, Any]:
    """Decide phase/ready/failed from one probe's observations.

    Fails only where waiting is pointless: the unit is failed or inactive, it restarted since
    the baseline (a crash loop), its journal shows an engine failure line, or a ready server gave
    a wrong answer. Everything else is `failed: False` with `ready` and a `phase`.
    """
    prof = profile(engine)
    result: dict[str, Any] = {"ready": False, "failed": False, "phase": "down", "reason": "",
                              "http_status": http.status, "latency_ms": round(http.latency_ms, 1)}
    decided = _by_unit(result, unit, restarts_baseline) if unit else None
    if decided is not None:
        return decided
    if journal_failure:
        return _fail(result, "the server logged a fatal error: %s" % journal_failure)
    if http.error_kind == "refused":
        starting = unit is not None and unit.get("ActiveState") in ("active", "activating", "reloading")
        result["phase"] = prof["refused_phase"] if starting else "down"
        result["reason"] = "connection refused (%s)" % ("port not open yet" if starting else "nothing listens")
        return result
    if http.error_kind:
        result["phase"] = "warming" if http.error_kind == "timeout" else "loading"
        result["reason"] = http.error
        return result
    decided = _by_status(result, prof, probe, http)
    if decided is not None:
        return decided
    result["phase"] = "ready"
    if probe == "completion":
        answer, why = completion_answer(http.body)
        result["answer"] = answer
        if answer is None:
            result["phase"] = "warming"
            result["reason"] = why
            return result
        if expect is not None and expect not in answer:
            return _fail(result, "the server is up but answered %r where %r was expected" % (answer, expect))
    result["ready"] = True
    return result


def _by_unit(result: dict[str, Any], unit: dict[str, Any], restarts_baseline: int | None) -> dict[str, Any] | None:
    """The verdict the unit's state gives on its own (failed, gone, crash-looping, a queued start), or None."""
    name = unit.get("Id") or "the unit"
    active = unit.get("ActiveState", "")
    if unit.get("LoadState") == "not-found":
        return _fail(result, "unit %s is not installed (LoadState=not-found)" % name)
    if active == "failed":
        return _fail(result, "unit %s has failed (SubState=%s, ExecMainStatus=%s)"
                     % (name, unit.get("SubState"), unit.get("ExecMainStatus")))
    if unit.get("SubState") == "auto-restart":
        return _fail(result, "unit %s: the server process exited (ExecMainStatus=%s) and systemd is about to restart it"
                     % (name, unit.get("ExecMainStatus")))
    if active in ("deactivating", "inactive") and unit.get("JobType") in STARTING_JOBS:
        result["phase"] = "restarting"
        result["reason"] = ("unit %s is %s with a %s job queued: it starts %s"
                            % (name, active, unit.get("JobType"),
                               "again once its stop ends" if active == "deactivating" else "once systemd runs the job"))
        return result
    if active in ("inactive", "deactivating"):
        return _fail(result, "unit %s is %s: nothing is starting, waiting is pointless" % (name, active))
    restarts = unit.get("NRestarts")
    if restarts_baseline is not None and isinstance(restarts, int) and restarts > restarts_baseline:
        return _fail(result, "unit %s restarted %d time(s) since the cycle started it: crash loop"
                     % (name, restarts - restarts_baseline))
    return None


def _by_status(result: dict[str, Any], prof: dict[str, Any], probe: str, http: HttpResult) -> dict[str, Any] | None:
    """The verdict an answer that is not ready gives (a hung scheduler, a refused completion, a dead engine, its own
    drain, still loading), or None: the server is ready."""
    status = http.status
    hung = prof.get("hung_503_after_s")
    if status == 503 and hung and http.latency_ms >= hung * 1000:
        return _fail(result, "the server answered 503 after %.1f s: it is up but its scheduler gives no token (a hung "
                     "scheduler; the engine marks itself unhealthy): waiting is pointless" % (http.latency_ms / 1000))
    if probe == "completion" and status is not None and 400 <= status < 500:
        # a ready server refusing the request (a wrong model name, a missing key, a bad request):
        # waiting cannot help; its own message says why
        return _fail(result, "the server refused the completion with HTTP %d: %s" % (status, server_message(http.body)))
    statuses = prof.get("completion_status_phase") if probe == "completion" else None
    phase = (statuses or prof["status_phase"]).get(status)
    for marker, marker_phase in prof["body_phase"].items():
        if status != 200 and marker in http.body:
            phase = marker_phase
    if phase == "failed":  # a status or words this engine gives only when it is dead (vLLM: EngineDeadError)
        words = server_message(http.body) if http.body.strip() else ""
        return _fail(result, "the server answered HTTP %s, which this engine gives only when its engine is dead%s"
                     % (status, ": %s" % words if words else ""))
    if phase == "stopping":  # its own drain after SIGTERM: it takes no new work, whatever its liveness says
        result["phase"] = "stopping"
        result["reason"] = "the server is shutting down and refuses new work (HTTP %s: %s)" % (status, server_message(http.body))
        return result
    if phase != "ready":
        result["phase"] = phase or "loading"
        result["reason"] = "HTTP %s%s" % (status, "" if phase else " (not a status this engine uses while starting)")
        return result
    return None


def _fail(result: dict[str, Any], reason: str) -> dict[str, Any]:
    result.update(failed=True, ready=False, phase="failed", reason=reason)
    return result


def reload_line(result: dict[str, Any], host: str, retries_left: int | None = None) -> str:
    """One progress line of a readiness retry: host, elapsed, phase, stage, retries left."""
    elapsed = result.get("since_start_s")
    clock = "--:--" if elapsed is None else "%02d:%02d" % divmod(int(elapsed), 60)
    stage = result.get("stage") or result.get("reason") or ""
    left = "" if retries_left is None else "  (%d retries left)" % retries_left
    return '%s reload %s  %-8s "%s"%s' % (host, clock, result.get("phase", "?"), stage, left)
