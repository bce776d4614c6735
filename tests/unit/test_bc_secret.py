"""The API key's way in (#28): from the 0600 file BC_API_KEY_FILE names (AWX's credential file injector), else from
BC_API_KEY; never an empty secret from a file that is wrong, and never in ansible-runner's record of the job's
environment (artifacts/<id>/command keeps the environment: ansible_runner/runner.py 2.4.3:139-145)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "lookup"))
from bc_secret import SecretError, read_secret

KEY = "sk-file-secret-7d1e"


def secret_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_text(text)
    path.chmod(mode)
    return path


def binary_file(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.write_bytes(b"sk-\xff\xfe-key")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(("text", "want"), [(KEY, KEY), (KEY + "\n", KEY), (KEY + "\r\n", KEY), (KEY + "\n\n", KEY + "\n")])
def test_the_file_is_the_secret_less_one_trailing_newline(tmp_path, text, want):
    assert read_secret("BC_API_KEY", {"BC_API_KEY_FILE": str(secret_file(tmp_path, text))}) == want


def test_without_a_file_the_environment_value_and_empty_when_unset():
    assert read_secret("BC_API_KEY", {"BC_API_KEY": KEY}) == KEY
    assert read_secret("BC_API_KEY", {}) == ""  # the preflight refuses an empty key (bc_api_key_required)


@pytest.mark.parametrize(("setup", "message"), [
    (lambda p: {"BC_API_KEY_FILE": str(secret_file(p, KEY, 0o644))}, r"readable by others than its owner \(mode 0644\): chmod 600"),
    (lambda p: {"BC_API_KEY_FILE": str(secret_file(p, KEY, 0o640))}, r"mode 0640"),
    (lambda p: {"BC_API_KEY_FILE": str(secret_file(p, "\n"))}, r"BC_API_KEY_FILE=.* is empty: put the secret in it"),
    (lambda p: {"BC_API_KEY_FILE": str(p / "absent")}, r"BC_API_KEY_FILE=.*absent cannot be read \(No such file"),
    (lambda p: {"BC_API_KEY_FILE": str(p)}, r"is not a regular file"),
    (lambda p: {"BC_API_KEY_FILE": str(secret_file(p, KEY)), "BC_API_KEY": "other"}, r"both BC_API_KEY and BC_API_KEY_FILE are set"),
    # a symlink is not followed (what is checked must be what is read), a FIFO never blocks the read
    (lambda p: (p / "link").symlink_to(secret_file(p, KEY)) or {"BC_API_KEY_FILE": str(p / "link")}, r"cannot be read \(Too many levels"),
    (lambda p: os.mkfifo(p / "fifo", 0o600) or {"BC_API_KEY_FILE": str(p / "fifo")}, r"is not a regular file"),
    # bytes that are not text: said without the byte or its position (both would be the key's)
    (lambda p: {"BC_API_KEY_FILE": str(binary_file(p))},
     r"^BC_API_KEY_FILE=\S+ is not UTF-8 text: put the secret in it as one line of text$"),
])
def test_a_file_that_is_wrong_is_an_error_naming_the_variable_and_the_fix_never_an_empty_key(tmp_path, setup, message):
    with pytest.raises(SecretError, match=message):
        read_secret("BC_API_KEY", setup(tmp_path))


def inventory_key(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """bc_api_key as inventory/ct200 gives it, read by a real `ansible` run (never contacting the host: localhost)."""
    return subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", "inventory/ct200", "--host", "ct200"],
                          cwd=ROOT, env=dict({k: v for k, v in os.environ.items() if not k.startswith("BC_API_KEY")},
                                             ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), **env),
                          capture_output=True, text=True, timeout=120, check=False)


def template_key(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "ansible"), "ct200", "-i", "inventory/ct200", "-c", "local",
                           "-e", "ansible_host=127.0.0.1", "-e", f"ansible_python_interpreter={sys.executable}",
                           "-m", "ansible.builtin.debug", "-a", "msg={{ bc_api_key | hash('sha256') }}"],
                          cwd=ROOT, env=dict({k: v for k, v in os.environ.items() if not k.startswith("BC_API_KEY")},
                                             ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                                             ANSIBLE_STDOUT_CALLBACK="ansible.builtin.oneline", **env),
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_site_inventory_reads_the_key_from_the_credentials_file_and_refuses_a_wrong_file(tmp_path):
    import hashlib

    good = secret_file(tmp_path, KEY + "\n")
    run = template_key({"BC_API_KEY_FILE": str(good)})
    assert run.returncode == 0 and hashlib.sha256(KEY.encode()).hexdigest() in run.stdout, run.stdout + run.stderr
    assert KEY not in run.stdout + run.stderr
    good.chmod(0o644)
    run = template_key({"BC_API_KEY_FILE": str(good)})
    assert run.returncode != 0 and "chmod 600" in run.stdout + run.stderr and KEY not in run.stdout + run.stderr
    # the inventory as a file holds the lookup, not the key
    assert KEY not in inventory_key({"BC_API_KEY_FILE": str(secret_file(tmp_path, KEY))}).stdout
    assert json.loads(inventory_key({}).stdout)["bc_api_key"].startswith("{{ lookup('inference_ops.benchmark_cycle.bc_secret'")


def test_a_file_of_another_user_is_refused_naming_the_owner(tmp_path):
    path = secret_file(tmp_path, KEY)
    os.chown(path, 65534, 65534)  # nobody: the tests run as root (a controller's own file is the job's user's)
    with pytest.raises(SecretError, match=r"belongs to uid 65534, not to this user \(uid 0\): chown it"):
        read_secret("BC_API_KEY", {"BC_API_KEY_FILE": str(path)})
