# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Free the GPU without a restart: what the live server says it can release (`support`, from its
own info endpoint), and the release's steps. The strategy itself is bc_strategy.choose.

The steps are the engine profile's `release` data (bc_engines): pause, release, resume, continue.
They are not symmetric: a resume of what is not released kills an SGLang server (the scheduler's
KeyError, seen on the real 0.5.16), so `Release` resumes only after a release that answered 200,
and exactly once; and it never leaves a server paused when a step fails before the release.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ansible.module_utils.bc_engines import ENGINES
from ansible.module_utils.bc_health import HttpResult, in_flight, server_message
from ansible.module_utils.bc_host import flag_on, flag_value, loopback


class ReleaseError(Exception):
    """A step failed; `state` says what the server is left as: `serving` (nothing released, not
    paused), `released` (released and paused: resume it), or `unknown` (restart it)."""

    def __init__(self, msg: str, state: str) -> None:
        super().__init__(msg)
        self.state = state


def json_values(data: Any, dotted: str) -> list[float]:
    """Every number at `dotted` ("a[].b.c": b.c of each item of the list a)."""
    head, sep, rest = dotted.partition(".")
    if head.endswith("[]"):
        items = data.get(head[:-2]) if isinstance(data, dict) else None
        return [v for item in items for v in json_values(item, rest)] if isinstance(items, list) else []
    value = data.get(head) if isinstance(data, dict) else None
    if sep:
        return json_values(value, rest)
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


# how a module reaches the server's HTTP API (documented once: doc_fragments/inference_server.py)
SERVER_SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True},
    "engine": {"type": "str", "default": "sglang", "choices": sorted(ENGINES)},
    "engine_version": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "api_key_fallbacks": {"type": "list", "elements": "str", "no_log": True, "default": []},
    "validate_certs": {"type": "bool", "default": True},
    "timeout": {"type": "float", "default": 30},
    "unit": {"type": "str"},
}


def server_keys(p: dict[str, Any]) -> list[str]:
    """The keys a call may present, in order (the first that is not refused answers)."""
    return [p["api_key"] or "", *p["api_key_fallbacks"]]


def server_problem(rel: dict[str, Any], engine: str, server: dict[str, Any] | None) -> str:
    """Why the running server (`server`: bc_host.main_process, None when not read) cannot take the release's
    routes, from what it really runs with: the flag that turns the release on (`needs_flag`), the environment
    that exposes its routes (`needs_env`), and (`loopback_only`: routes outside the API key's guard) a listen
    address that no one else can reach; "" when it can."""
    if not any(rel.get(k) for k in ("needs_flag", "needs_env", "loopback_only")):
        return ""
    if server is None:
        return ("whether %s runs with what a release needs is unknown: its main process was not read (give the unit; "
                "a server answering its info route is not proof)" % engine)
    argv, environ = server["argv"], server["environ"]
    if rel.get("needs_flag"):
        on = flag_on(argv, rel["needs_flag"])
        if on is None:
            return ("whether %s runs with %s is unknown: its command line has an abbreviation of it (argparse would "
                    "read it); spell the flag out" % (engine, rel["needs_flag"]))
        if not on:
            return ("%s runs without %s, so it cannot release: set bc_engine_settings.%s: true (it applies at the "
                    "unit's next restart)" % (engine, rel["needs_flag"], rel["setting"]))
    if rel.get("needs_env") and environ is None:
        return "whether %s runs with %s is unknown: its environment could not be read" % (
            engine, ", ".join("%s=%s" % kv for kv in rel["needs_env"].items()))
    missing = ["%s=%s" % kv for kv in (rel.get("needs_env") or {}).items() if (environ or {}).get(kv[0]) != kv[1]]
    if missing:
        return ("%s's release routes exist only with %s in its environment, which the running server lacks (set it in "
                "bc_engine_env)" % (engine, ", ".join(missing)))
    if rel.get("loopback_only"):
        host = flag_value(argv, rel["loopback_only"]["host_flag"])
        if not loopback(host):
            return ("refused: %s listens on %s, and %s; bind the server to 127.0.0.1 (a proxy in front for the "
                    "router), or let the cycle stop it (bc_stop_policy: stop)"
                    % (engine, host or "every interface (no %s)" % rel["loopback_only"]["host_flag"],
                       rel["loopback_only"]["why"]))
    return ""


