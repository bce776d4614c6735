# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory contract's checks, failing closed: absent, empty, zero and unknown never read as fine.

The contract (playbooks/vars/contract.yml) is data: each bc_* setting's type (an Ansible argument spec),
its default, and the keys read here:
- `range: [low, high]`: a number outside it (a zero, a negative, a huge one) is refused;
- `nonempty: true`: "", [] and {} are refused (an empty value would switch something off quietly);
- `empty: "..."`: what an empty value means, where empty is a legitimate choice;
- `choices`: the values Ansible's own check takes;
- `comma_string: true`: a list that may come as "1,8" (an AWX survey answer); other lists and mappings
  must be given as such, and no setting may be null (an empty YAML value is not "absent");
- `required: true`: a setting that must be given (every one missing is named, in one verdict);
- `max_items: N`: a list (or mapping) longer than N is refused before anything reads its items;
- `unique: true`: a list of choices with an item twice is refused.
`problems(contract, given)` is the preflight's one verdict on the given values, before anything is
touched: every message names the setting and the fix, and never quotes a secret's value. The checks
that need the host (the key the installed unit has today) are `key_problem`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.validation import check_type_bool, check_type_float, check_type_int

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_endpoints import (
    HEADER_SAFE,
    SECRET_WORD,
    hook_problem,
    hook_secrets,
    notify_problems,
    url_problem,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES, setting_problems, version_key
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import rules_problems
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import REDACTED
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    BACKENDS,
    ROUTING_KINDS,
    ShapeError,
    backend_list,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import UnitError, check_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
POSIX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}[$]?\Z")
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# the MoE shape the sweep takes (bc_marlin), each a positive whole number
SHAPE_KEYS = ("num_experts", "hidden_size", "intermediate_size", "top_k", "group_size", "num_bits")
SERIAL_HINT = "give a whole number of hosts from 1 to %d, a share such as '25%%' (1-100%%), or a list of them, e.g. [1, '50%%']"
SERIAL_MAX = 10000  # the contract's range of bc_serial, where it gives none


def _items(value: Any) -> list[Any]:
    """The items of a list, of a comma-separated string (AWX survey answers arrive as strings), or
    a single value."""
    return value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]


def int_list(value: Any, name: str = "value", empty_ok: bool = False) -> list[int]:
    """A list of positive ints from a list, an int or a comma-separated string; anything else is an
    error naming `name`. Empty is an error too, unless the setting says what empty means (`empty_ok`)."""
    out = []
    for item in [] if isinstance(value, str) and not value.strip() else _items(value):  # "" (a survey's blank answer)
        if isinstance(item, bool):
            raise ValueError("%s: %r is not a whole number (give e.g. 1,2,4 or [1, 2, 4])" % (name, item))
        try:
            number = int(str(item).strip())
        except ValueError:
            raise ValueError("%s: %r is not a whole number (give e.g. 1,2,4 or [1, 2, 4])" % (name, item)) from None
        if number < 1:
            raise ValueError("%s: %d is not positive" % (name, number))
        out.append(number)
    if not out and not empty_ok:
        raise ValueError("%s is empty" % name)
    return out


def name_list(value: Any, name: str = "value") -> list[str]:
    """A list of names from a list or a comma-separated string (AWX survey answers arrive as
    strings), each once and in order; an empty one is an error naming `name`."""
    out = [str(item).strip() for item in _items(value) if str(item).strip()]
    if not out:
        raise ValueError("%s is empty: give e.g. sglang,triton,torch or [sglang, triton, torch]" % name)
    return list(dict.fromkeys(out))


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, (list, dict)) and not value)


def _nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, (list, tuple)):
        return any(_nonfinite(v) for v in value)
    if isinstance(value, dict):
        return any(_nonfinite(v) for v in value.values())
    return False


def _secrets(contract: dict[str, dict[str, Any]], given: dict[str, Any]) -> list[str]:
    """The given secret values (no_log settings), as text, to keep out of every message."""
    out: list[str] = []
    for name, spec in contract.items():
        value = given.get(name)
        if spec.get("no_log") and value:
            if isinstance(value, dict):
                out.extend(str(v) for v in value.values() if isinstance(v, (str, int)) and len(str(v)) >= 4)
            else:
                out.append(str(value))
    return [s for s in out if len(s) >= 4]  # shorter is no secret, and scrubbing it would blank every letter like it


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def version_problem(version: Any, field: str = "bc_engine_version") -> str:
    try:
        version_key(version)
    except ValueError:
        return "%s=%r has no number in it: give the engine's release, e.g. 0.5.16" % (field, str(version)[:40])
    return ""


