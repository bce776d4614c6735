"""inventory/example, the minimal inventory an operator copies first (docs/operator-guide.md, "1. Your inventory"): it
parses with the real ansible-inventory, the playbook syntax-checks against it, and the preflight's own verdict
(bc_settings_problems, module_utils/bc_contract.py) accepts its settings with the key given as the bc_secret lookup
reads it, with each router hook it shows (the command it gives, the HTTP call it shows commented) and with the
no-router line. Its host is a TEST-NET-1 address: nothing here contacts it (no run but --syntax-check)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from bc_filters import given, settings_problems

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "lookup"))
from bc_secret import read_secret

EXAMPLE = ROOT / "inventory/example"
BIN = Path(sys.executable).parent
CONTRACT = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
KEY = "sk-example-4c19e2d7a0"
LB_TOKEN = "lb-example-93b1f0"
ENV = dict({k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "BC_"))}, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))


def hostvars() -> dict[str, Any]:
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(EXAMPLE), "--list"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stdout + proc.stderr
    inventory = json.loads(proc.stdout)
    assert inventory["inference"]["hosts"] == ["gpu1"], inventory
    return inventory["_meta"]["hostvars"]["gpu1"]


def with_secrets(value: Any) -> Any:
    """The lookups the example writes, as bc_secret reads them (the real function, the secret in the environment)."""
    if isinstance(value, dict):
        return {k: with_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_secrets(v) for v in value]
    if isinstance(value, str):
        secrets = {"BC_API_KEY": KEY, "BC_LB_TOKEN": LB_TOKEN}
        return re.sub(r"\{\{ lookup\('(?:inference_ops\.benchmark_cycle\.)?bc_secret', '(\w+)'\) \}\}",
                      lambda m: read_secret(m.group(1), secrets), value)
    return value


def commented(start: str, end: str) -> dict[str, Any]:
    """The settings commented out between two comment lines of group_vars/all.yml, read as YAML."""
    text = (EXAMPLE / "group_vars/all.yml").read_text()
    block = text[text.index(start):text.index(end)].splitlines()[1:]
    return yaml.safe_load("\n".join(line[2:] for line in block))


def test_the_example_parses_and_its_host_can_never_be_contacted():
    v = hostvars()
    assert ipaddress.ip_address(v["ansible_host"]) in ipaddress.ip_network("192.0.2.0/24")  # TEST-NET-1, RFC 5737
    assert "REPLACE" in (EXAMPLE / "hosts.yml").read_text()
    # the key as ct200 takes it, never written
    assert v["bc_api_key"] == "{{ lookup('inference_ops.benchmark_cycle.bc_secret', 'BC_API_KEY') }}"


def test_the_preflight_verdict_accepts_the_example_with_the_key_given():
    v = with_secrets(hostvars())
    assert v["bc_api_key"] == KEY
    assert settings_problems(given(v), CONTRACT) == []


@pytest.mark.parametrize(("variant", "router"), [
    ("shown", None),
    ("http", ("# Or an HTTP call", "# Or, for a host")),
    ("no router", ("# Or, for a host", None)),
])
def test_each_router_hook_the_example_shows_is_accepted(variant, router):
    v = {k: val for k, val in with_secrets(hostvars()).items() if k.startswith("bc_")}
    if router:
        start, end = router
        text = (EXAMPLE / "group_vars/all.yml").read_text()
        v = {k: val for k, val in v.items() if k not in ("bc_lb_remove", "bc_lb_restore")}
        v.update(with_secrets(commented(start, end) if end else yaml.safe_load(text[text.index(start):].splitlines()[1][2:])))
    assert settings_problems(v, CONTRACT) == [], variant
    hooks = [v[k] for k in ("bc_lb_remove", "bc_lb_restore") if k in v]
    assert all("check" in h for h in hooks) and (len(hooks) == 2 or v.get("bc_lb_required") is False), variant
    if variant == "http":
        assert all(h["headers"]["Authorization"] == "Bearer " + LB_TOKEN for h in hooks)


def test_without_hooks_or_the_no_router_line_the_example_is_refused():
    v = {k: val for k, val in with_secrets(hostvars()).items() if k.startswith("bc_") and not k.startswith("bc_lb_")}
    assert any("bc_lb_remove and bc_lb_restore are not given" in m for m in settings_problems(v, CONTRACT))


def test_the_cycle_syntax_checks_against_the_example():
    proc = subprocess.run([str(BIN / "ansible-playbook"), "benchmark_cycle.yml", "-i", str(EXAMPLE), "--syntax-check"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_exported_key_is_read_only_through_the_inventorys_lookup_line_as_the_refusal_says(tmp_path):
    """#44 item 8: an operator's own inventory without the bc_api_key line: `export BC_API_KEY` reaches nothing (the
    real ansible-inventory, the key exported), and the refusal says so and sends them to the line the example has."""
    import shutil

    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    settings = inventory / "group_vars/all.yml"
    line = next(line for line in settings.read_text().splitlines() if line.startswith("bc_api_key:"))
    assert "bc_secret" in line and "'BC_API_KEY'" in line  # the line the refusal sends the operator to
    settings.write_text(settings.read_text().replace(line + "\n", ""))
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"], cwd=ROOT,
                          env=dict(ENV, BC_API_KEY=KEY), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    v = json.loads(proc.stdout)["_meta"]["hostvars"]["gpu1"]
    assert "bc_api_key" not in v and KEY not in proc.stdout
    refused = [p for p in settings_problems(given(with_secrets(v)), CONTRACT) if p.startswith("bc_api_key is empty")]
    assert len(refused) == 1 and "exported with no such line in the inventory is not read" in refused[0], refused
    assert "as inventory/example does (the bc_secret lookup of BC_API_KEY)" in refused[0]
