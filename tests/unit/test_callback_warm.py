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
loaded = lambda: sorted(m for m in sys.modules if m.split('.')[-1].startswith('bc_filters'))
callback = callback_loader.get('benchmark_cycle_progress')
before = loaded()
callback.v2_playbook_on_start(None)
print(json.dumps({'before': before, 'after': loaded()}))
"""


def test_the_playbook_start_loads_the_projects_filters_in_the_parent():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=dict(env, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["before"] == []  # nothing had loaded them: the callback did
    assert len(seen["after"]) == 1, seen
