"""collection/vars_json.py (#29): the JSON the plays load is exactly what ansible-core's own loader reads from the
commented YAML beside it, and a JSON left behind by a change to the YAML is named by --check (./tasks lint)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collection"))
import vars_json


@pytest.mark.parametrize("rel", vars_json.SOURCES)
def test_the_json_is_the_data_ansible_reads_from_the_yaml(rel):
    loader = DataLoader()
    from_yaml = loader.load_from_file(str(ROOT / rel), cache="none", unsafe=True)
    from_json = loader.load_from_file(str((ROOT / rel).with_suffix(".json")), cache="none", unsafe=True)
    assert json.dumps(from_json) == json.dumps(from_yaml)  # the same values, keys in the same order


def test_check_names_a_json_that_no_longer_matches_its_yaml(tmp_path, monkeypatch, capsys):
    for rel in vars_json.SOURCES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
        shutil.copy((ROOT / rel).with_suffix(".json"), (tmp_path / rel).with_suffix(".json"))
    monkeypatch.setattr(vars_json, "ROOT", tmp_path)
    assert vars_json.main(["--check"]) == 0
    contract = tmp_path / vars_json.SOURCES[0]
    contract.write_text(contract.read_text().replace("default: 0.5.10", "default: 0.5.11"))
    assert vars_json.main(["--check"]) == 1 and "contract.json is out of date" in capsys.readouterr().err
    assert vars_json.main([]) == 0 and vars_json.main(["--check"]) == 0  # written again, it matches
    assert json.loads(contract.with_suffix(".json").read_text())["bc_contract"]["bc_engine_version"]["default"] == "0.5.11"
    with pytest.raises(ValueError, match="mapping"):
        vars_json.to_json("- a list\n")