def serial_problem(value: Any, high: int = SERIAL_MAX) -> str:
    """'' for a batch size Ansible's `serial` takes and that rolls the fleet in batches: a whole
    number from 1 to `high`, a share 'N%' (0 < N <= 100), or a non-empty list of them, written without
    spaces. 0, a negative, 0% and an empty list would put every host in one batch (ansible-core's
    playbook_executor); a huge number is counted out host by host there (`for x in range(serial)`: the
    job spins), and '50% ' (a trailing space) is read by its pct_to_int as int('50% '), a traceback."""
    items = value if isinstance(value, list) else [value]
    hint, shown = SERIAL_HINT % high, repr(value)[:60]
    if not items:
        return "bc_serial is empty: " + hint
    for item in items:
        if isinstance(item, bool) or item is None or isinstance(item, (list, dict)):
            return "bc_serial=%s: %s" % (shown, hint)
        text = str(item)
        if re.search(r"\s", text):
            return "bc_serial=%s holds whitespace: write it without spaces, e.g. '50%%' or 2 (ansible-core's serial cannot " \
                   "read it); %s" % (shown, hint)
        match = re.fullmatch(r"([0-9]+)%", text)  # ansible-core's pct_to_int takes whole percentages only
        if match:
            if not 0 < int(match.group(1)) <= 100:
                return "bc_serial=%s: a share must be above 0%% and at most 100%%; %s" % (shown, hint)
            continue
        if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            return "bc_serial=%s: %s (0 or a negative would drain every host at once)" % (shown, hint)
        if len(text) > 12 or int(text) > high:
            return "bc_serial=%s: give at most %d hosts a batch (ansible-core would count a larger one out host by host, " \
                   "spinning); %s" % (shown, high, hint)
    return ""


def moe_config_dir_problem(value: Any, field: str = "bc_engine_settings.moe_config_dir") -> str:
    """'' for the directory SGLang's loader reads tuned MoE configs from (SGLANG_MOE_CONFIG_DIR): an
    absolute path with no '..' (the server's working directory is not the operator's), one line."""
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or ".." in text.split("/") or CONTROL.search(text) or "\t" in text:
        return ("%s=%s: give an absolute path with no '..' (the directory of tuned Triton MoE configs on the host, e.g. "
                "/var/lib/benchmark-cycle/moe-config)" % (field, str(value)[:80].encode("ascii", "backslashreplace").decode()))
    return ""


def installed_key(engine: str, env_text: str, secret_text: str) -> str:
    """The API key the installed unit of `engine` has today: its environment file's variable, or its
    secrets file's key (bc_engines ENGINES[engine]["api_key"]); "" when it has none."""
    transport = ENGINES.get(engine, {}).get("api_key", {})
    if transport.get("env"):
        for line in (env_text or "").splitlines():
            match = re.match(r"^\s*%s=(.*)$" % re.escape(transport["env"]), line)
            if match:
                value = match.group(1).strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = re.sub(r"\\(.)", r"\1", value[1:-1])
                return value
    if transport.get("config_key"):
        for line in (secret_text or "").splitlines():
            match = re.match(r"^\s*%s\s*:\s*(.*)$" % re.escape(transport["config_key"]), line)
            if match:
                value = match.group(1).strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                    value = value[1:-1]
                return value
    return ""


def server_keys(engine: str, texts: list[str], new_key: str = "") -> list[str]:
    """Every API key of `engine` found in `texts` (environment files, a process's NUL-separated
    /proc/PID/environ, secrets files), each once, `new_key` left out: the keys a running server may
    hold during a rotation, tried after a 401 to the new one."""
    found = [installed_key(engine, text.replace("\x00", "\n"), text) for text in texts]
    return [k for k in dict.fromkeys(found) if k and k != new_key]


