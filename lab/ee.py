"""Build the execution environment (execution-environment.yml) here, with no registry and no package index (#28).

    lab/ee.py build      build the EE unless the image for this recipe exists; print its reference
    lab/ee.py ref        print the reference the current recipe builds, built or not

1. The base the EE file names (`localhost/benchmark-cycle-ee-base:<suite>`): Debian's own packages laid out by
   mmdebstrap from the mirror apt already uses and imported with `podman import`, as the lab builds its hosts
   (lab/lab.py). Its recipe's hash is a label; it is rebuilt only when that changes.
2. A wheelhouse of everything pip installs in the build (the EE file's Python requirements, ansible-core and
   ansible-runner, and what ansible-builder's own stages install), made once per requirement set with this machine's
   pip and certificates. The build's containers cannot verify this machine's TLS interception, and a site's build
   host may have no index at all: every build step reads only this folder (it is mounted with a pip.conf of its own
   over /etc/pip.conf; build-time mounts leave nothing in the image).
3. `ansible-builder build`, tagged `localhost/benchmark-cycle-ee:<hash of all of the above>`.

The collections come in as Galaxy artifacts (collection/vendor.py, `./tasks` collections), installed --offline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import CACHE, ROOT, apt_mirror, host_suite, run

EE_FILE = ROOT / "execution-environment.yml"
EE_REPO = "localhost/benchmark-cycle-ee"
CONTEXT = ROOT / "build" / "ee-context"
ARTIFACTS = ROOT / "collections" / "artifacts"
# what the base holds: Python >= 3.11 with venv and Debian's pip (Debian disables ensurepip for its python3, so the
# EE file skips ansible-builder's pip_install step), and the controller's own commands (the EE file declares them
# too, for a base that lacks them)
BASE_PACKAGES = ["python3", "python3-venv", "python3-pip", "openssh-client", "procps", "hostname", "ca-certificates"]
# what ansible-builder 3.2's own stages pip-install besides the EE file's requirements: the builder stage's
# `pip install bindep pyyaml packaging` and the final stage's init (options.container_init's default)
BUILDER_PIP = ["bindep", "pyyaml", "packaging", "dumb-init==1.2.5"]
RECIPE_LABEL = "benchmark-cycle.recipe"
WHEELS_MOUNT = "/wheels"
BUILD_TIMEOUT_S = 1800


def definition() -> dict[str, Any]:
    return yaml.safe_load(EE_FILE.read_text(encoding="utf-8"))


def base_ref(ee: dict[str, Any]) -> str:
    return ee["images"]["base_image"]["name"]


def digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return h.hexdigest()[:12]


def base_recipe(ref: str) -> str:
    """The hash of what makes the base: its Debian suite (the tag) and packages."""
    return digest(ref, BASE_PACKAGES)


def label_of(ref: str) -> str | None:
    proc = subprocess.run(["podman", "image", "inspect", ref, "--format", "{{ index .Labels \"%s\" }}" % RECIPE_LABEL],
                          capture_output=True, text=True, check=False, timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else None


def build_base(ref: str) -> None:
    recipe = base_recipe(ref)
    if label_of(ref) == recipe:
        print(f"ee: base {ref} is up to date", file=sys.stderr)
        return
    suite = ref.rsplit(":", 1)[1]
    tmp = Path(os.environ.get("BC_LAB_BUILD_DIR", "/dev/shm")) / f"bc-ee-base-{recipe}.tar"
    started = time.monotonic()
    try:
        run(["mmdebstrap", "--variant=apt", "--mode=root", "--format=tar", "--include=" + ",".join(BASE_PACKAGES),
             suite, str(tmp), apt_mirror(host_suite())], timeout=BUILD_TIMEOUT_S)
        run(["podman", "import", "--change", f"LABEL {RECIPE_LABEL}={recipe}", "--change", "CMD=/bin/bash", str(tmp), ref],
            timeout=600, stdout=subprocess.DEVNULL)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"ee: built the base {ref} in {time.monotonic() - started:.0f} s", file=sys.stderr)


def collection_requirements() -> list[str]:
    """What the collections ask pip for (their requirements.txt), as ansible-builder's own introspection reads them
    from the collections installed from the same artifacts (`./tasks` collections)."""
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-builder"), "introspect", "--sanitize",
                           str(ROOT / "collections")], capture_output=True, text=True, check=True, timeout=120)
    found = yaml.safe_load(proc.stdout.split("---", 1)[1]) or {}
    return [line.split("#", 1)[0].strip() for line in found.get("python") or []]


def pip_requirements(ee: dict[str, Any]) -> list[str]:
    deps = ee["dependencies"]
    return [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"], *deps.get("python", []),
            *collection_requirements(), *BUILDER_PIP]


def wheelhouse(requirements: list[str]) -> Path:
    """Wheels of every requirement and its dependencies, made once per requirement set by this machine's pip."""
    dest = CACHE / f"ee-wheels-{digest(requirements, sys.version_info[:2])}"
    if (dest / ".complete").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(dest), *requirements], timeout=BUILD_TIMEOUT_S)
    (dest / "pip.conf").write_text(f"[global]\nno-index = true\nfind-links = {WHEELS_MOUNT}\n", encoding="utf-8")
    (dest / ".complete").touch()
    return dest


def image_ref(ee: dict[str, Any], wheels: Path | None = None) -> str:
    """The EE's reference: a hash of its definition, its collections (by name and version: an artifact rebuilt from the
    same wheel differs only in its timestamps), its base recipe and its wheels."""
    artifacts = sorted(ARTIFACTS.glob("*")) if ARTIFACTS.is_dir() else []
    if not any(a.name.endswith(".tar.gz") for a in artifacts):
        raise SystemExit(f"ee: no collection artifacts in {ARTIFACTS}: run `./tasks ee` (it vendors them first)")
    wheel_names = sorted(p.name for p in wheels.glob("*.whl")) if wheels else pip_requirements(ee)
    return f"{EE_REPO}:" + digest(EE_FILE.read_bytes(), [a.name for a in artifacts], base_recipe(base_ref(ee)),
                                   wheel_names)


def build() -> str:
    ee = definition()
    wheels = wheelhouse(pip_requirements(ee))
    ref = image_ref(ee, wheels)
    if subprocess.run(["podman", "image", "exists", ref], check=False, timeout=60).returncode == 0:
        print(f"ee: {ref} is up to date", file=sys.stderr)
        return ref
    build_base(base_ref(ee))
    started = time.monotonic()
    builder = Path(sys.executable).parent / "ansible-builder"
    run([str(builder), "build", "-f", str(EE_FILE), "-c", str(CONTEXT), "-t", ref, "--container-runtime", "podman",
         "--extra-build-cli-args=" + shlex.join([f"--volume={wheels}:{WHEELS_MOUNT}:ro",
                                                 f"--volume={wheels / 'pip.conf'}:/etc/pip.conf:ro"]), "-v", "1"],
        cwd=ROOT, timeout=BUILD_TIMEOUT_S, stdout=sys.stderr)  # stdout is the reference alone
    print(f"ee: built {ref} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return ref


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", choices=["build", "ref"])
    args = parser.parse_args(argv)
    if args.cmd == "build":
        print(build())
    else:
        ee = definition()
        print(image_ref(ee, wheelhouse(pip_requirements(ee))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
