"""The modules through the real `ansible` CLI (AnsiballZ, argument_spec, check mode) on localhost:
bad input must fail before anything happens, with a message naming the option."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bc_shared_ansiballz import settings as shared_payloads

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = str(Path(sys.executable).parent / "ansible")
COLLECTION = "inference_ops.benchmark_cycle"


def adhoc(module: str, args: dict, check: bool = False, python: str = sys.executable, path: str = "") -> dict:
    """The collection's `module` (its name in the collection) run once on localhost; `path` first on its PATH."""
    # the minimal output callback, as `ansible` runs without callback plugins loaded; loaded here for the test harness's
    # alone (tests/integration/callback/bc_shared_ansiballz.py: a payload built once for these runs); no ANSIBLE_*
    # setting of the caller's
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
               PATH=":".join(filter(None, [path, os.environ["PATH"]])), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_CALLBACKS_ENABLED="bc_shared_ansiballz", **shared_payloads(ROOT))
    cmd = [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={python}",
           "-m", "%s.%s" % (COLLECTION, module), "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False).stdout
    head, _, body = out[out.index("localhost |"):].partition("=>")
    result, _end = json.JSONDecoder().raw_decode(body.strip())
    return dict(result, _status=head.split("|")[1].strip())


@pytest.mark.parametrize(("args", "message"), [
    ({"url": "127.0.0.1:8080"}, "is not an http(s) URL with a host"),
    ({"url": "http://127.0.0.1:8080/health"}, "has a path; give the base URL only"),
    ({"url": "http://127.0.0.1:99999"}, "invalid port"),
    ({"url": "http://127.0.0.1:8080", "timeout": -1}, "timeout must be > 0"),
    ({"url": "http://127.0.0.1:8080", "expect": "4"}, "prompt/expect apply to probe=completion only"),
    ({"url": "http://127.0.0.1:8080", "probe": "ping"}, "value of probe must be one of"),
    ({"url": "http://127.0.0.1:8080", "engine": "tgi"}, "engine 'tgi' is not known; use one of: llamacpp, sglang, vllm"),
])
def test_inference_health_refuses_bad_input(args, message):
    r = adhoc("inference_health", args)
    assert r["_status"] == "FAILED!" and message in r["msg"]


def test_inference_health_nothing_listening_is_down_not_failed():
    r = adhoc("inference_health", {"url": "http://127.0.0.1:9", "timeout": 2})
    assert r["_status"] == "SUCCESS" and r["phase"] == "down" and r["ready"] is False and not r.get("failed")


def test_inference_health_api_key_is_not_logged():
    r = adhoc("inference_health", {"url": "http://127.0.0.1:9", "api_key": "sk-secret-123", "timeout": 1})
    assert "sk-secret-123" not in json.dumps(r)


@pytest.mark.parametrize(("args", "message"), [
    ({"group_size": 48}, "group_size 48 is not one the Marlin kernel takes"),
    ({"top_k": 500}, "top_k 500 exceeds num_experts 384"),
    ({"batch_sizes": []}, "batch_sizes is empty"),
    ({"batch_sizes": [0, 4]}, "batch_sizes must be positive"),
    ({"tp_size": 3}, "not divisible by tp_size 3"),
    ({"iters": 1}, "iters must be >= 3"),
])
def test_marlin_sweep_refuses_bad_shapes_before_any_allocation(args, message):
    r = adhoc("marlin_sweep", dict({"output": "/tmp/never.json", "backend": "sglang"}, **args), check=True)
    assert r["_status"] == "FAILED!" and message in r["msg"]


def test_marlin_sweep_check_mode_returns_the_plan_and_estimate():
    r = adhoc("marlin_sweep", {"output": "/tmp/never.json", "tp_size": 8}, check=True)
    assert r["_status"] == "SUCCESS" and r["shape"]["N"] == 256 and 1.0 <= r["estimate_peak_gib"] < 2.0
    assert not Path("/tmp/never.json").exists()


def test_marlin_sweep_past_its_timeout_is_killed_and_says_where_the_points_are(tmp_path):
    out = tmp_path / "sweep.json"
    r = adhoc("marlin_sweep", {"output": str(out), "backend": "torch", "num_experts": 16, "hidden_size": 256,
                               "intermediate_size": 256, "top_k": 4, "batch_sizes": [1, 2, 4, 8, 16, 32, 64],
                               "iters": 1000000, "timeout": 2})
    assert r["_status"] == "FAILED!" and r["msg"].startswith("the sweep ran past timeout=2 s and was killed"), r
    assert r["output"] == str(out)