def key_problem(unit: str, given_key: str, required: bool, installed: str, files: str) -> str:
    """'' when the cycle may go on with this key; else why not. A required key that is empty is
    refused; an empty key is refused also where none is required if the installed unit has one
    today (the cycle would restart it serving anyone)."""
    if given_key:
        return ""
    if required:
        return ("bc_api_key is empty: the server would be restarted with no authentication, serving anyone who reaches "
                "its port. Give the key: bc_api_key in the inventory from a secret, as inventory/example does (the "
                "bc_secret lookup of BC_API_KEY), then export BC_API_KEY, or BC_API_KEY_FILE naming a 0600 file (AWX's "
                "credential sets it); a BC_API_KEY exported with no such line in the inventory is not read. Or set "
                "bc_api_key_required: false for a site without one. Nothing was touched.")
    if installed:
        return ("bc_api_key is empty but %s has a key today (%s): the cycle would take its authentication away. Give the "
                "key (bc_api_key from a secret, as inventory/example does; AWX's credential); to remove the key on purpose, "
                "delete it from %s by hand "
                "first. Nothing was touched." % (unit, files, files))
    return ""


def _range_problem(name: str, spec: dict[str, Any], value: Any, shown: Any) -> str:
    low, high = spec["range"]
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or _nonfinite(item) or not low <= item <= high:
            hint = (" (0 would detach the sweep: the service would start while it still runs)" if name == "bc_sweep_poll_s"
                    else " (%s)" % spec["zero"] if "zero" in spec else "")
            kind = "numbers" if isinstance(value, list) else "a number"
            return "%s=%s: give %s from %s to %s%s" % (name, str(shown)[:60], kind, low, high, hint)
    return ""


def _field_problems(contract: dict[str, dict[str, Any]], given: dict[str, Any], typed: dict[str, Any],
                    bad: set[str]) -> list[str]:
    """Each given setting alone: empty where empty is not a choice, numbers in their range."""
    out = []
    for name, value in given.items():
        spec = contract.get(name)
        if spec is None or name in bad:
            continue
        if value is None:
            out.append("%s is null (an empty YAML value): give a value, or leave the setting out for its default" % name)
            continue
        if spec.get("type") in ("list", "dict") and not isinstance(value, (list, dict)) and not (
                spec.get("comma_string") and isinstance(value, str)):
            kind = "list" if spec["type"] == "list" else "mapping"
            out.append("%s must be a %s, not a %s" % (name, kind, type(value).__name__))
            continue
        if spec.get("type") == "int" and isinstance(value, bool):
            out.append("%s=%s: give a whole number, not true/false" % (name, value))
            continue
        if spec.get("type") in ("str", "path") and (isinstance(value, (dict, list)) or (spec.get("no_log") and not isinstance(value, str))):
            hint = ": quote it in YAML (the value is not shown)" if spec.get("no_log") else ""
            out.append("%s must be text, not a %s%s" % (name, type(value).__name__, hint))
            continue
        if "range" in spec and spec.get("type") != "raw" and not (spec.get("type") == "list" and not typed.get(name)):
            problem = _range_problem(name, spec, typed.get(name), value)
            if problem:
                out.append(problem)
                continue
        items = typed.get(name)
        if spec.get("unique") and isinstance(items, list):
            twice = [item for i, item in enumerate(items) if item in items[:i]]
            if twice:
                out.append("%s=%s lists %s more than once: give each once (it is a set of choices)" % (
                    name, str(value)[:60], ", ".join(map(str, dict.fromkeys(twice)))))
    return out


def _size_problem(name: str, spec: dict[str, Any], value: Any) -> str:
    """A list (or mapping, or comma-separated answer) longer than the contract's max_items, refused
    before anything reads its items: a huge one would make the preflight and its loops take minutes."""
    most = spec.get("max_items")
    if not most:
        return ""
    count = len(value) if isinstance(value, (list, dict)) else value.count(",") + 1 if (
        isinstance(value, str) and spec.get("comma_string")) else 0
    if count > most:
        return "%s has %d items: give at most %d (playbooks/vars/contract.yml max_items)" % (name, count, most)
    return ""


