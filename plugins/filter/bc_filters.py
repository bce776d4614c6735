# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure filters of benchmark-cycle: sweep statistics, report tables, engine command lines."""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_bringback import failure as _bring_back_failure
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_bringback import plan as _bring_back_plan
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_bringback import readiness_keys as _readiness_keys
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_bringback import verdict as _verdict
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import (
    CONTROL,
    ENV_NAME,
    POSIX_NAME,
    installed_key,
    int_list,
    name_list,
    server_keys,
    unit_name,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import effective as contract_effective
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import key_problem as _key_problem
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import problems as _problems
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_endpoints import hook_secrets
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import flag_for_version, profile
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_export import notification
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_export import textfile as prom_textfile
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import redact as _redact
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import vmstat
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import budget as _budget
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import choose, key_rotation, sweep_alone
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import roll_problem as _roll_problem
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import INT4_BACKENDS

# the one definition of every bc_* setting, read from the collection's own tree (a clone or the installed copy)
CONTRACT_FILE = Path(__file__).resolve().parents[2] / "playbooks" / "vars" / "contract.yml"


@functools.cache
def _contract_file() -> dict[str, Any]:
    with open(CONTRACT_FILE, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def contract() -> dict[str, dict[str, Any]]:
    """The inventory contract (playbooks/vars/contract.yml: bc_contract), read once per process."""
    return _contract_file()["bc_contract"]


def _native(value: Any) -> Any:
    """`value` with its mappings and lists as plain dicts and lists. Ansible hands a filter its lazy containers, and
    each deep copy of one copies the templar's whole context with it: Ansible's argument-spec check deep-copies what it
    checks, and the settings' check took 1.0-1.2 s (0.05 s as plain values), 0.6-0.8 s of a run's CPU."""
    if isinstance(value, Mapping):
        return {k: _native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_native(v) for v in value]
    return value


SAFE_NAME = re.compile(r"^[A-Za-z0-9_@:][A-Za-z0-9_.:@-]*\Z")


def cli_args(settings: dict[str, Any], flags: dict[str, Any], version: str = "0") -> list[str]:
    """Command-line arguments from settings and an engine's flag table.

    flags maps a setting to a flag string, or to a version history [[since, flag|null], ...], or
    ({"env": NAME}) to the environment variable it is given as (settings_env), which gives no argument.
    True booleans give the bare flag, False/None/"" give nothing, lists repeat the values
    after one flag; a setting with no flag in the table is an error naming it."""
    args: list[str] = []
    for key, value in settings.items():
        if value is None or value is False or value == "":
            continue
        if key not in flags:
            raise ValueError("setting %r has no flag for this engine; known: %s" % (key, ", ".join(sorted(flags))))
        flag = flags[key]
        if isinstance(flag, dict):
            continue
        if isinstance(flag, list):
            flag = flag_for_version(flag, version)
            if flag is None:
                raise ValueError("setting %r is not supported by version %s of this engine" % (key, version))
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args.append(flag)
            args.extend(str(v) for v in value)
        else:
            args.extend([flag, str(value)])
    return args


def settings_env(settings: dict[str, Any], flags: dict[str, Any]) -> dict[str, str]:
    """The environment the settings given as environment variables ({"env": NAME} in the flag table) put in the
    unit's environment file; False/None/"" give nothing."""
    return {flags[key]["env"]: str(value) for key, value in settings.items()
            if isinstance(flags.get(key), dict) and value is not None and value is not False and value != ""}


def systemd_quote(args: list[str]) -> str:
    """Join argv for an ExecStart= line: quote words with spaces or quotes, escape % and $
    except whole-word ${VAR} references, which systemd expands from the environment."""
    out = []
    for arg in args:
        a = str(arg)
        if re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", a):
            out.append(a)
            continue
        a = a.replace("%", "%%").replace("$", "$$")
        if re.search(r'[\s"\'\\;]', a) or a == "":
            a = '"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(a)
    return " ".join(out)


def oom_kills_since(text: str, before: Any) -> int:
    """How many processes the kernel's OOM killer killed since the count `before`, from the text of
    /proc/vmstat (its `oom_kill` line, read by bc_host.vmstat); 0 when either count is unknown."""
    now = vmstat("oom_kill", text or "")
    if now is None or before is None or str(before).strip() in ("", "None"):
        return 0
    return max(0, now - int(before))


def host_clock(text: str) -> float:
    """Seconds since the epoch from what `date +%s.%N` printed on the host, its last line (a shell that prints a banner
    first is not the clock). Anything else is an error naming what was printed: a deadline is never made from it
    (Jinja's `float` reads it as 0, a deadline passed at once: a drain cut short, a reload never waited for)."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if not re.fullmatch(r"[0-9]{9,}(\.[0-9]+)?", last):
        raise AnsibleFilterError("the host's clock could not be read: `date +%%s.%%N` printed %r, not seconds since the epoch "
                                 "(a date without %%N, such as busybox's?): no deadline is made from it" % last[:80])
    return float(last)


def closest(known: list[str], name: str) -> str:
    """The known name closest to `name` (for "did you mean" messages), or "-" when none is close."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return match[0] if match else "-"


def env_lines(env: dict[str, Any], field: str = "bc_engine_env") -> str:
    """systemd EnvironmentFile lines for `env`: names checked (a newline in a name would inject a
    line of its own), values double-quoted with the four characters systemd unescapes inside double
    quotes (backslash, quote, backtick, dollar) escaped, UTF-8 kept as it is."""
    if env is not None and not isinstance(env, dict):
        raise ValueError("%s must be a mapping of NAME: value, e.g. {HF_HOME: /var/cache/huggingface}, got a %s"
                         % (field, type(env).__name__))
    lines = []
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise ValueError("%s: %r is not an environment variable name (letters, digits and _, not starting with a digit)"
                             % (field, key))
        text = "" if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        if CONTROL.search(text):
            raise ValueError("%s.%s holds a control character (a newline?): environment values are one line" % (field, key))
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
        lines.append('%s="%s"' % (key, escaped))
    return "\n".join(lines) + ("\n" if lines else "")


def engine_flags(engine: str) -> dict[str, Any]:
    """Each setting's flag for `engine` (module_utils/bc_engines.py ENGINES[engine]["flags"]); a list is
    the flag's version history, for cli_args."""
    return dict(profile(engine)["flags"])


def api_key_transport(engine: str) -> dict[str, str]:
    """How `engine` takes its API key without the command line: {"env": NAME} or
    {"config_flag": FLAG, "config_key": KEY} (module_utils/bc_engines.py, with the sources)."""
    return dict(profile(engine)["api_key"])


CONTROLLER_ID = re.compile(r"^[^/\s]+/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/pid:\[\d+\]$")


def same_pid_table(holder_id: Any, mine: Any) -> bool:
    """Whether a lock holder's controller sees the same process table as this one: its host name, kernel boot
    (boot_id) and pid namespace are ours. Only then does a missing pid prove the holder dead: a twin host name
    (AWX job pods, containers) or a controller without /proc (an id that is not whole) never does."""
    return isinstance(holder_id, str) and holder_id == mine and bool(CONTROLLER_ID.match(holder_id))


def redact(text: Any, secrets: Any = ()) -> str:
    """`text` with the given secret values and every secret-looking field's value removed."""
    values = [secrets] if isinstance(secrets, str) else list(secrets or [])
    return _redact(str(text), [str(v) for v in values if v])


def safe_name(name: Any, field: str) -> str:
    """`name` when it is safe as one path component (no /, no .., no leading . or -), else an error."""
    text = str(name)
    if not SAFE_NAME.match(text):
        raise ValueError("%s=%r cannot name a file: letters, digits and _.:@- only, not starting with . or -" % (field, text))
    return text


def posix_name(name: Any, field: str) -> str:
    """A user or group name for User=/Group=, or an error naming `field` (a newline would inject a line)."""
    text = str(name)
    if not POSIX_NAME.match(text):
        raise ValueError("%s=%r is not a user or group name (letters, digits and _.-, at most 32)" % (field, text[:40]))
    return text


def settings_problems(given: dict[str, Any], against: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Every problem of the given settings against the contract (module_utils/bc_contract.py), each naming the bc_*
    variable and the fix; [] when all are sound. Never quotes a secret's value. `against`: another contract than the
    collection's (playbooks/vars/contract.yml)."""
    return _problems(contract() if against is None else against, _native(given))


def readiness_keys(server_keys: Any, record: Any = None) -> list[str]:
    """The keys the running server may hold that readiness accepts besides the unit's own (bc_bringback.readiness_keys):
    [] where the lock's `record` says the server was started with the new unit (stopped and started, or restarted),
    unless it was rolled back to the previous one."""
    return _readiness_keys(server_keys, {} if record is None else _native(record))


def unknown_settings(given: Any) -> list[str]:
    """Each given bc_* name the contract does not know, with what to write instead: a renamed setting's hint
    (bc_contract_renamed), else the closest known name ("did you mean"); [] when every name is known."""
    known, renamed = contract(), _contract_file().get("bc_contract_renamed") or {}
    names = list(known)
    found = []
    for name in given:
        if name not in known:
            near = closest(names, name)
            found.append("%s -> %s" % (name, renamed.get(name) or ("did you mean %s?" % near if near != "-" else "no such setting")))
    return found


def moe_config_dir_host_problem(path: str, found: dict[str, Any]) -> str:
    """'' when `path` (bc_engine_settings.moe_config_dir) is on the host as a directory that only its
    owner's and group's users can write; else why not. `found` is ansible.builtin.stat's `stat` (its
    target, followed): a missing one, a file, one any user may write (who could put configs into the
    server's kernels) are refused."""
    field = "bc_engine_settings.moe_config_dir=%s" % path
    if not found or not found.get("exists"):
        return "%s does not exist on the host: create it (the tuned configs go in it) or leave the setting out" % field
    if not found.get("isdir"):
        return "%s is not a directory on the host: give the directory of the tuned configs" % field
    try:
        mode = int(str(found.get("mode")), 8)
    except ValueError:
        return "%s: its mode could not be read (%r): give a directory the cycle can stat" % (field, found.get("mode"))
    if mode & stat.S_IWOTH:
        return ("%s is world-writable (mode %04o): any user could put a config into the server's kernels; chmod o-w it"
                % (field, mode))
    return ""


def key_problem(given_key: Any, unit: str, required: Any, env_text: str, secret_text: str, engine: str, files: str) -> str:
    """'' when the cycle may go on with this API key; else why not, from the key the installed unit
    has today (its environment and secrets files, read from the host)."""
    have = installed_key(engine, env_text, secret_text)
    return _key_problem(unit, str(given_key or ""), str(required).lower() not in ("false", "no", "0"), have, files)


def given(hostvars: Any) -> dict[str, Any]:
    """The bc_* settings a host was given (inventory, AWX, -e), from its hostvars, in one pass."""
    return {name: hostvars[name] for name in hostvars if str(name).startswith("bc_")}


def effective(values: Any, results_dir: str = "", against: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every setting of the contract (vars/contract.yml) as the cycle uses it (bc_contract.effective): given or
    defaulted, numbers and truths read, derived ones filled in (bc_results_dir from `results_dir`), lists in one form;
    None for a required one not given (the preflight names it). `against`: another contract than the collection's."""
    return contract_effective(contract() if against is None else against, _native(values), str(results_dir or ""))


def preflight(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """One sizing of the sweep's runs (marlin_sweep's preflight per tensor-parallel shape, all on the
    same device): the largest need rules, it fits only if every run fits, and `why` is "" unless a run
    can run nowhere (each reason once). `gpu_expected`: a backend asked for runs only on a GPU (the host is meant
    to have one, whatever nvidia-smi says); a result that does not say its backends expects one."""
    if not plans:
        raise ValueError("bc_preflight: no preflight results (bc_sweep_tp_sizes is empty?)")
    first = plans[0]
    return {"need_mib": max(p["need_mib"] for p in plans), "need_gib": max(p["estimate_peak_gib"] for p in plans),
            "fits": all(p["fits"] for p in plans), "has_gpu": len(first.get("gpus") or []) > 0,
            "gpu_expected": any(b in INT4_BACKENDS for b in first["backends"]) if first.get("backends") else True,
            "free_mib": first["free_mib"], "free_gib": first["free_gib"], "oom_kills": first.get("oom_kills"),
            "why": "; ".join(dict.fromkeys(p["why"] for p in plans if not p["runnable"]))}


def cycle_budget(numbers: dict[str, Any]) -> dict[str, Any]:
    """The cycle's worst case, phase by phase, its total, the lock's lease and the switch's outer bound
    (bc_strategy.budget: the arithmetic written once)."""
    return _budget(numbers)


def roll_budget_problem(totals: list[Any], serial: Any, job_budget_s: Any, began_s: Any = None, forks: Any = None) -> str:
    """Why the roll (every target, batch by batch) may outlast bc_job_budget_s, or "" (bc_strategy.roll_problem).
    `began_s`: when the job began (epoch seconds, the Target play's note on this controller); absent or unreadable: not
    known. `forks`: how many hosts a task runs on at once."""
    try:
        elapsed = time.time() - float(began_s) if began_s not in (None, "") else None
    except (TypeError, ValueError):
        elapsed = None
    return _roll_problem(list(totals or []), serial, job_budget_s, elapsed, forks)


def key_rotation_of(probes: dict[str, Any] | None) -> bool | str | None:
    """bc_strategy.key_rotation of the preflight's looped key probe (its register: results[0] with the cycle's key
    alone, results[1] with no key; a loop that did not run gives False)."""
    results = list((probes or {}).get("results") or [])
    return key_rotation(results[0] if results else None, results[1] if len(results) > 1 else None)


def strategy(policy: str, sizing: dict[str, Any], support: dict[str, Any] | None = None, rotation: Any = False) -> dict[str, Any]:
    """The cycle's strategy (beside, release or stop) and why, from the preflight's numbers:
    `sizing` has fits, has_gpu, need_mib (with the margin) and free_mib (the sweep's preflight);
    `support` is inference_memory_info's result (None when the server was not asked); `rotation`: true when the live
    server refused the cycle's key, none when it was asked and did not say (unknown: a restart, or a refusal), "keyless"
    when it answers with no key at all (the key is not in force), anything else no rotation. A release asked for that
    cannot be done, or a rotation under a policy that never restarts, gives
    strategy None and the error naming the fix."""
    numbers = {"fits": bool(sizing.get("fits")), "has_gpu": bool(sizing.get("has_gpu")),
               "need_mib": int(sizing.get("need_mib") or 0), "free_mib": int(sizing.get("free_mib") or 0)}
    try:
        seen = rotation if rotation is True or rotation is None or rotation == "keyless" else False
        got = dict(choose(str(policy), numbers, support, seen),
                   need_mib=numbers["need_mib"], error="")
    except ValueError as err:
        return {"strategy": None, "why": "", "need_mib": numbers["need_mib"], "error": str(err)}
    return got


def bring_back(state: dict[str, Any]) -> dict[str, Any]:
    """What the cycle's bring-back does (bc_bringback.plan): start, resume or restart the service, record that
    nothing stays released, whether the router is owed the host and takes it back, whether the GPU check after the
    sweep runs and found the GPU sick, and the words of that finding. `state`: the lock's record (record) and this
    cycle's token, what its release left (release_state), the unit as a recovery found it (unit_state), the GPU
    reports (gpu_pre, gpu_none, gpu_swept, gpu_post_healthy, gpu_problems), policy and strategy."""
    return _bring_back_plan(_native(state))


def bring_back_failure(plan: dict[str, Any], unit: str, rolled_back: bool, restarted: bool, earlier: str | None,
                       start_failure: str) -> str:
    """The words of a bring-back that failed (bc_bringback.failure): what became of `unit` (rolled back, restarted
    after its resume, restarted, started as it was, or never touched), whether the host stays out of the router, and
    the cycle's earlier failure before the start's."""
    return _bring_back_failure(plan, unit, bool(rolled_back), bool(restarted), earlier or None, start_failure)


def cycle_verdict(failure: str, touched: bool, recovery: bool, host: str, fenced: Any = False) -> str:
    """The job's last words when a failure remains once the service is back (bc_bringback.verdict): a cycle says
    where it failed and whether it started the service again or never stopped it; a recovery says what it could not
    read; a cycle that lost its lock says it brought nothing back."""
    return _verdict(str(failure), bool(touched), bool(recovery), str(host), fenced is True)


def roll_lost(hosts: Any, hostvars: Any, max_fail_percentage: Any) -> dict[str, Any]:
    """The roll's verdict before a batch starts: each earlier batch of this play (the hosts that recorded it as
    `cycle_batch` at their first step), the hosts of it that did not complete their cycle (no `cycle_completed`: a
    failed one and one that became unreachable alike), and whether one batch lost a larger share of the hosts it
    started with than `max_fail_percentage` (then the roll stops: `stop`, with `why`). Ansible's own
    max_fail_percentage counts failed hosts only (plugins/strategy/linear.py), and a batch is lost whole only counting
    hosts dropped in that batch (executor/playbook_executor.py): a host unreachable after its stop, or a batch holding a
    host dropped by an earlier play, would let the roll take the next batch out. A share that is not a number counts
    as 0: any host lost stops the roll."""
    try:
        limit = float(max_fail_percentage)
    except (TypeError, ValueError):
        limit = 0.0
    batches: dict[tuple[str, ...], list[str]] = {}
    for host in hosts or []:
        record = hostvars[host].get("cycle_batch") if host in hostvars else None
        if record:
            batches.setdefault(tuple(str(h) for h in record), [])
    for batch in batches:
        batches[batch] = [h for h in batch if not (h in hostvars and hostvars[h].get("cycle_completed"))]
    for batch, lost in batches.items():
        share = 100.0 * len(lost) / len(batch)
        if share > limit:
            return {"stop": True, "lost": lost, "share": round(share, 1),
                    "why": "the roll stopped before this batch: the batch of %s lost %s (failed or unreachable before its "
                           "cycle completed: %.1f%% of the batch, more than bc_max_fail_percentage=%s); this host was not "
                           "touched" % (", ".join(batch), ", ".join(lost), share, max_fail_percentage)}
    return {"stop": False, "lost": [], "share": 0.0, "why": ""}


def recovery_findings(found: dict[str, Any], host: str, unit: str) -> str:
    """What a dead cycle left on `host`, in one sentence: the lock (holder, age, the heartbeat's promise, its record),
    the unit's state and whether its dead-man switch is armed (`found`: lock, unit, switch)."""
    lock, holder = found.get("lock") or {}, (found.get("lock") or {}).get("holder") or {}
    if lock.get("held"):
        promised = lock.get("promised_in_s")
        beat = ("its controller left no heartbeat" if promised is None
                else "its controller promised its next contact within %d s" % promised if promised > 0
                else "its controller broke its promise of a next contact %d s ago" % -promised)
        said = "the lock is held by cycle %s (%s@%s, %s s old; %s); it records %s" % (
            holder.get("token", "?"), holder.get("user", "?"), holder.get("controller", "?"), lock.get("age_s"), beat,
            json.dumps(holder.get("record") or {}, sort_keys=True))
    else:
        said = "no lock"
    state = found.get("unit") or {}
    armed = (found.get("switch") or {}).get("ActiveState") == "active"
    return "%s: %s; %s is %s (%s); the dead-man switch is %s" % (
        host, said, unit, state.get("ActiveState", "?"), state.get("SubState", "?"), "ARMED" if armed else "not armed")


def _requires_ansible() -> str:
    """The collection's own requires_ansible (meta/runtime.yml: the one statement of the supported ansible-core), at the
    collection's root, two folders above this file's real path (a link to the folder, filter_plugins/, resolved); ""
    if none."""
    here = os.path.dirname(os.path.realpath(__file__))
    for path in (os.path.join(here, "..", "..", "meta", "runtime.yml"),):
        try:
            with open(path, encoding="utf-8") as fh:
                found = re.search(r"^requires_ansible:\s*[\"']?([^\"'\n]+)", fh.read(), re.M)
        except OSError:
            continue
        if found:
            return found.group(1).strip()
    return ""


def core_problem(version: Any, requires: str | None = None) -> str:
    """Why this ansible-core cannot run the cycle, or "": the version must be in the collection's requires_ansible. An
    unknown version, or a range that cannot be read, is refused (a cycle never runs on a controller it was not
    written and tested for: a keyword or module behaving otherwise could leave a service stopped)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # noqa: PLC0415 - controller only
    from packaging.version import InvalidVersion, Version  # noqa: PLC0415

    requires = _requires_ansible() if requires is None else requires
    try:
        spec, got = SpecifierSet(requires), Version(str(version))
    except (InvalidSpecifier, InvalidVersion):
        return "cannot tell whether ansible-core %r is supported (requires_ansible %r in meta/runtime.yml)" % (version, requires)
    if not requires or not spec.contains(got, prereleases=True):
        return ("ansible-core %s is not supported: benchmark-cycle needs ansible-core %s (meta/runtime.yml): "
                "pip install 'ansible-core%s'" % (version, requires or "(no range found)", requires.replace(".0,", ",")))
    return ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "bc_cli_args": cli_args,
            "bc_settings_env": settings_env, "bc_systemd_quote": systemd_quote, "bc_closest": closest, "bc_int_list": int_list,
            "bc_name_list": name_list,
            "bc_oom_kills_since": oom_kills_since, "bc_host_clock": host_clock,
            "bc_unit_name": unit_name, "bc_hook_secrets": hook_secrets, "bc_key_problem": key_problem,
            "bc_server_keys": server_keys, "bc_moe_config_dir_problem": moe_config_dir_host_problem,
            "bc_env_lines": env_lines, "bc_api_key_transport": api_key_transport,
            "bc_engine_flags": engine_flags, "bc_redact": redact,
            "bc_safe_name": safe_name, "bc_posix_name": posix_name,
            "bc_settings_problems": settings_problems, "bc_unknown_settings": unknown_settings,
            "bc_readiness_keys": readiness_keys, "bc_given": given, "bc_effective": effective,
            "bc_preflight": preflight, "bc_cycle_budget": cycle_budget, "bc_roll_budget_problem": roll_budget_problem, "bc_strategy": strategy,
            "bc_sweep_alone": sweep_alone, "bc_core_problem": core_problem, "bc_key_rotation": key_rotation_of,
            "bc_prom_textfile": prom_textfile, "bc_notification": notification, "bc_same_pid_table": same_pid_table,
            "bc_recovery_findings": recovery_findings, "bc_bring_back": bring_back,
            "bc_bring_back_failure": bring_back_failure, "bc_cycle_verdict": cycle_verdict, "bc_roll_lost": roll_lost,
        }
