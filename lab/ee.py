"""Build the execution environment (execution-environment.yml) here, with no registry and no package index (#28).

    lab/ee.py build      build the EE unless the image for this recipe exists; print its reference
    lab/ee.py ref        print the reference the current recipe builds, built or not (it downloads the wheels if they
                         are not cached: their names are part of it)

1. The base the EE file names (`localhost/benchmark-cycle-ee-base:<suite>`): Debian's own packages laid out by
   mmdebstrap from the mirror apt already uses and imported with `podman import`, as the lab builds its hosts
   (lab/lab.py). Its recipe's hash is a label; it is rebuilt only when that changes.
2. A wheelhouse of everything pip installs in the build (the EE file's Python requirements, ansible-core and
   ansible-runner, and what ansible-builder's own stages install), for the base's Python and glibc, downloaded once
   per requirement set with this machine's pip and certificates. The build's containers cannot verify this machine's
   TLS interception, and a site's build host may have no index at all: every build step reads only this folder (it
   is mounted with a pip.conf of its own over /etc/pip.conf; a build-time mount leaves only its empty mount point in
   the image).
3. `ansible-builder build`, tagged `localhost/benchmark-cycle-ee:<hash of all of the above>`.

The collections come in as Galaxy artifacts (collection/vendor.py, `./tasks` collections), installed --offline.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shlex
import shutil
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
VENDOR = ROOT / "collection" / "vendor.py"
# what the base holds: Python >= 3.11 with venv and Debian's pip (Debian disables ensurepip for its python3, so the
# EE file skips ansible-builder's pip_install step), and the controller's own commands (the EE file declares them
# too, for a base that lacks them)
BASE_PACKAGES = ["python3", "python3-venv", "python3-pip", "openssh-client", "procps", "hostname", "ca-certificates"]
# what ansible-builder 3.2's own stages pip-install besides the EE file's requirements: the builder stage's
# `pip install bindep pyyaml packaging` and the final stage's init (options.container_init's default)
BUILDER_PIP = ["bindep", "pyyaml", "packaging", "dumb-init==1.2.5"]
# each base suite's Python and glibc minor (the wheels are chosen for those, not for the build machine's)
BASE_PYTHON = {"bookworm": ("3.11", 36), "trixie": ("3.13", 41)}
RECIPE_LABEL = "benchmark-cycle.recipe"
WHEELS_MOUNT = "/wheels"
BUILD_TIMEOUT_S = 1800


def definition() -> dict[str, Any]:
    return yaml.safe_load(EE_FILE.read_text(encoding="utf-8"))


def base_ref(ee: dict[str, Any]) -> str:
    return ee["images"]["base_image"]["name"]


def suite_of(ref: str) -> str:
    """The Debian suite of the base: its tag, one BASE_PYTHON knows."""
    suite = ref.rsplit(":", 1)[-1]
    if suite not in BASE_PYTHON:
        raise SystemExit(f"ee: the base image {ref} is not tagged with a Debian suite this knows ({', '.join(BASE_PYTHON)})")
    return suite


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
    suite = suite_of(ref)
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
                           str(ROOT / "collections")], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0 or "---" not in proc.stdout:
        raise SystemExit(f"ee: ansible-builder introspect of {ROOT / 'collections'} failed (rc {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr)[-800:]}")
    found = yaml.safe_load(proc.stdout.split("---", 1)[1]) or {}
    return [line.split("#", 1)[0].strip() for line in found.get("python") or []]


def pip_requirements(ee: dict[str, Any]) -> list[str]:
    deps = ee["dependencies"]
    return [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"], *deps.get("python", []),
            *collection_requirements(), *BUILDER_PIP]


def wheelhouse(requirements: list[str], suite: str) -> Path:
    """Wheels of every requirement and its dependencies for the base's Python and C library (not this machine's),
    downloaded once per requirement set by this machine's pip; a download cut short is never taken for done."""
    python, glibc = BASE_PYTHON[suite]
    dest = CACHE / f"ee-wheels-{digest(requirements, python, glibc)}"
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    platforms = [arg for minor in range(17, glibc + 1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")]
    run([sys.executable, "-m", "pip", "download", "-q", "-d", str(tmp), "--only-binary=:all:", "--implementation", "cp",
         "--python-version", python, "--abi", "cp" + python.replace(".", ""), *platforms,
         "--platform", "manylinux2014_x86_64", *requirements], timeout=BUILD_TIMEOUT_S)
    (tmp / "pip.conf").write_text(f"[global]\nno-index = true\nfind-links = {WHEELS_MOUNT}\n", encoding="utf-8")
    (tmp / ".complete").touch()
    tmp.rename(dest)
    return dest


def artifacts() -> list[Path]:
    found = sorted(ARTIFACTS.glob("*")) if ARTIFACTS.is_dir() else []
    if not any(a.name.endswith(".tar.gz") for a in found):
        raise SystemExit(f"ee: no collection artifacts in {ARTIFACTS}: run `./tasks collections` (or ./tasks ee, which "
                         "makes them first)")
    return found


def image_ref(ee: dict[str, Any], wheels: Path | None = None) -> str:
    """The EE's reference: a hash of its definition, its collections (by name and version: an artifact rebuilt from the
    same wheel differs only in its timestamps; the code that makes them), its base recipe, its wheels and the
    ansible-builder that builds it (its stages install BUILDER_PIP)."""
    wheel_names = sorted(p.name for p in wheels.glob("*.whl")) if wheels else pip_requirements(ee)
    return f"{EE_REPO}:" + digest(EE_FILE.read_bytes(), [a.name for a in artifacts()], VENDOR.read_bytes(),
                                   importlib.metadata.version("ansible-builder"), base_recipe(base_ref(ee)),
                                   wheel_names)


def build() -> str:
    ee = definition()
    artifacts()  # before anything slow: the collections are made by ./tasks collections
    wheels = wheelhouse(pip_requirements(ee), suite_of(base_ref(ee)))
    ref = image_ref(ee, wheels)
    if subprocess.run(["podman", "image", "exists", ref], check=False, timeout=60).returncode == 0:
        print(f"ee: {ref} is up to date", file=sys.stderr)
        return ref
    build_base(base_ref(ee))
    started = time.monotonic()
    builder = Path(sys.executable).parent / "ansible-builder"
    shutil.rmtree(CONTEXT, ignore_errors=True)  # no artifact of an earlier recipe in the context
    # --no-cache: podman's layer cache does not see what a build-time volume holds (the wheels)
    run([str(builder), "build", "-f", str(EE_FILE), "-c", str(CONTEXT), "-t", ref, "--container-runtime", "podman", "--no-cache",
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
        print(image_ref(ee, wheelhouse(pip_requirements(ee), suite_of(base_ref(ee)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
