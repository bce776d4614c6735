# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes of a module that only reads (as community.general's attributes.info_module fragment)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Read-only; it runs in check mode.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
"""
