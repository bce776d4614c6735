"""Filter plugins: pure functions, driven with literal inputs."""

import pytest
from ansible.errors import AnsibleFilterError
from bc_filters import (
    FilterModule,
    cli_args,
    closest,
    host_clock,
    int_list,
    oom_kills_since,
    systemd_quote,
)

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import flag_for_version
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import reload_line

F = FilterModule().filters()


def test_cli_args_flags_booleans_lists_and_unknown_keys():
    flags = {"model_path": "--model-path", "enable_metrics": "--enable-metrics", "cuda_graph_bs": "--cuda-graph-bs",
             "port": "--port", "off": "--off"}
    args = cli_args({"model_path": "/m", "enable_metrics": True, "off": False, "cuda_graph_bs": [1, 2], "port": 30001}, flags)
    assert args == ["--model-path", "/m", "--enable-metrics", "--cuda-graph-bs", "1", "2", "--port", "30001"]
    with pytest.raises(ValueError, match="'mem_fration_static' has no flag"):
        cli_args({"mem_fration_static": 0.8}, flags)


def test_a_setting_given_as_an_environment_variable_goes_to_the_environment_file_not_the_command_line():
    """SGLang reads where its tuned Triton MoE configs are from SGLANG_MOE_CONFIG_DIR (engine data): the unit's
    environment file gets it, the command line does not."""
    flags = F["bc_engine_flags"]("sglang")
    settings = {"model_path": "/m", "moe_config_dir": "/var/lib/benchmark-cycle/results/moe-config", "enable_metrics": True}
    args = cli_args(settings, flags)
    assert "/var/lib/benchmark-cycle/results/moe-config" not in args and args == ["--model-path", "/m", "--enable-metrics"]
    assert F["bc_settings_env"](settings, flags) == {"SGLANG_MOE_CONFIG_DIR": "/var/lib/benchmark-cycle/results/moe-config"}
    assert F["bc_settings_env"](dict(settings, moe_config_dir=""), flags) == {}
    assert 'SGLANG_MOE_CONFIG_DIR="/var/lib/benchmark-cycle/results/moe-config"' in F["bc_env_lines"](
        F["bc_settings_env"](settings, flags))


def test_versioned_flag_follows_the_engine_version():
    history = [["0", "--cuda-graph-max-bs"], ["0.5.15", "--cuda-graph-max-bs-decode"], ["0.9", None]]
    assert flag_for_version(history, "0.5.10") == "--cuda-graph-max-bs"
    assert flag_for_version(history, "0.5.15") == "--cuda-graph-max-bs-decode"
    assert flag_for_version(history, "v0.5.23rc1") == "--cuda-graph-max-bs-decode"
    with pytest.raises(ValueError, match=r"not supported by version 0\.9\.1"):
        cli_args({"x": 8}, {"x": history}, "0.9.1")
    with pytest.raises(ValueError, match="no number"):
        flag_for_version(history, "latest")


def test_systemd_quote_escapes_specials_and_keeps_env_references():
    line = systemd_quote(["/usr/bin/x", "a b", "100%", "$HOME", "${BC_API_KEY}", 'say "hi"'])
    assert line == '/usr/bin/x "a b" 100%% $$HOME ${BC_API_KEY} "say \\"hi\\""'


def test_closest_name_for_typos():
    assert closest(["bc_readiness_timeout_s", "bc_port"], "bc_readines_timeout_s") == "bc_readiness_timeout_s"
    assert closest(["bc_port"], "something_else") == "-"


def test_reload_line_renders_elapsed_phase_stage_and_retries():
    line = reload_line({"since_start_s": 275.4, "phase": "warming", "stage": "Capture decode CUDA graph"}, "ct200", 92)
    assert line == 'ct200 reload 04:35  warming  "Capture decode CUDA graph"  (92 retries left)'
    assert reload_line({"phase": "down", "reason": "connection refused"}, "h").startswith("h reload --:--  down")


def test_int_list_accepts_survey_strings_and_names_bad_values():
    assert int_list("1, 2,4") == [1, 2, 4]
    assert int_list([1, "8"]) == [1, 8]
    assert int_list(8) == [8]
    with pytest.raises(ValueError, match="bc_sweep_tp_sizes: 'x' is not a whole number"):
        int_list("1,x", "bc_sweep_tp_sizes")
    with pytest.raises(ValueError, match="0 is not positive"):
        int_list("0")
    # empty is refused unless the setting says what empty means (bc_sweep_tune_batch_sizes: from 256 up)
    with pytest.raises(ValueError, match="bc_sweep_tp_sizes is empty"):
        int_list("", "bc_sweep_tp_sizes")
    assert int_list([], "bc_sweep_tune_batch_sizes", True) == [] == int_list("", "x", True)