def _value_problems(v: dict[str, Any], e: dict[str, Any], high: int = SERIAL_MAX) -> list[str]:
    """What a value must look like beyond its type (v: the given values, e: every effective one; high:
    the most hosts a batch, bc_serial's range)."""
    out = _key_problems(v.get("bc_api_key")) + _name_problems(v)
    out.extend(_grafana_problems(v.get("bc_grafana_annotation")))
    out.extend(_env_problems(v.get("bc_engine_env")))
    settings = v.get("bc_engine_settings")
    if isinstance(settings, dict) and isinstance(e.get("bc_engine"), str) and e["bc_engine"] in ENGINES \
            and not version_problem(e.get("bc_engine_version")):
        out.extend(setting_problems(e["bc_engine"], settings, str(e["bc_engine_version"])))
    if isinstance(settings, dict) and settings.get("moe_config_dir") not in (None, ""):  # "": none (bc_settings_env)
        out.extend(filter(None, [moe_config_dir_problem(settings["moe_config_dir"])]))
    out.extend(_secret_problems(v, e))
    out.extend(notify_problems(v.get("bc_notify_webhook")))
    out.extend(_sweep_problems(v))
    out.extend(_router_problems(v, e))
    if "bc_serial" in v:
        out.extend(filter(None, [serial_problem(v["bc_serial"], high)]))
    if isinstance(v.get("bc_gpu_health_rules"), dict):
        out.extend("bc_gpu_health_rules." + p for p in rules_problems(v["bc_gpu_health_rules"]))
    return out


def _key_problems(key: Any) -> list[str]:
    """bc_api_key goes in an HTTP header: one line of printable ASCII (its value never shown)."""
    if isinstance(key, str) and key and (CONTROL.search(key) or re.search(r"\s", key)):
        return ["bc_api_key holds whitespace or a control character (a trailing newline from a file?): strip it "
                "(the value is not shown)"]
    if isinstance(key, str) and key and not HEADER_SAFE.match(key):
        return ["bc_api_key holds a character that cannot go in an HTTP header (outside printable ASCII: a byte-order "
                "mark from an editor, a typographic quote?): save the key as plain ASCII (the value is not shown)"]
    return []


def _name_problems(v: dict[str, Any]) -> list[str]:
    """The names and paths a value must be: the URL, the service's user and group, the unit, the engine's version,
    the absolute directories, a probe that is more than whitespace."""
    out: list[str] = []
    if v.get("bc_url"):
        out.extend(filter(None, [url_problem("bc_url", v["bc_url"])]))
    for field in ("bc_service_user", "bc_service_group"):
        if v.get(field) and not POSIX_NAME.match(str(v[field])):
            out.append("%s=%r is not a user or group name (letters, digits and _.-, at most 32)" % (field, str(v[field])[:40]))
    if v.get("bc_unit"):
        try:
            check_name(unit_name(v["bc_unit"]), "bc_unit")
        except UnitError as err:
            out.append(str(err))
    if "bc_engine_version" in v:
        out.extend(filter(None, [version_problem(v["bc_engine_version"])]))
    for field in ("bc_textfile_dir", "bc_results_dir"):
        if v.get(field) and not str(v[field]).startswith("/"):
            out.append("%s=%s: give an absolute path%s" % (field, v[field], " (node_exporter's --collector.textfile.directory)"
                                                           if field == "bc_textfile_dir" else
                                                           " (under AWX, a volume that outlives the job)"))
    for field in ("bc_probe_prompt", "bc_probe_expect"):
        if field in v and isinstance(v[field], str) and v[field] and not v[field].strip():
            out.append("%s is only whitespace: every answer would match it; give the known answer's text" % field)
    return out


def _grafana_problems(grafana: Any) -> list[str]:
    """bc_grafana_annotation: {url, token, dashboard_uid, tags}, or empty (none)."""
    if not isinstance(grafana, dict) or not grafana:
        return []
    out: list[str] = []
    unknown = sorted(map(str, set(grafana) - {"url", "token", "dashboard_uid", "tags"}))
    if unknown:
        out.append("bc_grafana_annotation: unknown key(s) %s; its keys are url, token, dashboard_uid, tags" % ", ".join(unknown))
    if not re.match(r"^https?://[^\s/]+", str(grafana.get("url", ""))):
        out.append("bc_grafana_annotation needs url: http(s)://<grafana> and token: <a service account token>")
    elif url_problem("bc_grafana_annotation.url", grafana["url"]):
        out.append(url_problem("bc_grafana_annotation.url", grafana["url"]))
    elif not isinstance(grafana.get("token"), str) or not HEADER_SAFE.match(grafana["token"]):
        out.append("bc_grafana_annotation.token is missing, or holds whitespace or a character outside printable ASCII "
                   "(the value is not shown)")
    if not (isinstance(grafana.get("tags", []), list) and all(isinstance(t, str) for t in grafana.get("tags", []))):
        out.append("bc_grafana_annotation.tags must be a list of strings, e.g. [ct200, gpu-fleet]")
    return out


