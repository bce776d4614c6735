# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a module reaches an inference server's HTTP API: shared by inference_memory and inference_memory_info
(the spec is bc_release.SERVER_SPEC)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url: {description: Base URL of the server., type: str, required: true}
  engine:
    description: Engine profile, one of the engines of module_utils/bc_engines.py (C(ENGINES)); another is refused naming them.
    type: str
    default: sglang
  engine_version: {description: Engine version (the profile is chosen by it)., type: str}
  api_key: {description: Bearer key of the server., type: str}
  api_key_fallbacks:
    description: Keys tried in turn only on a 401 or 403 to O(api_key) (a rotation - the keys the running server may have started with).
    type: list
    elements: str
    default: []
  validate_certs: {description: Verify TLS certificates., type: bool, default: true}
  timeout: {description: Seconds each HTTP request may take., type: float, default: 30}
  unit:
    description:
      - The server's systemd unit. Where the engine's release needs the server to run with a flag, an environment or a
        loopback address (vLLM), what it really runs with is read from this unit's main process; without it, that is
        unknown and the release is not supported.
    type: str
"""
