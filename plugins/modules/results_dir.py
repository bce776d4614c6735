#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module (documentation): the action plugin of the same name does the work, on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: results_dir
short_description: A directory on the controller that this user can write, proven by writing a file there
description:
  - The sweep's results land on the controller. One that cannot write them (a read-only project copy, AWX on
    Kubernetes with no volume there) would take the service down for a sweep whose results are then lost; the cycle
    refuses it in its preflight, before anything on a host is touched.
  - The state is one object, the directory O(path). Missing, it is created (mode C(0755); its parents too, with the
    same mode). Present, its mode is never changed. Either way a file is written in it and removed again; only a
    write that worked proves the directory writable (a read-only mount, an ACL, no inode left).
  - A symlink to a directory is that directory (a volume mounted elsewhere). A path that is not a directory, a
    symlink to nothing, or a directory this user cannot write fails the task naming the path and the reason.
  - Runs on the controller, in the task's worker process (an action plugin); no module is sent anywhere and no
    interpreter is started, which the four builtin tasks it replaced (C(stat), C(file), C(tempfile), C(file)) cost
    on every cycle. The task is delegated to C(localhost), so none of the host's connection or become settings is
    read.
version_added: "1.0.0"
options:
  path:
    description: The directory, on the controller (absolute).
    type: path
    required: true
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode:
    support: full
    description:
      - Creates and writes nothing; a directory that exists must be one this user may write (its permission bits and
        ACLs, as the kernel answers C(access(2))).
  diff_mode: {support: none, description: Nothing to show as a diff.}
  action:
    support: full
    description: Implemented by the action plugin of the same name, which runs on the controller.
  async: {support: none, description: Done in the controller's own process.}
  platform:
    support: full
    platforms: posix
    description: The controller's POSIX file system.
seealso:
  - module: inference_ops.benchmark_cycle.sweep_report
    description: Writes each sweep's report and history into this directory, on the controller.
  - module: ansible.builtin.file
    description: A directory with its attributes, on any host.
"""

EXAMPLES = r"""
- name: Refuse a results directory the controller cannot write
  inference_ops.benchmark_cycle.results_dir:
    path: /srv/benchmark-cycle/results
"""

RETURN = r"""
path:
  description: The directory, with C(~) and environment variables expanded (empty when O(path) was not given).
  returned: always
  type: str
  sample: /srv/benchmark-cycle/results
created:
  description: The directory was missing and was created (check mode - it would be).
  returned: always
  type: bool
  sample: false
"""