def _env_problems(env: Any) -> list[str]:
    """bc_engine_env: names an environment takes, each one value of one line."""
    out: list[str] = []
    for name, value in (env.items() if isinstance(env, dict) else []):
        if not isinstance(name, str) or not ENV_NAME.match(name):
            out.append("bc_engine_env: %r is not an environment variable name (letters, digits and _, not starting with "
                       "a digit)" % (name,))
        elif isinstance(value, (dict, list)):
            out.append("bc_engine_env.%s must be one value (a string or a number), not a %s" % (name, type(value).__name__))
        elif CONTROL.search("" if value is None else str(value)):
            out.append("bc_engine_env.%s holds a control character (a newline?): environment values are one line" % name)
    return out


def _secret_problems(v: dict[str, Any], e: dict[str, Any]) -> list[str]:
    """A secret in a free-form field lands on the command line, in --diff and in the unit file (0644)."""
    out = []
    key = e.get("bc_api_key") if isinstance(e.get("bc_api_key"), str) else ""
    args = v.get("bc_engine_extra_args")
    for i, arg in enumerate(args if isinstance(args, list) else []):
        text = str(arg)
        if (key and len(key) >= 4 and key in text) or SECRET_WORD.search(text):
            out.append("bc_engine_extra_args[%d] carries a secret (a key or token flag): the command line is world-readable; "
                       "give the API key as bc_api_key (a 0600 file on the host) and other secrets in bc_engine_env "
                       "(the value is not shown)" % i)
    settings = v.get("bc_engine_settings")
    for name, value in (settings.items() if isinstance(settings, dict) else []):
        if SECRET_WORD.search(str(name)) or (key and len(key) >= 4 and key in str(value)):
            out.append("bc_engine_settings.%s carries a secret: give the API key as bc_api_key (a 0600 file on the host) "
                       "(the value is not shown)" % name)
    return out


def _sweep_problems(v: dict[str, Any]) -> list[str]:
    out = []
    if not _empty(v.get("bc_sweep_backends")):
        try:
            backend_list(name_list(v["bc_sweep_backends"], "bc_sweep_backends"))
        except (ValueError, ShapeError) as err:
            out.append("bc_sweep_backends: %s; use a list of %s" % (err, "|".join(("auto", *BACKENDS))))
    for field in ("bc_sweep_tp_sizes", "bc_sweep_batch_sizes"):
        if not _empty(v.get(field)):
            try:
                int_list(v[field], field)
            except ValueError as err:
                out.append(str(err))
    routing = v.get("bc_sweep_routing")
    if not _empty(routing):
        if not isinstance(routing, list) or not routing or not all(isinstance(r, dict) for r in routing):
            out.append("bc_sweep_routing must be a list of distributions, e.g. [{kind: uniform}, {kind: zipf, skew: 1.0}]")
        else:
            for i, spec in enumerate(routing):
                if spec.get("kind") not in ROUTING_KINDS:
                    out.append("bc_sweep_routing[%d].kind=%s: use one of %s" % (i, str(spec.get("kind"))[:40], "|".join(ROUTING_KINDS)))
    shape = v.get("bc_sweep_shape")
    if isinstance(shape, dict) and shape:
        unknown = sorted(map(str, set(shape) - set(SHAPE_KEYS)))
        missing = [k for k in SHAPE_KEYS if k not in shape]
        if unknown or missing:
            out.append("bc_sweep_shape: %s; its keys are %s" % (
                "; ".join(filter(None, ["unknown key(s) " + ", ".join(unknown) if unknown else "",
                                        "missing " + ", ".join(missing) if missing else ""])), ", ".join(SHAPE_KEYS)))
        else:
            for k in SHAPE_KEYS:
                if isinstance(shape[k], bool) or not isinstance(shape[k], int) or not 1 <= shape[k] <= 1 << 20:
                    out.append("bc_sweep_shape.%s=%s: give a whole number from 1 to %d" % (k, str(shape[k])[:40], 1 << 20))
            if not out and shape["top_k"] > shape["num_experts"]:
                out.append("bc_sweep_shape.top_k=%s is more than num_experts=%s" % (shape["top_k"], shape["num_experts"]))
    return out


