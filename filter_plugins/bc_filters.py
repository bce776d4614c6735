# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure filters of benchmark-cycle: sweep statistics, report tables, engine command lines."""

from __future__ import annotations

import difflib
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils"))
from bc_sweepstats import (
    knee as _knee,
)
from bc_sweepstats import (
    merge_reference,
    per_token,
    roofline,
    sweep_compare,
    sweep_table,
)
from bc_unit import UnitError, check_name


def sweep_knee(points: list[dict[str, Any]], num_experts: int | None = None, tolerance: float = 0.10) -> dict[str, Any]:
    """{knee_m, plateau_m, plateau_ms} of a sweep's points (see module_utils/bc_sweepstats.knee)."""
    return _knee(points, num_experts, tolerance=tolerance)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", str(version))
    if not parts:
        raise ValueError("version %r has no number in it; give e.g. 0.5.10" % version)
    return tuple(int(x) for x in parts[:4])


def flag_for_version(history: list[list[Any]], version: str) -> str | None:
    """The flag in force at `version` from [[since_version, flag_or_null], ...] (oldest first)."""
    current: str | None = None
    want = _version_tuple(version)
    for since, flag in history:
        if _version_tuple(since) <= want:
            current = flag
    return current


def cli_args(settings: dict[str, Any], flags: dict[str, Any], version: str = "0") -> list[str]:
    """Command-line arguments from settings and an engine's flag table.

    flags maps a setting to a flag string, or to a version history [[since, flag|null], ...].
    True booleans give the bare flag, False/None/"" give nothing, lists repeat the values
    after one flag; a setting with no flag in the table is an error naming it."""
    args: list[str] = []
    for key, value in settings.items():
        if value is None or value is False or value == "":
            continue
        if key not in flags:
            raise ValueError("setting %r has no flag for this engine; known: %s" % (key, ", ".join(sorted(flags))))
        flag = flags[key]
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


def reload_line(result: dict[str, Any], host: str, retries_left: int | None = None) -> str:
    """One progress line of a readiness retry: host, elapsed, phase, stage, retries left."""
    elapsed = result.get("since_start_s")
    clock = "--:--" if elapsed is None else "%02d:%02d" % divmod(int(elapsed), 60)
    stage = result.get("stage") or result.get("reason") or ""
    left = "" if retries_left is None else "  (%d retries left)" % retries_left
    return '%s reload %s  %-8s "%s"%s' % (host, clock, result.get("phase", "?"), stage, left)


def int_list(value: Any, name: str = "value") -> list[int]:
    """A list of positive ints from a list, an int or a comma-separated string (AWX survey answers
    arrive as strings); anything else is an error naming `name`."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    out = []
    for item in items:
        try:
            number = int(str(item).strip())
        except ValueError:
            raise ValueError("%s: %r is not a whole number (give e.g. 1,2,4 or [1, 2, 4])" % (name, item)) from None
        if number < 1:
            raise ValueError("%s: %d is not positive" % (name, number))
        out.append(number)
    if not out:
        raise ValueError("%s is empty" % name)
    return out


def unit_name_problem(name: str, field: str = "bc_unit") -> str:
    """'' for a valid systemd unit name, else the error (the rule is bc_unit.check_name's, the
    module's own, so that the preflight refuses exactly what inference_unit would)."""
    try:
        check_name(str(name), field)
    except UnitError as err:
        return str(err)
    return ""


def oom_kills_since(vmstat: str, before: Any) -> int:
    """How many processes the kernel's OOM killer killed since the count `before`, from the text of
    /proc/vmstat (its `oom_kill` line); 0 when either count is unknown."""
    match = re.search(r"(?m)^oom_kill (\d+)$", vmstat or "")
    if match is None or before is None or str(before).strip() in ("", "None"):
        return 0
    return max(0, int(match.group(1)) - int(before))


def closest(known: list[str], name: str) -> str:
    """The known name closest to `name` (for "did you mean" messages), or "-" when none is close."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return match[0] if match else "-"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "bc_sweep_knee": sweep_knee, "bc_per_token": per_token, "bc_roofline": roofline,
            "bc_sweep_compare": sweep_compare, "bc_sweep_table": sweep_table,
            "bc_merge_reference": merge_reference, "bc_flag_for_version": flag_for_version,
            "bc_cli_args": cli_args, "bc_systemd_quote": systemd_quote, "bc_closest": closest, "bc_int_list": int_list,
            "bc_reload_line": reload_line, "bc_oom_kills_since": oom_kills_since, "bc_unit_name_problem": unit_name_problem,
        }
