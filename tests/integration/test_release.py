"""No restart: the release strategy under a real systemd, driven by the real cycle. The SGLang double
(its release endpoints as 0.5.16 defines them and as the real server did on the H200) runs as a unit
with --enable-memory-saver; the nvidia-smi double reports the GPU memory it holds, so the preflight
sees a sweep that does not fit beside the service and `auto` picks the release."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import DOUBLE, ROOT, env, install_gpu_double, playbook, playbook_cmd, remove_gpu_double, sh
from test_guarantees import router, with_router

UNIT = "sglang-double"
# the GPU as the double holds it: 81559 MiB in all, weights 63059 + KV cache 18000 + context 500: none free
GPU = "81559,63059,18000"


def settings(**env_changes: str) -> dict:
    extra = dict(DOUBLE, bc_engine_version="0.5.16", bc_stop_policy="auto")
    extra["bc_engine_settings"] = dict(DOUBLE["bc_engine_settings"], enable_memory_saver=True)
    extra["bc_engine_env"] = dict(DOUBLE["bc_engine_env"], BC_DOUBLE_SGLANG_VERSION="0.5.16", BC_DOUBLE_GPU=GPU,
                                  BC_DOUBLE_LOAD_S="0.5", BC_DOUBLE_WARMUP_S="0.5", **env_changes)
    return extra


def main_pid() -> str:
    return sh(f"systemctl show -p MainPID --value {UNIT}").strip()


def answer() -> str:
    return sh("curl -s -m 20 -H 'Content-Type: application/json' -d '{\"prompt\":\"2+2=\",\"max_tokens\":1}' "
              "http://127.0.0.1:30001/v1/completions || true")


def used_mib() -> int:
    return int(sh("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").strip())


@pytest.fixture
def released_lab(lab):
    """The nvidia-smi double on the lab host (for these tests only), and the SGLang double installed
    with the saver: the first cycle stops the unit to apply it."""
    sh("rm -rf /run/lock/benchmark-cycle-* /run/bc-double")
    install_gpu_double()

    def install(**env_changes: str) -> dict:
        extra = settings(**env_changes)
        run = playbook("benchmark_cycle.yml", extra_vars=dict(extra, bc_stop_policy="always"))
        assert run.rc == 0, run.out[-3000:]
        return extra
    yield install
    sh(f"systemctl stop {UNIT} || true")
    remove_gpu_double()


def test_auto_releases_in_place_aborts_what_runs_and_never_restarts(released_lab, reliability):
    extra = with_router(released_lab(BC_DOUBLE_TOKEN_MS="100"))
    before, full = main_pid(), used_mib()
    # a 30 s request still running when the (forced) drain ends: the pause aborts it, the release survives
    sh("(curl -s -m 90 -H 'Content-Type: application/json' -d '{\"prompt\":\"x\",\"max_tokens\":300}' "
       "http://127.0.0.1:30001/v1/completions > /tmp/long.json 2>&1 &)")
    time.sleep(1)
    run = playbook("benchmark_cycle.yml", extra_vars=dict(extra, bc_drain_deadline_s=2, bc_drain_on_deadline="force"))
    assert run.rc == 0, run.out[-4000:]
    out = " ".join(run.out.split())
    assert "its KV cache released in place (no restart): the sweep fits once the KV cache is released" in out, out[-3000:]
    assert main_pid() == before  # never restarted
    assert '"finish_reason": "abort"' in sh("cat /tmp/long.json")
    assert '"text": "4"' in answer()  # serving, not left paused
    assert used_mib() == full  # the KV cache is back
    assert router() == ["remove", "restore"]
    assert sh(f"systemctl is-active bc-deadman-{UNIT}.timer", check=False).strip() != "active"  # disarmed
    reliability(fault="none: the release path", injected="a sweep that does not fit beside the service (nvidia-smi double: 0 MiB "
                "free) and a 30 s request still running at a forced drain", did="auto chose release; the pause aborted the "
                "request; KV cache released (18000 MiB), swept, resumed; same MainPID; router back", service_after="active, "
                "answers 4, same PID", data_kept="full results", detect_s=None, run_s=run.seconds)


def test_release_cycles_in_a_row_with_a_load_balancer_health_checking_during_the_pause(released_lab, reliability):
    """A load balancer health-checks every backend every second, also while it is paused for the
    release: SGLang logs "Health check failed ..." for each check that waits out its timeout while
    paused (http_server.py 0.5.16:683) and recovers after continue (674-676). That line is not fatal,
    and one of an earlier cycle is history: the next release cycle's drain must not abort on it."""
    extra = with_router(released_lab(SGLANG_HEALTH_CHECK_TIMEOUT="3"))
    before = main_pid()
    poller = sh("(while true; do curl -s -o /dev/null -m 10 http://127.0.0.1:30001/health; sleep 1; done) "
                ">/dev/null 2>&1 & echo $!").strip()
    try:
        runs = []
        for _ in range(2):
            runs.append(playbook("benchmark_cycle.yml", extra_vars=extra))
            assert runs[-1].rc == 0, runs[-1].out[-4000:]
    finally:
        sh(f"kill {poller}", check=False)
    assert "Health check failed" in sh(f"journalctl --no-pager -u {UNIT} -o cat | tail -400")  # the checker did hit the pause
    assert main_pid() == before and '"text": "4"' in answer()
    reliability(fault="a load balancer health-checking a paused server", injected="/health every second through two release "
                "cycles in a row (SGLANG_HEALTH_CHECK_TIMEOUT=3: each check while paused logs 'Health check failed')",
                did="both cycles green: the line is recoverable, and a fatal line counts only in the drain's own window; "
                "never restarted", service_after="active, answers 4, same PID", data_kept="full results", detect_s=None,
                run_s=sum(r.seconds for r in runs))