@pytest.mark.parametrize(("printed", "clock"), [
    ("1796576437.089123456\n", 1796576437.089123456),
    ("1796576437\n", 1796576437.0),
    ("1796576437.25\r\n", 1796576437.25),  # through a tty (raw's ssh -tt)
    ("Welcome to lab1\n\n1796576437.5\n", 1796576437.5),  # a shell that prints a banner first: the clock is the last line
])
def test_the_hosts_clock_is_the_last_line_date_printed(printed, clock):
    assert host_clock(printed) == clock


@pytest.mark.parametrize("printed", ["", "\n", "1796576437.N", "1796576437.%N", "Sun Dec  6 18:00:00 UTC 2026", "0", "-1",
                                     "1796576437.5 banner", "nan", "inf", None])
def test_a_clock_that_is_not_seconds_since_the_epoch_is_never_a_deadline(printed):
    """Fail closed: Jinja's float reads each of these as a number (0 or nan): a deadline passed at once, or never."""
    with pytest.raises(AnsibleFilterError, match="the host's clock could not be read"):
        host_clock(printed)


def test_oom_kills_since_reads_proc_vmstat():
    vmstat = "pgfault 123\noom_kill 7\nnr_free_pages 9\n"
    assert oom_kills_since(vmstat, 5) == 2
    assert oom_kills_since(vmstat, "7") == 0
    assert oom_kills_since(vmstat, None) == 0  # no count before: nothing claimed
    assert oom_kills_since("pgfault 1\n", 3) == 0  # a kernel without the counter


def test_the_unit_is_one_name_with_or_without_service():
    assert F["bc_unit_name"]("sglang-k26-ddtree") == "sglang-k26-ddtree"
    assert F["bc_unit_name"]("sglang-k26-ddtree.service") == "sglang-k26-ddtree"


def test_a_missing_pid_proves_a_holder_dead_only_on_the_same_process_table():
    from bc_filters import same_pid_table

    here = "ctl-1/6f1c2a9b-0e8d-4c7f-a1b2-c3d4e5f60718/pid:[4026531836]"
    assert same_pid_table(here, here)
    # a twin host name: another pod or container (another pid namespace), another boot of the kernel
    assert not same_pid_table("ctl-1/6f1c2a9b-0e8d-4c7f-a1b2-c3d4e5f60718/pid:[4026532999]", here)
    assert not same_pid_table("ctl-1/00000000-0e8d-4c7f-a1b2-c3d4e5f60718/pid:[4026531836]", here)
    # an id that is not whole (no /proc on that controller, an older lock without it) never proves anything
    assert not same_pid_table("ctl-1//", "ctl-1//") and not same_pid_table("", "") and not same_pid_table(None, here)
    assert not same_pid_table("ctl-1", "ctl-1")


def test_recovery_findings_say_what_a_dead_cycle_left_in_one_sentence():
    lock = {"held": True, "holder": {"token": "t1", "user": "alice", "controller": "awx-1",
                                     "record": {"lb_removed": True, "stopped": True}}, "age_s": 100, "promised_in_s": -10}
    found = {"lock": lock, "unit": {"ActiveState": "inactive", "SubState": "dead"}, "switch": {"ActiveState": "active"}}
    assert F["bc_recovery_findings"](found, "ct200", "sglang-k26") == (
        'ct200: the lock is held by cycle t1 (alice@awx-1, 100 s old; its controller broke its promise of a next contact '
        '10 s ago); it records {"lb_removed": true, "stopped": true}; sglang-k26 is inactive (dead); the dead-man switch is ARMED')
    calm = {"lock": {"held": False, "holder": {}, "age_s": None, "promised_in_s": None},
            "unit": {"ActiveState": "active", "SubState": "running"}, "switch": {}}
    assert F["bc_recovery_findings"](calm, "ct200", "sglang-k26") == (
        "ct200: no lock; sglang-k26 is active (running); the dead-man switch is not armed")


