"""bench/setting_files.py: the files one setting crosses, followed through its names (#46)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import setting_files


def test_a_setting_is_followed_through_the_wiring_and_the_roles_defaults(tmp_path):
    (tmp_path / "playbooks/vars").mkdir(parents=True)
    (tmp_path / "roles/r/defaults").mkdir(parents=True)
    (tmp_path / "playbooks/vars/cycle.yml").write_text('cycle_x: "{{ cycle_bc.bc_x }}"\nr_x: "{{ cycle_x | int }}"\n'
                                                        'cycle_bc_x2: "{{ cycle_bc.bc_x2 }}"\n')
    (tmp_path / "roles/r/defaults/main.yml").write_text("r_x: 5\nr_y: \"{{ r_x * 2 }}\"\n")
    # bc_x2 shares a prefix, not the name: never followed
    assert setting_files.names_of("bc_x", tmp_path) == ["bc_x", "cycle_x", "r_x", "r_y"]


def test_the_readiness_budget_crosses_only_its_definition_and_its_uses():
    """One name from the inventory to the role that uses it (cycle_bc.bc_readiness_timeout_s): no wiring, no role input."""
    names = setting_files.names_of("bc_readiness_timeout_s")
    assert names == ["bc_readiness_timeout_s"]
    files = setting_files.files_of(names)
    assert files["definition"] == ["playbooks/vars/contract.yml"] and "wiring" not in files and "role interface" not in files
    assert "roles/service_readiness/tasks/main.yml" in files["use"]
    assert not any(f.endswith(".json") and f.startswith("playbooks/") for kind in files.values() for f in kind)  # generated
    assert setting_files.main(["bc_no_such_setting"]) == 2
