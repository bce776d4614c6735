"""The repository is the collection inference_ops.benchmark_cycle: collections/ (where
collections/ansible_collections/inference_ops/benchmark_cycle links back to the root) on sys.path makes
its Python importable by the same full names the plugins use; the filter plugin, the modules, the lab's
scripts and the test harness's callback importable by file name, for tests that call them directly."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("collections", "plugins/filter", "plugins/modules", "lab", "tests/integration/callback"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))