def test_a_release_that_frees_too_little_falls_back_to_the_stop(released_lab, reliability):
    extra = with_router(released_lab(BC_DOUBLE_RELEASE_FREES="0"))
    before = main_pid()
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    assert run.rc == 0, run.out[-4000:]
    out = " ".join(run.out.split())
    assert "the release freed 0 MiB on GPU 0" in out and "resumed; the service is stopped instead" in out, out[-3000:]
    assert main_pid() != before and '"text": "4"' in answer()
    assert router() == ["remove", "restore"]
    reliability(fault="release frees too little", injected="a release that frees 0 of the 18000 MiB it promised",
                did="measured with nvidia-smi, resumed at once, then the stop path: stopped, swept, started, ready",
                service_after="active, answers 4 (restarted)", data_kept="full results", detect_s=None, run_s=run.seconds)


def cycle_whose_server_dies(released_lab, **fault: str) -> tuple[object, str]:
    """A release cycle whose server dies as `fault` makes it (the double's knob): the play fails, and
    the server is restarted (a new MainPID), answers, and the router takes the host back."""
    extra = with_router(released_lab(**fault))
    before = main_pid()
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    out = " ".join(run.out.split())
    assert run.rc != 0 and "the service was started again and answers correctly" in out, out[-3000:]
    assert main_pid() != before and '"text": "4"' in answer()
    assert router() == ["remove", "restore"]
    return run, out


def test_a_resume_that_kills_the_server_is_followed_by_a_restart(released_lab, reliability):
    run, out = cycle_whose_server_dies(released_lab, BC_DOUBLE_RESUME_FAILS="oom")
    assert "the resume of the released memory" in out and "the server was restarted" in out, out[-3000:]
    assert "CUDA out of memory" in sh(f"journalctl --no-pager -u {UNIT} -o cat | tail -50")
    reliability(fault="resume fails", injected="the server dies in its resume (CUDA out of memory)",
                did="restarted, readiness and the known answer awaited, router back; the play fails naming the resume",
                service_after="active, answers 4 (restarted)", data_kept="full results", detect_s=None, run_s=run.seconds)


