# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin: a directory on the controller that this user can write (the module of the same name documents it)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ansible.plugins.action import ActionBase

PROBE_PREFIX = ".bc-write-check-"


def make_dirs(path: str) -> bool:
    """`path` and its missing parents created, each mode 0755 exactly (whatever the umask: never world-writable).
    True if this process made any of them (the hosts of a batch run this at once, each in its own worker: one made
    meanwhile by another is taken as made)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    made = False
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            if os.path.isdir(directory):
                continue
            raise
        os.chmod(directory, 0o755)
        made = True
    return made


def ensure_writable(path: str, check_mode: bool) -> tuple[bool, str]:
    """(created, problem) for the directory `path` on this machine: created where missing (mode 0755, parents too),
    then proven writable by a file written and removed in it. In check mode nothing is created or written: a directory
    that exists must be one this user may write (access(2)). A symlink to a directory is that directory (a volume
    mounted elsewhere). problem is '' when the directory is usable."""
    if not os.path.isabs(path):
        return False, "not an absolute path"
    created = False
    if not os.path.exists(path):
        if os.path.islink(path) and not os.path.exists(path):  # (a directory made meanwhile is no link)
            return False, "a symlink to nothing"
        if check_mode:
            return True, ""
        try:
            created = make_dirs(path)
        except OSError as err:
            return False, f"cannot create it: {err}"
    if not os.path.isdir(path):
        return False, "not a directory"
    if check_mode:
        return False, "" if os.access(path, os.W_OK | os.X_OK) else "this user may not write it"
    try:
        handle, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=path)
    except OSError as err:
        return created, f"a file cannot be written in it: {err}"
    os.close(handle)
    try:
        os.unlink(probe)
    except OSError as err:
        return created, f"the file written there cannot be removed ({probe}): {err}"
    return created, ""


class ActionModule(ActionBase):
    """Runs on the controller only: nothing is sent to the host (see the results_dir module's documentation)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path",))
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp  # no remote temporary directory: nothing runs on the host
        path = self._task.args.get("path")
        if not isinstance(path, str) or not path:
            return dict(result, path="", created=False, failed=True,
                        msg="path: give the results directory, an absolute path on the controller")
        path = os.path.expandvars(os.path.expanduser(path))  # as a module's `type: path`
        created, problem = ensure_writable(path, bool(self._task.check_mode))
        result.update(path=path, created=created, changed=created)
        if problem:
            result.update(failed=True, msg=f"{path}: {problem}")
        return result