def test_roll_lost_counts_each_earlier_batch_by_who_completed_it():
    from bc_filters import roll_lost

    hv = {"lab1": {"cycle_batch": ["lab1", "lab2", "lab3"], "cycle_completed": True},
          "lab2": {"cycle_batch": ["lab1", "lab2", "lab3"]},  # unreachable after its stop: never completed
          "lab3": {"cycle_batch": ["lab1", "lab2", "lab3"], "cycle_completed": True},
          "lab4": {}, "lab5": {}, "lab6": {}}
    hosts = list(hv)
    assert roll_lost(hosts, hv, 50) == {"stop": False, "lost": [], "share": 0.0, "why": ""}
    verdict = roll_lost(hosts, hv, 20)
    assert verdict["stop"] and verdict["lost"] == ["lab2"] and verdict["share"] == 33.3
    assert "the batch of lab1, lab2, lab3 lost lab2 (failed or unreachable" in verdict["why"] and "=20)" in verdict["why"]
    # the default share, 0: one host lost stops the roll; exactly the share is within it (Ansible's rule)
    assert roll_lost(hosts, hv, 0)["stop"] is True
    hv["lab2"]["cycle_completed"] = True
    assert roll_lost(hosts, hv, 0)["stop"] is False
    # a batch whose every host was lost records itself through the hosts that recorded it, even with none left
    hv.update({h: {"cycle_batch": ["lab4", "lab5"]} for h in ("lab4", "lab5")})
    assert roll_lost(hosts, hv, 99)["lost"] == ["lab4", "lab5"]
    # a share that is not a number fails closed (0); no batch recorded yet: nothing to judge
    assert roll_lost(["lab1", "lab6"], {"lab1": {"cycle_batch": ["lab1", "lab9"], "cycle_completed": True}, "lab6": {}},
                     "25%")["stop"] is True
    assert roll_lost(["a"], {"a": {}}, 0)["stop"] is False


def test_roll_lost_stops_a_real_serial_play_at_an_unreachable_host(tmp_path):
    """A real ansible-playbook: batches of 2, the second host of the first batch unreachable at its first module, and
    max_fail_percentage 0. Ansible's own check does not count it, so the play goes on to the second batch; the
    cycle's check, read from the real hostvars, refuses that batch before it touches anything."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}', ansible_connection: local}\n"
                   "  hosts:\n    h1: {}\n    h2: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 1}\n"
                   "    h3: {}\n    h4: {}\n")
    play = tmp_path / "play.yml"
    play.write_text("""- hosts: all
  gather_facts: false
  serial: 2
  max_fail_percentage: 0
  tasks:
    - ansible.builtin.fail: {msg: "{{ __roll.why }}"}
      when: __roll.stop
      vars: {__roll: "{{ ansible_play_hosts_all | inference_ops.benchmark_cycle.bc_roll_lost(hostvars, 0) }}"}
    - ansible.builtin.set_fact: {cycle_batch: "{{ ansible_play_batch }}"}
    - ansible.builtin.command: 'true'
      changed_when: false
    - ansible.builtin.set_fact: {cycle_completed: true}
""")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play)], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"),
                               "ANSIBLE_NOCOLOR": "1"},
                          capture_output=True, text=True, timeout=300, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "h2 : ok=1 changed=0 unreachable=1" in out  # it recorded its batch, then was lost
    assert "the batch of h1, h2 lost h2 (failed or unreachable before its cycle completed: 50.0% of the batch" in out
    for host in ("h3", "h4"):  # refused at the first task: nothing else ran on them
        assert f"{host} : ok=0 changed=0 unreachable=0 failed=1" in out, out[-2000:]


def test_the_settings_are_read_as_plain_values_whatever_container_ansible_hands_over():
    """Ansible hands a filter lazy containers (mappings that are not plain dicts, whose deep copy copies the templar's
    context): the contract filters check plain dicts and lists of the same values, with the same verdict."""
    import collections

    from bc_filters import _native, settings_problems

    class Lazy(collections.abc.Mapping):
        def __init__(self, data):
            self._data = data

        def __getitem__(self, key):
            return self._data[key]

        def __iter__(self):
            return iter(self._data)

        def __len__(self):
            return len(self._data)

    given = {"bc_unit": "llama-lab", "bc_sweep_batch_sizes": (1, 8), "bc_engine_env": Lazy({"A": "1"}), "bc_serial": 0}
    plain = _native(Lazy(dict(given, bc_sweep_batch_sizes=Lazy({"x": (1, 8)}))))
    assert type(plain) is dict and type(plain["bc_engine_env"]) is dict and plain["bc_sweep_batch_sizes"] == {"x": [1, 8]}
    assert _native(given)["bc_sweep_batch_sizes"] == [1, 8] and _native("4") == "4"
    assert settings_problems(Lazy(given)) == settings_problems(given) != []
