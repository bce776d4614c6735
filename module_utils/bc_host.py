# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host probes every module shares: commands with a deadline, and secrets kept out of text.

Every command the modules run goes through `run`: a hung `nvidia-smi` (it hangs on a wedged GPU)
or `systemctl` ends at its timeout with an error that names the command, never a hung task.
Every text that leaves a module or the cycle (journal tails, process listings, failure messages,
the event log) goes through `redact`.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"
# `api_key='x'` (SGLang's ServerArgs repr), `--api-key x`, `API_KEY=x`, `Authorization: Bearer x`,
# `token: x`: the value after any secret-looking key, whatever the quoting
SECRET_FIELD = re.compile(
    r"""(?ix)
    (?P<key>\b[A-Za-z_-]*(?:api[_-]?key|token|secret|password|passwd|authorization)['"]?)
    (?P<sep>\s*[=:]\s*(?:bearer\s+)?['"]?)
    (?P<value>(?!None\b|null\b|<redacted>)[^\s'",)}\]]+)
    """)
# a command-line flag and its value: `--api-key x`, `--admin-api-key x`
SECRET_FLAG = re.compile(r"(?i)(--[a-z-]*(?:api-key|token|secret|password)(?:\s+|=))(?!<redacted>)([^\s'\",)}\]]+)")
BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",)}\]]+")
# values too short to be secrets would redact half the text: an API key is longer
MIN_SECRET_LEN = 4


class CommandError(Exception):
    """A command failed to run or ran past its deadline; the message names it."""


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every given secret value and every secret-looking field's value replaced."""
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(str(s)) >= MIN_SECRET_LEN}, key=len, reverse=True):
        out = out.replace(str(secret), REDACTED)
    out = SECRET_FLAG.sub(lambda m: m.group(1) + REDACTED, out)
    out = SECRET_FIELD.sub(lambda m: m.group("key") + m.group("sep") + REDACTED, out)
    return BEARER.sub(lambda m: m.group(1) + REDACTED, out)


def check_timeout(value: float, field: str, maximum: float = 7 * 86400) -> float:
    """A finite number of seconds in (0, maximum], or a ValueError naming `field`."""
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value) or value <= 0 or value > maximum:
        raise ValueError("%s must be > 0 and at most %d seconds (a finite number), got %r" % (field, maximum, value))
    return float(value)


def run(argv: list[str], timeout: float, stdin: str | None = None, env: dict[str, str] | None = None,
        cwd: str | None = None) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of an argument list (no shell), or a CommandError once it ran past
    `timeout` seconds (the process is killed) or could not be started."""
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace", env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise CommandError("%s did not finish within %g s and was killed (a hung %s: see the host)"
                           % (" ".join(argv[:3]), timeout, argv[0])) from None
    except OSError as err:
        raise CommandError("cannot run %s: %s" % (argv[0], err)) from None
    return proc.returncode, proc.stdout, proc.stderr


GPU_QUERY = ("index", "name", "memory.free", "memory.total", "memory.used")


def gpus(nvidia_smi: str, timeout: float) -> list[dict[str, Any]]:
    """Each GPU's index, name and free/total/used MiB from one `nvidia-smi --query-gpu` call ([] when
    it fails: a host without a driver); a hung nvidia-smi is a CommandError at `timeout`."""
    rc, out, _err = run([nvidia_smi, "--query-gpu=" + ",".join(GPU_QUERY), "--format=csv,noheader,nounits"], timeout)
    found = []
    for line in out.splitlines() if rc == 0 else []:
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == len(GPU_QUERY) and parts[0].isdigit() and all(p.isdigit() for p in parts[2:]):
            found.append({"index": int(parts[0]), "name": parts[1], "free_mib": int(parts[2]),
                          "total_mib": int(parts[3]), "used_mib": int(parts[4])})
    return found
