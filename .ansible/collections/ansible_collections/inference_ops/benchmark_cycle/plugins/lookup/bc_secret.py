# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup: a secret from a 0600 file named by NAME_FILE in the environment (AWX's file injector), else from NAME."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bc_secret
author: benchmark-cycle contributors (!UNKNOWN)
short_description: A secret from the file that NAME_FILE names (0600), else from NAME in the environment
description:
  - Returns the secret called O(_terms[0]) from the environment of the controller.
  - When V(<NAME>_FILE) is set, the secret is the content of that file, less one trailing newline. This is how an AWX
    credential type hands a secret over (a file injector and an V(env) entry that names C(tower.filename)), and how
    ansible-runner can be given it. ansible-runner records the job's environment in its C(artifacts/<id>/command),
    so a secret passed as V(<NAME>) itself is kept there in clear; a path is not a secret.
  - The file must be a regular file, not empty, and readable by its owner only (no group or other bits). Anything else
    is an error naming the variable and the fix, never an empty secret.
  - Without V(<NAME>_FILE), the value of V(<NAME>) (empty when unset, and the cycle's preflight refuses an empty key unless
    C(bc_api_key_required) is false). Both set is an error, since the two could differ.
options:
  _terms:
    description: The secret's name, e.g. V(BC_API_KEY); exactly one.
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
# inventory group_vars: the API key from AWX's credential (BC_API_KEY_FILE) or from an operator's shell (BC_API_KEY)
bc_api_key: "{{ lookup('inference_ops.benchmark_cycle.bc_secret', 'BC_API_KEY') }}"
"""

RETURN = r"""
_raw:
  description: The secret, as one string (empty only when neither V(<NAME>_FILE) nor V(<NAME>) is set).
  type: list
  elements: str
"""

import os
import stat
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase


class SecretError(ValueError):
    """A secret that cannot be read as given: the message names the variable and the fix."""


def read_secret(name: str, environ: Mapping[str, str]) -> str:
    """The secret `name`: the content of the file `<name>_FILE` names (a regular 0600-or-stricter file, not empty, one
    trailing newline dropped), else the value of `<name>` ("" when unset)."""
    path, value = environ.get(name + "_FILE", ""), environ.get(name, "")
    if path and value:
        raise SecretError("both %s and %s_FILE are set: give the secret one way (unset %s; AWX's credential sets %s_FILE)"
                          % (name, name, name, name))
    if not path:
        return value
    try:  # opened once, never through a symlink, never blocking on a FIFO: what is checked is what is read
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise SecretError("%s_FILE=%s cannot be read (%s): give the path of a regular file this user owns, mode 0600"
                          % (name, path, err.strerror)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # checked on the descriptor: a directory or a FIFO is never read
            raise SecretError("%s_FILE=%s is not a regular file: give the path of the file that holds the secret" % (name, path))
        if st.st_uid != os.geteuid():
            raise SecretError("%s_FILE=%s belongs to uid %d, not to this user (uid %d): chown it, or give a file of your own"
                              % (name, path, st.st_uid, os.geteuid()))
        if st.st_mode & 0o077:
            raise SecretError("%s_FILE=%s is readable by others than its owner (mode %04o): chmod 600 %s"
                              % (name, path, stat.S_IMODE(st.st_mode), path))
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # never the byte or its position: both are the secret's
        raise SecretError("%s_FILE=%s is not UTF-8 text: put the secret in it as one line of text" % (name, path)) from None
    text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not text:
        raise SecretError("%s_FILE=%s is empty: put the secret in it, or unset %s_FILE" % (name, path, name))
    return text


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
        if len(terms) != 1 or not isinstance(terms[0], str) or not terms[0]:
            raise AnsibleError("bc_secret takes one name, e.g. lookup('inference_ops.benchmark_cycle.bc_secret', "
                               "'BC_API_KEY'); got %r" % (terms,))
        try:
            return [read_secret(terms[0], os.environ)]
        except SecretError as err:
            raise AnsibleError(str(err)) from None
