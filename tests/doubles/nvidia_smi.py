#!/usr/bin/env python3
"""TEST DOUBLE of `nvidia-smi --query-gpu=... --format=csv,...` (the lab has no GPU): one GPU whose
memory is what the SGLang doubles on this host hold (their state files under /run/bc-double/, each
with its pid: a server that is gone holds nothing). The lab installs it as /usr/local/bin/nvidia-smi
only for the release and GPU health tests. It answers the queries the project makes, in nvidia-smi's
format, as the real one on the H200 answered them (tests/unit/fixtures/h200/): `--query-gpu=` of
`index, name, memory.free, memory.total, memory.used, driver_version`, with or without `nounits`
(then "MiB"); and `-q -x`, the XML report, read from BC_DOUBLE_SMI_XML (default
/etc/bc-double/nvidia-smi-q.xml: the real H200's, or a fault made from it by the test)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STATE_DIR = Path(os.environ.get("BC_DOUBLE_GPU_DIR", "/run/bc-double"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path("/proc/%d/stat" % pid).exists() and Path("/proc/%d/stat" % pid).read_text().split()[2] != "Z"


def main(argv: list[str]) -> int:
    if "-q" in argv and "-x" in argv:
        xml = Path(os.environ.get("BC_DOUBLE_SMI_XML", "/etc/bc-double/nvidia-smi-q.xml"))
        if not xml.exists():
            print("No devices were found")
            return 6
        sys.stdout.write(xml.read_text())
        return 0
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if query is None or "csv" not in fmt:
        print("nvidia-smi double: only --query-gpu=... --format=csv[,noheader][,nounits] is implemented", file=sys.stderr)
        return 2
    total, used, name = 81559, 0, "NVIDIA H200 (double)"
    for path in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            state = json.loads(path.read_text())
        except ValueError:
            continue
        total, name = state.get("total_mib", total), state.get("name", name)
        if alive(int(state.get("pid", 0))):
            used += int(state.get("used_mib", 0))
    unit = "" if "nounits" in fmt else " MiB"
    values = {"index": "0", "name": name, "memory.total": "%d%s" % (total, unit), "memory.used": "%d%s" % (used, unit),
              "memory.free": "%d%s" % (max(total - used, 0), unit), "driver_version": "580.159.04"}
    fields = [f.strip() for f in query.split(",")]
    unknown = [f for f in fields if f not in values]
    if unknown:
        print('Field "%s" is not a valid field to query.' % unknown[0], file=sys.stderr)
        return 2
    if "noheader" not in fmt:
        print(", ".join(f + ("" if f in ("index", "name", "driver_version") or "nounits" in fmt else " [MiB]") for f in fields))
    print(", ".join(values[f] for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
