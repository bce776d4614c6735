"""collection/build.py: the collection assembled from the project's layout. The rewrites are table-tested; the
whole build runs on the real tree and what it made is read back (the sanity test, the offline install and the
lab cycle from the installed collection are in tests/integration/test_collection.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collection"))

import build

FQCN = "inference_ops.benchmark_cycle"
PKG = "ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils"


@pytest.mark.parametrize(("source", "expected"), [
    ("from ansible.module_utils.bc_host import run\n", f"from {PKG}.bc_host import run\n"),
    ("from ansible.module_utils import bc_marlin  # shipped\n", f"from {PKG} import bc_marlin  # shipped\n"),
    ("from ansible.module_utils.basic import AnsibleModule\n", "from ansible.module_utils.basic import AnsibleModule\n"),
    ("x = 1\n# >>> project layout only (why)\nimport ansible.module_utils\nY = 2\n# <<< project layout only\nz = 3\n",
     "x = 1\nz = 3\n"),
    ("extends_documentation_fragment: [cycle_heartbeat]\n", f"extends_documentation_fragment: [{FQCN}.cycle_heartbeat]\n"),
    ("extends_documentation_fragment: [other.coll.thing, cycle_heartbeat]\n",
     f"extends_documentation_fragment: [other.coll.thing, {FQCN}.cycle_heartbeat]\n"),
    # an import the collection's longer package name pushes past pep8's 160 columns: one name a line
    ("from ansible.module_utils.bc_gpuhealth import dcgm_failures, judge, parse_smi_xml, rules_problems, without_smi, xid_events\n",
     f"from {PKG}.bc_gpuhealth import (\n    dcgm_failures,\n    judge,\n    parse_smi_xml,\n    rules_problems,\n"
     "    without_smi,\n    xid_events,\n)\n"),
])
def test_python_is_rewritten_to_the_collections_names(source, expected):
    assert build.rewrite_python(source, FQCN, ["cycle_heartbeat"]) == expected


def test_a_modules_documentation_names_the_modules_by_fqcn():
    source = ('DOCUMENTATION = r"""\ndescription: See M(inference_unit) and M(ansible.builtin.command), '
              'RV(inference_unit#module:was).\nseealso:\n  - module: inference_unit\n"""\n')
    assert build.rewrite_python(source, FQCN, [], ["inference_unit"]) == (
        f'DOCUMENTATION = r"""\ndescription: See M({FQCN}.inference_unit) and M(ansible.builtin.command), '
        f'RV({FQCN}.inference_unit#module:was).\nseealso:\n  - module: {FQCN}.inference_unit\n"""\n')


def test_a_modules_examples_name_the_modules_by_fqcn():
    source = 'X = 1\nEXAMPLES = r"""\n- name: Stop\n  inference_unit:\n    state: stopped\n"""\ninference_unit = 2\n'
    assert build.rewrite_python(source, FQCN, [], ["inference_unit"]) == (
        f'X = 1\nEXAMPLES = r"""\n- name: Stop\n  {FQCN}.inference_unit:\n    state: stopped\n"""\ninference_unit = 2\n')


@pytest.mark.parametrize(("source", "expected"), [
    ("- name: Stop\n  inference_unit:\n    name: x\n", f"- name: Stop\n  {FQCN}.inference_unit:\n    name: x\n"),
    ("  - inference_unit:\n", f"  - {FQCN}.inference_unit:\n"),
    ("    inference_unit_name: x\n", "    inference_unit_name: x\n"),  # a variable that starts with a module's name
    ("  ansible.builtin.command: ls\n", "  ansible.builtin.command: ls\n"),
    ("x: \"{{ a | bc_redact([b]) }}\"\n", f"x: \"{{{{ a | {FQCN}.bc_redact([b]) }}}}\"\n"),
    ("x: \"{{ a|bc_safe_name('n') | bc_redact }}\"\n", f"x: \"{{{{ a|{FQCN}.bc_safe_name('n') | {FQCN}.bc_redact }}}}\"\n"),
    ("x: \"{{ l | map('bc_redact', k) }}\"\n", f"x: \"{{{{ l | map('{FQCN}.bc_redact', k) }}}}\"\n"),
    ("x: \"{{ l | map( 'bc_redact', k) }}\"\n", f"x: \"{{{{ l | map( '{FQCN}.bc_redact', k) }}}}\"\n"),
    ("x: \"{% filter bc_redact %}s{% endfilter %}\"\n", f"x: \"{{% filter {FQCN}.bc_redact %}}s{{% endfilter %}}\"\n"),
    ("x: \"{{ a | bc_redacted }}\"\n", "x: \"{{ a | bc_redacted }}\"\n"),  # not a filter of ours: left alone
    ("    name: service_drain\n", f"    name: {FQCN}.service_drain\n"),
    ("- name: service_drain is next\n", "- name: service_drain is next\n"),  # a task's name, not a role
    # an option of a module that shares another module's name is not a task
    ("- name: Report\n  sweep_report:\n    inference_unit: {}\n  when: x\n",
     f"- name: Report\n  {FQCN}.sweep_report:\n    inference_unit: {{}}\n  when: x\n"),
    ("- block:\n    - name: In a block\n      inference_unit:\n        state: stopped\n",
     f"- block:\n    - name: In a block\n      {FQCN}.inference_unit:\n        state: stopped\n"),
])
def test_playbooks_and_roles_name_the_collections_content_by_fqcn(source, expected):
    assert build.rewrite_yaml(source, FQCN, ["inference_unit", "sweep_report"], ["bc_redact", "bc_safe_name"],
                              ["service_drain"]) == expected


