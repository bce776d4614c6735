"""A stand-in for pip's get-pip.py bootstrap, for ansible-test on machines that cannot reach
ci-files.testing.ansible.com (ansible-test downloads get-pip-<version>.py from there to put pip into each
sanity test's empty virtual environment: ansible_test/_util/target/setup/requirements.py, bootstrap()).

It takes get-pip's arguments: pip from the standard library's ensurepip, then the packages asked for. ansible-test
runs it with a bare environment (no PIP_* nor SSL_* variables: _internal/util.py common_environment), so the pip
settings of the machine (its CA bundle behind a TLS-inspecting proxy, its index and wheel folders) come from
get_pip_offline.json beside it, written by ./tasks sanity from the caller's environment, and are kept as the
virtual environment's own pip.conf for ansible-test's installs that follow."""

import configparser
import json
import os
import subprocess
import sys

if __name__ == "__main__":
    settings_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "get_pip_offline.json")
    settings = json.load(open(settings_file)) if os.path.exists(settings_file) else {}
    conf = configparser.ConfigParser()
    conf["global"] = {k: v for k, v in settings.items() if v}
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as fh:
        conf.write(fh)
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    # in its own process: ensurepip sets PIP_CONFIG_FILE=/dev/null in the environment of the one that runs it
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pip", "install", *args], check=True, timeout=900)
