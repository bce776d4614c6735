"""The progress callback loads the Jinja filters once in ansible-playbook's own process (v2_playbook_on_start), so that
the workers forked from it for each task find them loaded (docs/timings.md: about 60 ms of CPU per task otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from ansible.plugins.loader import init_plugin_loader, callback_loader
init_plugin_loader()
loaded = lambda: sorted(m for m in sys.modules
                        if m.startswith(('ansible.plugins.filter.', 'ansible.plugins.test.')) or m.endswith('.plugins.filter.bc_filters'))
callback = callback_loader.get(sys.argv[1])
before = loaded()
callback.v2_playbook_on_start(None)
print(json.dumps({'before': before, 'after': loaded()}))
"""


def probe(name: str, **env_extra: str) -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([sys.executable, "-c", PROBE, name], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
                         env=dict(env, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), **env_extra)).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_playbook_start_loads_the_collections_filters_and_the_builtin_tests_in_the_parent():
    seen = probe("inference_ops.benchmark_cycle.benchmark_cycle_progress")
    assert seen["before"] == []  # nothing had loaded them: the callback did
    assert "ansible_collections.inference_ops.benchmark_cycle.plugins.filter.bc_filters" in seen["after"], seen
    assert any(m.startswith("ansible.plugins.filter.core") for m in seen["after"]), seen
    assert any(m.startswith("ansible.plugins.test.core") for m in seen["after"]), seen