def test_what_the_rewrite_missed_is_reported():
    assert build.leftovers(f"from {PKG}.bc_host import run\n", FQCN, ["inference_unit"], ["bc_redact"]) == []
    missed = build.leftovers("from ansible.module_utils.bc_host import run\n- name: x\n  inference_unit:\n  y: \"{{ a | bc_redact }}\"\n",
                             FQCN, ["inference_unit"], ["bc_redact"])
    assert missed == ["a project-layout import of module_utils", "the filter bc_redact by its short name",
                      "the module inference_unit by its short name"]


@pytest.mark.parametrize(("text", "finding"), [
    ("x: \"{{ a | default('') | select('bc_redact') }}\"\n", "the filter bc_redact"),  # any bare use, not only after |
    ("x: \"{{ a is bc_redact }}\"\n", "the filter bc_redact"),
    ("- action: inference_unit state=stopped\n", "the module inference_unit"),
    ("- local_action: {module: inference_unit}\n", "the module inference_unit"),
    ("- {name: a, inference_unit: {}}\n", "the module inference_unit"),
    ("    name: \"service_drain\"\n", "the role service_drain"),
    ("    name: service_drain  # the drain\n", "the role service_drain"),
    ("- role: service_drain\n", "the role service_drain"),
])
def test_a_short_name_the_rewrite_has_no_rule_for_is_still_found(text, finding):
    found = build.leftovers(text, FQCN, ["inference_unit"], ["bc_redact"], ["service_drain"])
    assert any(f.startswith(finding) for f in found), found


def test_comments_and_fqcns_are_not_short_names():
    text = (f"# bc_redact hides secrets\n- name: x\n  {FQCN}.inference_unit:\n    v: \"{{{{ a | {FQCN}.bc_redact }}}}\"\n"
            f"- ansible.builtin.include_role:\n    name: {FQCN}.service_drain\n"
            "  vars: {budget: \"{{ {'inference_unit': 1} }}\"}\n")  # a key of a Jinja dict is no task
    assert build.leftovers(text, FQCN, ["inference_unit"], ["bc_redact"], ["service_drain"]) == []


def test_filter_names_are_read_from_the_filter_plugin():
    names = sorted(build.plugin_filters(ROOT))
    assert {"bc_redact", "bc_strategy", "bc_recovery_findings"} <= set(names) and all(n.startswith("bc_") for n in names)


def test_the_version_is_stamped_unless_head_is_the_release_tag(tmp_path):
    assert build.stamped_version("1.2.3", tmp_path) == "1.2.3-dev"  # not a git tree: no commit to name
    stamped = build.stamped_version("1.2.3")
    assert stamped == "1.2.3" or stamped.startswith("1.2.3-dev+g"), stamped


def test_a_build_after_a_release_sorts_after_it(tmp_path):
    """A build made past the v0.9.0 tag is 0.9.1-dev+g..., which sorts above 0.9.0 (0.9.0-dev+g... sorted below it);
    one made before the release stays below it; the tagged commit is the release itself."""
    from ansible.utils.version import SemanticVersion

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True, timeout=30)
    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "before the release")
    before = build.stamped_version("0.9.0", tmp_path)
    git("tag", "v0.9.0")
    assert build.stamped_version("0.9.0", tmp_path) == "0.9.0"
    git("commit", "-q", "--allow-empty", "-m", "after the release")
    after = build.stamped_version("0.9.0", tmp_path)
    assert before.startswith("0.9.0-dev+g") and after.startswith("0.9.1-dev+g"), (before, after)
    assert SemanticVersion(before) < SemanticVersion("0.9.0") < SemanticVersion(after)


def test_the_built_collection_holds_the_product_and_names_only_its_own_code(tmp_path):
    dest = build.build(tmp_path)
    assert dest == tmp_path / "ansible_collections" / "inference_ops" / "benchmark_cycle"
    galaxy = yaml.safe_load((dest / "galaxy.yml").read_text())
    assert galaxy["namespace"] == "inference_ops" and galaxy["version"].startswith("0.9.0")
    assert (dest / "meta" / "runtime.yml").exists() and (dest / "LICENSE").read_text().startswith(" " * 20 + "GNU GENERAL")
    modules = {p.stem for p in (dest / "plugins" / "modules").glob("*.py")}
    assert modules == {p.stem for p in (ROOT / "library").glob("*.py")}
    assert {p.name for p in (dest / "playbooks").glob("*.yml")} == set(build.PLAYBOOKS)  # not the lab's provisioning
    for path in (dest / "plugins").rglob("*.py"):
        ast.parse(path.read_text(), str(path))  # still Python
    for path in [*(dest / "roles").rglob("*.yml"), *(dest / "playbooks").rglob("*.yml")]:
        yaml.safe_load(path.read_text())  # still YAML
    unit = (dest / "plugins" / "module_utils" / "bc_unit.py").read_text()
    assert f"from {PKG}.bc_host import" in unit
    assert "__path__.append" not in (dest / "plugins" / "filter" / "bc_filters.py").read_text()


def test_a_short_name_the_rewrite_cannot_reach_fails_the_build(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "rewrite_yaml", lambda text, *_a: text)  # a rewrite that misses everything
    with pytest.raises(build.BuildError, match="by its short name"):
        build.build(tmp_path)
