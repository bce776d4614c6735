"""Filter plugins: pure functions, driven with literal inputs."""

import pytest
from ansible.module_utils.bc_engines import flag_for_version
from ansible.module_utils.bc_health import reload_line
from bc_filters import (
    FilterModule,
    cli_args,
    closest,
    int_list,
    oom_kills_since,
    systemd_quote,
)

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


def test_batch_lost_counts_a_host_that_became_unreachable_as_a_lost_one():
    from bc_filters import batch_lost

    # lab5 became unreachable after its stop (it left ansible_play_batch; Ansible's max_fail_percentage does not count it)
    assert batch_lost(["lab4", "lab5", "lab6"], ["lab4", "lab6"], 50) == {"lost": ["lab5"], "share": 33.3, "stop": False}
    assert batch_lost(["lab4", "lab5", "lab6"], ["lab6"], 50) == {"lost": ["lab4", "lab5"], "share": 66.7, "stop": True}
    # the default share, 0: one host lost stops the roll; a batch that lost none goes on
    assert batch_lost(["lab1"], [], 0)["stop"] is True
    assert batch_lost(["lab1", "lab2"], ["lab2", "lab1"], 0) == {"lost": [], "share": 0.0, "stop": False}
    # exactly the share is within it (Ansible's rule: above it stops); the share as Ansible templates it, a string
    assert batch_lost(["a", "b", "c", "d"], ["a", "b", "c"], "25")["stop"] is False
    assert batch_lost(["a", "b", "c", "d"], ["a", "b"], "25")["stop"] is True
    # nothing started, nothing lost
    assert batch_lost([], [], 0) == {"lost": [], "share": 0.0, "stop": False}