def _router_problems(v: dict[str, Any], e: dict[str, Any]) -> list[str]:
    out = []
    hooks = {k: v[k] for k in ("bc_lb_remove", "bc_lb_restore") if k in v and v[k] != {}}
    for field, hook in hooks.items():
        problem = hook_problem(field, hook)
        if problem:
            out.append(problem)
    if len(hooks) == 1:
        have, lack = next(iter(hooks)), ({"bc_lb_remove", "bc_lb_restore"} - set(hooks)).pop()
        out.append("%s is given without %s: a host taken out of the router must be put back (and one put back must "
                   "have been taken out): give both" % (have, lack))
    if not hooks and e.get("bc_lb_required") not in (False, "false", "False", "no", 0):
        out.append("bc_lb_remove and bc_lb_restore are not given: the service would be stopped while a router may still "
                   "send it traffic. Give both router hooks, or set bc_lb_required: false for a host no router sends "
                   "traffic to")
    return out


def unit_name(name: Any) -> str:
    """bc_unit as one name everywhere (the lock, the unit, the files): without a trailing .service."""
    text = str(name)
    return text[: -len(".service")] if text.endswith(".service") else text


# a setting absent or empty (the contract: `empty: derived`) takes its value from others, by one rule each
DERIVED = {
    "bc_url": lambda e: "http://127.0.0.1:%d" % int(e["bc_port"]),
    "bc_service_group": lambda e: e["bc_service_user"],
    # the drain's deadline, SGLang's shutdown after it (45 s) and a margin (30 s)
    "bc_stop_timeout_s": lambda e: int(e["bc_drain_deadline_s"]) + 45 + 30,
    "bc_sweep_python": lambda e: e["bc_engine_python"],
}
# lists an AWX survey answers as "1,8" or "sglang,triton": one form for every use
LISTS = {
    "bc_sweep_backends": name_list,
    "bc_sweep_tp_sizes": int_list,
    "bc_sweep_batch_sizes": int_list,
    "bc_sweep_tune_batch_sizes": lambda value, name: int_list(value, name, empty_ok=True),
}
SCALARS = {"int": check_type_int, "bool": check_type_bool, "float": check_type_float}


def effective(contract: dict[str, dict[str, Any]], given: dict[str, Any], results_dir: str = "") -> dict[str, Any]:
    """Every setting of the contract as the cycle uses it, under its own name: the value given (inventory, AWX, -e),
    its number or truth read as Ansible reads them (an AWX answer "900" is 900), else its default; the derived ones
    (DERIVED; bc_results_dir: `results_dir`, the controller's) filled in; bc_unit without a trailing .service; the
    lists (LISTS) in one form. A value that cannot be read so stays as given: the preflight's check (problems) names
    it. A derived one whose source cannot be read raises ValueError naming both."""
    out = {}
    for name, spec in contract.items():
        value = given[name] if name in given else spec.get("default")
        read = SCALARS.get(str(spec.get("type")))
        if read is not None and value is not None:
            try:
                value = read(value)
            except (TypeError, ValueError):
                pass
        out[name] = value
    try:
        for name, rule in DERIVED.items():
            if name in out and _empty(out[name]):
                out[name] = rule(out)
    except (TypeError, ValueError) as exc:
        raise ValueError("%s is derived from a setting that cannot be read: %s" % (name, exc)) from None
    if "bc_results_dir" in out and _empty(out["bc_results_dir"]):
        out["bc_results_dir"] = results_dir
    if out.get("bc_unit"):
        out["bc_unit"] = unit_name(out["bc_unit"])
    for name, rule in LISTS.items():
        if name in out:
            try:
                out[name] = rule(out[name], name)
            except ValueError:
                pass  # as given: the preflight's check names it; a recovery that never reads it is not stopped by it
    return out


