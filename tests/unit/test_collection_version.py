"""The collection's version (galaxy.yml) sorts after every release in the changelog (#44 item 4): a build made after a
release must never sort below it (a `0.9.0-dev` build after 0.9.0 did), so Galaxy and `ansible-galaxy collection
install` take the newer one."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.utils.version import SemanticVersion

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_sorts_after_every_release_of_the_changelog():
    version = SemanticVersion(yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"])
    releases = [SemanticVersion(v) for v in yaml.safe_load((ROOT / "changelogs/changelog.yaml").read_text())["releases"]]
    assert releases, "the changelog has no release"
    assert all(version > release for release in releases), (str(version), [str(r) for r in releases])


def test_a_development_build_of_a_released_version_sorts_below_it():
    """Why the check above is needed: SemVer puts a pre-release before its release."""
    assert SemanticVersion("0.9.0-dev+g1234") < SemanticVersion("0.9.0") < SemanticVersion("0.10.0")