def test_a_resume_that_gives_nothing_back_is_not_believed(released_lab, reliability):
    """The resume answers 200 and takes no memory back (a memory saver that failed quietly): believed by
    its 200 alone the cycle was green and the KV cache never came back; read back on the GPU, it is a
    failed resume, and the server is restarted."""
    run, out = cycle_whose_server_dies(released_lab, BC_DOUBLE_RESUME_FAILS="noop")
    assert "the resume answered 200 but the server took back 0 MiB on GPU 0" in out, out[-3000:]
    assert "the server was restarted" in out
    reliability(fault="resume gives nothing back", injected="the resume answers 200 and the server takes no memory back",
                did="the memory read back on the GPU: not believed; restarted, readiness and the known answer awaited, "
                "router back; the play fails naming the resume", service_after="active, answers 4 (restarted)",
                data_kept="full results", detect_s=None, run_s=run.seconds)


def test_a_release_that_kills_the_server_is_followed_by_a_restart(released_lab, reliability):
    run, out = cycle_whose_server_dies(released_lab, BC_DOUBLE_RELEASE_FAILS="crash")
    assert "the release of sglang-double's memory failed" in out, out[-3000:]
    assert "Its state is unknown: it is restarted" in out
    reliability(fault="release fails", injected="the server dies in its release (the memory saver's cuMemUnmap)",
                did="nothing swept; its state unknown, so restarted (never resumed), readiness awaited, router back; the play "
                "fails naming the release", service_after="active, answers 4 (restarted)", data_kept="-", detect_s=None,
                run_s=run.seconds)


def test_a_killed_controller_on_the_release_path_is_covered_by_a_restart(released_lab, reliability):
    extra = with_router(dict(released_lab(), bc_sweep_iters=2000, bc_sweep_timeout_s=15, bc_stop_timeout_s=5,
                             bc_switch_margin_s=3))
    before = main_pid()
    proc = subprocess.Popen(playbook_cmd("benchmark_cycle.yml", extra_vars=extra), cwd=ROOT, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "ansible.module_utils.bc_marlin" not in sh("pgrep -af [b]c_marlin || true"):
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)  # the controller vanishes with the server released and paused
    killed_at = time.monotonic()
    proc.wait(timeout=30)
    assert main_pid() == before and '"text"' not in sh("curl -s -m 2 http://127.0.0.1:30001/v1/completions -d '{}' || true")
    # the switch fires after the stop budget, the GPU wait, the sweep's budget with its async margin, the
    # post-check's and the margin (playbooks/vars/cycle.yml service_drain_switch_after_s); then a restart
    limit = time.monotonic() + 5 + 60 + (15 + 60) + 120 + 3 + 120
    while time.monotonic() < limit and '"text": "4"' not in answer():
        time.sleep(1)
    back_s = time.monotonic() - killed_at
    assert '"text": "4"' in answer() and main_pid() != before, back_s  # restarted by the switch, not resumed
    assert "restarts sglang-double.service" in sh(f"journalctl --no-pager -u bc-deadman-{UNIT}.service -o cat || true")
    again = with_router(dict(settings(), bc_stop_policy="never"))
    sh("echo remove > /tmp/lb-log")  # the dead cycle's removal, as with_router() resets the log
    rerun = playbook("benchmark_cycle.yml", extra_vars=again)
    assert rerun.rc == 0 and "broke the lock of cycle" in rerun.out, rerun.out[-3000:]
    assert router() == ["remove", "restore"]
    reliability(fault="controller killed on the release path", injected="SIGKILL to ansible-playbook mid-sweep with the KV "
                "cache released and generation paused", did="the host's switch killed the sweep and restarted the server "
                "(a resume from a timer could kill it); the re-run took the lock over and put the router back",
                service_after="active, answers 4 (restarted)", data_kept="the re-run's results", detect_s=back_s,
                run_s=rerun.seconds)