def problems(contract: dict[str, dict[str, Any]], given: dict[str, Any]) -> list[str]:
    """Every problem of the given settings against the contract, each naming the setting and the fix;
    [] when all are sound. Types are Ansible's own check (the contract is an argument spec); a
    non-finite number is refused before it (Ansible raises on one). Never quotes a secret's value."""
    secrets = _secrets(contract, given) + hook_secrets(given.get("bc_lb_remove"), given.get("bc_lb_restore"))
    known = {k: given[k] for k in given if k in contract}
    out: list[str] = _missing(contract, known)
    bad: set[str] = set()
    for name, value in known.items():
        size = _size_problem(name, contract[name], value)
        if size:
            out.append(size)
            bad.add(name)
        elif contract[name].get("type") == "int" and isinstance(value, str) and value.strip().endswith("%"):
            low, high = contract[name].get("range", ("", ""))
            out.append("%s=%s: give a whole number from %s to %s, without the %% sign" % (name, value.strip()[:20], low, high))
            bad.add(name)
        elif _nonfinite(value):
            out.append("%s=%s: not a finite number" % (name, "<redacted>" if contract[name].get("no_log") else value))
            bad.add(name)
        elif contract[name].get("nonempty") and _empty(value):  # before the types: "" is empty, not a bad number
            out.append("%s is empty: %s" % (name, contract[name].get("why_nonempty", "give a value (%s)" % contract[name]["description"])))
            bad.add(name)
    # no `no_log` here: Ansible would blank every occurrence of a secret's value in its messages, a one-letter value
    # too (every "n" of a setting's name); the secrets are scrubbed below instead (values of 4 characters or more)
    spec = {k: {a: b for a, b in s.items() if a in ("type", "elements", "choices")} for k, s in contract.items()}
    checkable = {k: val for k, val in known.items() if k not in bad}
    for name, value in checkable.items():  # a blank answer (an AWX survey's) to a list whose empty has a meaning
        if contract[name].get("type") == "list" and contract[name].get("empty") and isinstance(value, str) and not value.strip():
            checkable[name] = []
    validator = ArgumentSpecValidator(spec)
    try:
        result = validator.validate(checkable)
        errors, typed = result.error_messages, result.validated_parameters
    except (TypeError, ValueError, OverflowError, ArithmeticError):  # Ansible's own check raises on some values ("inf")
        errors, typed = [], {}
        for name, value in checkable.items():  # one at a time, to name the one it cannot read
            try:
                one = validator.validate({name: value})
                errors.extend(one.error_messages)
                typed[name] = one.validated_parameters.get(name)
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                errors.append("%s=%s: cannot be read as %s" % (
                    name, "<redacted>" if contract[name].get("no_log") else str(value)[:60], contract[name].get("type")))
    for message in errors:
        out.append(message)
        bad.update(k for k in checkable if re.search(r"\b%s\b" % re.escape(k), message))
    if errors and not bad:
        bad.update(checkable)
    effective = {k: given[k] if k in given else s.get("default") for k, s in contract.items()}
    out.extend(_field_problems(contract, known, typed, bad))
    high = (contract.get("bc_serial", {}).get("range") or [1, SERIAL_MAX])[1]
    out.extend(_value_problems({k: val for k, val in known.items() if k not in bad}, effective, high))
    required = effective.get("bc_api_key_required") not in (False, "false", "False", "no", 0)
    if "bc_api_key" in contract and "bc_api_key" not in bad and not effective.get("bc_api_key") and required:
        # the host's part (a unit that has a key today) is the preflight's, once it has read the host
        out.append(key_problem("", "", True, "", "").replace(" Nothing was touched.", "").rstrip("."))
    return [_scrub(m, secrets) for m in dict.fromkeys(out)]


def _missing(contract: dict[str, dict[str, Any]], known: dict[str, Any]) -> list[str]:
    """Each required setting that is not given, all of them at once (one run names every one)."""
    return ["%s is not given: set it in the inventory (or -e, or AWX): %s" % (name, str(spec.get("description", "")).rstrip("."))
            for name, spec in contract.items() if spec.get("required") and name not in known]