def support(prof: dict[str, Any], engine: str, answer: HttpResult | None,
            server: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the live server says about releasing its memory: `supported`, `saver_on`,
    `releasable_gib` (per GPU: the smallest rank's, None when the engine does not say) and `why`
    when it cannot. `answer` is its info endpoint's reply (None: not asked); `server` its main process
    (bc_host.main_process: argv and environ; None: not read), where the profile says what it must run with."""
    rel = prof.get("release")
    out: dict[str, Any] = {"supported": False, "saver_on": None, "releasable_gib": None, "why": "",
                           "setting": (rel or {}).get("setting")}
    if not rel:
        out["why"] = "%s cannot free its GPU memory in place (no release in its profile)" % engine
        return out
    out["why"] = server_problem(rel, engine, server)
    if out["why"]:
        return out
    if answer is None or answer.status != 200:
        got = "no answer" if answer is None else ("HTTP %s" % answer.status if answer.status else answer.error)
        out["why"] = "%s answered %s at %s: whether it can release its memory is unknown" % (engine, got, rel["info_path"])
        return out
    try:
        data = json.loads(answer.body or "null")
    except ValueError:
        data = None
    if rel.get("info_saver"):
        out["saver_on"] = isinstance(data, dict) and data.get(rel["info_saver"]) is True
        if not out["saver_on"]:
            out["why"] = ("%s runs without %s, so a release frees nothing: set bc_engine_settings.%s: true "
                          "(it applies at the unit's next restart)" % (engine, rel["info_saver"], rel["setting"]))
            return out
    found = json_values(data, rel["info_releasable_gib"]) if rel.get("info_releasable_gib") else []
    out["releasable_gib"] = round(min(found), 2) if found else None
    out["supported"] = True
    return out


Http = Callable[[str, str, "dict[str, Any] | None", float], HttpResult]


class Release:
    """The release's steps against one server, through `http(method, path, payload, timeout)`.
    Each step is recorded (name, HTTP status, milliseconds) in `steps`."""

    def __init__(self, prof: dict[str, Any], engine: str, http: Http, timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        rel = prof.get("release")
        if not rel:
            raise ReleaseError("%s cannot free its GPU memory in place (no release in its profile)" % engine, "serving")
        self.prof, self.rel, self.engine, self.http, self.timeout, self.clock = prof, rel, engine, http, timeout, clock
        self.steps: list[dict[str, Any]] = []

    def step(self, name: str) -> bool:
        """Run one step; True if it answered 200 (a step the engine does not have is skipped: True)."""
        spec = self.rel["steps"].get(name)
        if not spec:
            return True
        path, payload = spec
        started = self.clock()
        answer = self.http("POST", path, payload, self.timeout)
        self.steps.append({"step": name, "path": path, "http_status": answer.status,
                           "ms": round((self.clock() - started) * 1000, 1),
                           "error": "" if answer.status == 200 else
                           (server_message(answer.body) or answer.error or "HTTP %s" % answer.status)})
        return answer.status == 200

    def last_error(self) -> str:
        last = self.steps[-1] if self.steps else {}
        return "%s %s answered %s" % (self.engine, last.get("path"), last.get("error") or last.get("http_status"))

    def in_flight(self) -> float | None:
        """Running + waiting requests from the engine's load endpoint (None: unknown)."""
        answer = self.http("GET", self.prof["load_path"], None, self.timeout)
        return in_flight(answer.body, self.prof)[0] if answer.status == 200 else None

    def release(self, idle_wait_s: float = 10.0, sleep: Callable[[float], None] = time.sleep) -> None:
        """Pause (new requests held, what still runs aborted), prove the scheduler idle, release.
        Any failure before the release answered leaves the server serving (unpaused); a release
        that did not answer 200 leaves it `unknown` (a crashed scheduler looks like this)."""
        if not self.step("pause"):
            failed = self.last_error()
            # a pause that answered may have paused the front end: continue it; no answer at all is unknown
            if self.steps[-1]["http_status"] is None or not self.step("continue"):
                raise ReleaseError("pause failed (%s), and generation could not be continued: %s" % (failed, self.last_error()),
                                   "unknown")
            raise ReleaseError("pause failed, nothing released, generation continues: %s" % failed, "serving")
        if self.rel["steps"].get("pause"):
            deadline, count = self.clock() + idle_wait_s, self.in_flight()
            while count != 0 and self.clock() < deadline:  # an abort takes a scheduler step or two
                sleep(0.2)
                count = self.in_flight()
            if count != 0:
                busy = "unknown" if count is None else "%g" % count
                if not self.step("continue"):  # paused and not continued: not serving
                    raise ReleaseError("%s is not idle after the pause (%s in flight), and continue failed: %s"
                                       % (self.engine, busy, self.last_error()), "unknown")
                raise ReleaseError("%s is not idle after the pause (%s in flight): a release now would kill it, so "
                                   "nothing was released and generation continues" % (self.engine, busy), "serving")
        if not self.step("release"):
            raise ReleaseError("the release failed: %s; the server's memory state is unknown" % self.last_error(),
                               "unknown")

    def resume(self) -> None:
        """Resume what was released, then let generation continue. Called only after a release that
        answered 200 (a second resume would kill the server)."""
        if not self.step("resume"):
            raise ReleaseError("the resume failed: %s; the server is still released" % self.last_error(), "unknown")
        if not self.step("continue"):
            raise ReleaseError("continue failed after the resume: %s; the server stays paused" % self.last_error(),
                               "unknown")
