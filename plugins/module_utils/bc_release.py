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

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import version_key
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import (
    HttpResult,
    completion_answer,
    in_flight,
    server_message,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import flag_on, flag_value, loopback
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_identity import FINGERPRINT


class ReleaseError(Exception):
    """A step failed; `state` says what the server is left as: `serving` (nothing released, not
    paused), `released` (released and paused: resume it), or `unknown` (restart it)."""

    def __init__(self, msg: str, state: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.state, self.extra = state, extra or {}


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
    "engine": {"type": "str", "default": "sglang"},  # checked against ENGINES once, by bc_engines.resolve
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
            server: dict[str, Any] | None = None, host_available_mib: int | None = None) -> dict[str, Any]:
    """What the live server says about releasing its memory: `supported`, `saver_on`,
    `releasable_gib` (per GPU: the smallest rank's, None when the engine does not say) and `why`
    when it cannot; `whole`: what a whole-GPU release would take and free, and why not (whole_support).
    `answer` is its info endpoint's reply (None: not asked); `server` its main process
    (bc_host.main_process: argv and environ; None: not read), where the profile says what it must run with;
    `host_available_mib` the host's MemAvailable (meminfo_available_mib; None: not read)."""
    rel = prof.get("release")
    out: dict[str, Any] = {"supported": False, "saver_on": None, "releasable_gib": None, "why": "",
                           "setting": (rel or {}).get("setting"), "whole": whole_support(None, engine, None, None, None)}
    if not rel:
        out["why"] = "%s cannot free its GPU memory in place (no release in its profile)" % engine
        return out
    out["why"] = server_problem(rel, engine, server)
    if out["why"]:
        out["whole"]["why"] = out["why"] if rel.get("whole") else out["whole"]["why"]
        return out
    if answer is None or answer.status != 200:
        got = "no answer" if answer is None else ("HTTP %s" % answer.status if answer.status else answer.error)
        out["why"] = "%s answered %s at %s: whether it can release its memory is unknown" % (engine, got, rel["info_path"])
        out["whole"]["why"] = out["why"] if rel.get("whole") else out["whole"]["why"]
        return out
    try:
        data = json.loads(answer.body or "null")
    except ValueError:
        data = None
    if rel.get("whole"):
        out["whole"] = whole_support(rel["whole"], engine, data, (server or {}).get("environ"), host_available_mib)
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


def meminfo_available_mib(text: str | None) -> int | None:
    """MemAvailable of /proc/meminfo in MiB (the host's memory a new pinned allocation can take without swapping
    others out); None when the text is absent or has no such line."""
    for line in (text or "").splitlines():
        key, _sep, rest = line.partition(":")
        parts = rest.split()
        if key.strip() == "MemAvailable" and parts and parts[0].isdigit():
            return int(parts[0]) // 1024 if parts[1:2] == ["kB"] else None
    return None


def env_true(environ: dict[str, str] | None, name: str) -> bool | None:
    """Whether `name` reads as true the way SGLang's get_bool_env_var does ("1" or "true", any case:
    utils/common.py 0.5.16:1225-1231); None when the environment was not read."""
    if environ is None:
        return None
    return str(environ.get(name, "")).strip().lower() in ("1", "true")


def host_gpus(data: dict[str, Any], ranks: dict[str, str]) -> int | None:
    """How many GPUs of this host the server runs on, from its start flags in /server_info: tp x pp, x dp unless
    DP attention shares the TP group's GPUs, over its nodes; None when a field is absent or not a positive number."""
    got = {k: data.get(v) for k, v in ranks.items()}
    if any(not isinstance(got[k], int) or isinstance(got[k], bool) or got[k] < 1 for k in ("tp", "pp", "dp", "nodes")):
        return None
    gpus = got["tp"] * got["pp"] * (1 if got["dp_attention"] is True else got["dp"])
    return max(1, gpus // got["nodes"])


def tag_problem(spec: dict[str, Any], engine: str, data: dict[str, Any], version: Any, environ: dict[str, str] | None) -> str:
    """Why one memory tag of a whole release cannot go (its switch off, a version that does not back it up, outside the
    memory saver's region), or ""."""
    off = [f for f in spec.get("info_on", []) if data.get(f) is not True]
    if off:
        return "it runs without %s (set bc_engine_settings.%s: true; it applies at the unit's next restart)" % (
            " and ".join(off), " and bc_engine_settings.".join(off))
    if spec.get("backed_up_since"):
        try:
            old = version_key(version) < version_key(spec["backed_up_since"])
        except ValueError:
            old = True
        if old:
            return ("%s %s does not back it up (from %s): a release would discard it"
                    % (engine, version or "(version unknown)", spec["backed_up_since"]))
    on = env_true(environ, spec["env_true"]) if spec.get("env_true") else True
    if not on:
        return ("it is not in the memory saver's region: the server %s %s=1 at its start"
                % ("was not read for" if on is None else "ran without", spec["env_true"]))
    return ""


def whole_support(whole: dict[str, Any] | None, engine: str, data: Any, environ: dict[str, str] | None,
                  host_available_mib: int | None) -> dict[str, Any]:
    """What a whole-GPU release would take and free, from the live server's info (`data`: its /server_info), its
    main process's environment (None: not read) and the host's available memory (MiB, None: not read): `tags` to
    release, `releasable_gib` (per GPU, the smallest rank's, summed over the tags), `resident` (each tag left on the
    GPU, and why), `host_backup_mib` (pinned host memory the backups take on this host), `checker` (the weights
    checksum route, None where the version has none) and `why` (each missing piece, named; "" when it can)."""
    out: dict[str, Any] = {"supported": False, "tags": [], "releasable_gib": None, "resident": {}, "host_backup_mib": None,
                           "host_available_mib": host_available_mib, "checker": None, "timeout_s": None, "why": ""}
    if not whole:
        out["why"] = "%s cannot release its weights in place (no whole release in its profile)" % engine
        return out
    data = data if isinstance(data, dict) else {}
    version = data.get(whole["info_version"])
    missing: list[str] = []
    per_gpu: dict[str, float] = {}
    for tag, spec in whole["tags"].items():
        why = tag_problem(spec, engine, data, version, environ)
        found = [] if why else json_values(data, spec["info_gib"])
        if not why and not found:
            why = "%s does not say how big it is (%s in %s's info)" % (engine, spec["info_gib"], engine)
        if why:
            if tag in whole["required"]:
                missing.append("%s: %s" % (tag, why))
            else:
                out["resident"][tag] = why
            continue
        per_gpu[tag] = min(found)
        out["tags"].append(tag)
    backup_gib = [max(json_values(data, whole["tags"][t]["info_gib"])) for t in out["tags"] if whole["tags"][t].get("host_backup")]
    gpus = host_gpus(data, whole["ranks"])
    if gpus is None:
        missing.append("how many GPUs of this host it runs on is unknown (%s in its info)" % ", ".join(whole["ranks"].values()))
    elif backup_gib:
        need = out["host_backup_mib"] = int(sum(backup_gib) * gpus * 1024)
        out["timeout_s"] = round(sum(backup_gib) * gpus * whole["host_copy_s_per_gib"], 1)
        room = None if host_available_mib is None else int(host_available_mib * whole["host_share"])
        if room is None:
            missing.append("the host's available memory is unknown (/proc/meminfo not read): the weights' pinned copy "
                           "(%d MiB) may not fit" % need)
        elif need > room:
            missing.append("the weights' pinned host copy needs %d MiB and the host has %d MiB available (%d%% of it "
                           "usable)" % (need, int(host_available_mib or 0), whole["host_share"] * 100))
    checker = whole.get("checker")
    try:
        if checker and version and version_key(version) >= version_key(checker["since"]):
            out["checker"] = checker["path"]
    except ValueError:
        pass
    if not out["checker"]:  # identity after the resume would be unknown, and unknown is a restart: no whole release
        missing.append("%s %s has no weights checksum (%s from %s): what comes back after a resume cannot be proven"
                       % (engine, version or "(version unknown)", (checker or {}).get("path"), (checker or {}).get("since")))
    out["why"] = "; ".join(missing)
    out["supported"] = not missing
    out["releasable_gib"] = round(sum(per_gpu.values()), 2) if not missing else None
    return out


Http = Callable[[str, str, "dict[str, Any] | None", float], HttpResult]


def parsed(answer: HttpResult) -> Any:
    """The JSON of a 200 answer; None for any other answer or a body that is not JSON."""
    if answer.status != 200:
        return None
    try:
        return json.loads(answer.body or "null")
    except ValueError:
        return None


def identity_figures(http: Http, prof: dict[str, Any], model: str, prompt: str, timeout: float,
                     checker_timeout: float, with_checksum: bool = True) -> dict[str, Any]:
    """What the server's identity is proven by (bc_identity.identity), read from the live server: its weights'
    checksum per rank (the profile's whole-release checker, given `checker_timeout`: it hashes every weight), the
    fixed prompt's top-k logprobs, and the greedy answer to `prompt` (the readiness's known-answer prompt). Each is
    None when it did not answer 200 with what it should: an unknown, which restarts rather than trusts. Without
    `with_checksum` the checksum is not read (the caller read it already, before generation continued)."""
    checker = whole_checker(prof)
    named = {"model": model} if model else {}
    out: dict[str, Any] = {"checksum": None, "fingerprint": None, "answer": None}
    if checker and with_checksum:
        out["checksum"] = checksum(http, checker, checker_timeout)
    got = parsed(http("POST", prof["completion_path"], dict(FINGERPRINT, **named), timeout))
    try:  # the top-k alone (bc_identity.fingerprint reads it), in the shape of the answer
        out["fingerprint"] = {"choices": [{"logprobs": {"top_logprobs": got["choices"][0]["logprobs"]["top_logprobs"]}}]}
    except (KeyError, IndexError, TypeError):
        out["fingerprint"] = None
    answer = http("POST", prof["completion_path"],
                  dict(named, prompt=prompt, max_tokens=FINGERPRINT["max_tokens"], temperature=0), timeout)
    out["answer"] = completion_answer(answer.body)[0] if answer.status == 200 else None
    return out


def whole_checker(prof: dict[str, Any]) -> dict[str, Any]:
    """The engine's weights checksum route and payload ({} where its profile has none)."""
    return ((prof.get("release") or {}).get("whole") or {}).get("checker") or {}


def checksum(http: Http, checker: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """The weights checker's answer, per rank only (each rank's answer also hashes every parameter by name: thousands
    on a large model); None when it did not answer 200 with a list of ranks."""
    got = parsed(http("POST", checker["path"], dict(checker["payload"]), timeout))
    if not isinstance(got, dict) or not isinstance(got.get("ranks"), list):
        return None
    return {"success": got.get("success"), "ranks": [
        {k: r.get(k) for k in ("per_gpu_checksum", "parallelism_info")} if isinstance(r, dict) else None
        for r in got["ranks"]]}


class Release:
    """The release's steps against one server, through `http(method, path, payload, timeout)`.
    Each step is recorded (name, HTTP status, milliseconds) in `steps`."""

    def __init__(self, prof: dict[str, Any], engine: str, http: Http, timeout: float,
                 clock: Callable[[], float] = time.monotonic, tags: list[str] | None = None,
                 move_timeout: float | None = None) -> None:
        """`tags`: what the release and the resume take (None: the profile's, the KV cache); any other set only where
        the profile has a whole release that knows each tag (an empty list would be every tag to SGLang, never sent).
        `move_timeout`: the release's and the resume's own deadline (a host copy of the weights), at least `timeout`."""
        rel = prof.get("release")
        if not rel:
            raise ReleaseError("%s cannot free its GPU memory in place (no release in its profile)" % engine, "serving")
        if tags is not None:
            known = (rel.get("whole") or {}).get("tags", {})
            if not tags or any(t not in known for t in tags):
                raise ReleaseError("%s cannot release tags %s (it knows %s)" % (engine, tags, sorted(known) or "none"), "serving")
        self.prof, self.rel, self.engine, self.http, self.timeout, self.clock = prof, rel, engine, http, timeout, clock
        self.tags, self.move_timeout = tags, max(timeout, move_timeout or 0)
        self.steps: list[dict[str, Any]] = []

    def step(self, name: str) -> bool:
        """Run one step; True if it answered 200 (a step the engine does not have is skipped: True)."""
        spec = self.rel["steps"].get(name)
        if not spec:
            return True
        path, payload = spec
        moves = name in ("release", "resume")
        if moves and self.tags is not None:
            payload = dict(payload or {}, tags=list(self.tags))
        started = self.clock()
        answer = self.http("POST", path, payload, self.move_timeout if moves else self.timeout)
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

    def resume(self, before_continue: Callable[[], None] | None = None) -> None:
        """Resume what was released, then let generation continue. Called only after a release that
        answered 200 (a second resume would kill the server). `before_continue` runs while the server is still
        paused (a ReleaseError there leaves it paused: nothing generates from what it reads as wrong)."""
        if not self.step("resume"):
            raise ReleaseError("the resume failed: %s; the server is still released" % self.last_error(), "unknown")
        if before_continue is not None:
            before_continue()
        if not self.step("continue"):
            raise ReleaseError("continue failed after the resume: %s; the server stays paused" % self.last_error(),
                               "unknown")
