"""Make the repo's module_utils importable as ansible.module_utils.* (as AnsiballZ does) and
its filter plugins importable by name, for tests that call them directly."""

import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
for sub in ("filter_plugins", "library", "lab"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))
