#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the INT4 Marlin MoE GEMM sweep over token batch sizes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: marlin_sweep
short_description: Sweep SGLang's INT4 Marlin MoE GEMM (or a torch reference) over token batch sizes
description:
  - Builds INT4 symmetric group-quantized expert weights on the GPU in chunks, times the fused MoE
    (two GEMMs, SiLU-and-mul, top-k combine) at each batch size M with CUDA-graph replays that rotate
    the routing, and returns per-point times, bytes, bandwidth, FLOP/s and the weight-streaming floor.
  - The sweep runs in a child process of O(python); finished points are written to O(output) after
    each one, so a crash or a kill loses at most the point in flight and the module names the signal.
  - With O(heartbeat), the child is killed as soon as its controller is gone - the lock gone or another cycle's, or
    the promise of the next poll broken (the dead-man switch's rule) - and the module fails saying so
    (RV(controller_gone)), so a sweep whose controller died never holds the GPU until its timeout.
  - Without a GPU the C(torch) backend runs on the CPU and says so in C(ran_on) and C(note).
  - In check mode it validates the shape and returns the plan and the estimated peak memory.
version_added: "1.0.0"
options:
  num_experts: {description: Routed experts., type: int, default: 384}
  hidden_size: {description: Model hidden size (GEMM K of w13)., type: int, default: 7168}
  intermediate_size: {description: MoE intermediate size before tensor-parallel sharding., type: int, default: 2048}
  top_k: {description: Experts per token., type: int, default: 8}
  group_size: {description: Quantization group size along K (-1 = per channel)., type: int, default: 32}
  num_bits: {description: Weight bits., type: int, default: 4, choices: [4, 8]}
  tp_size:
    description: Tensor-parallel degree; 1 is the full unsharded shape, 8 what each GPU runs in production (intermediate/8).
    type: int
    default: 1
  batch_sizes:
    description: Token counts M to time; default 1, 2, 4, ..., 1024.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
  dtype: {description: Activation and scale dtype., type: str, default: bf16, choices: [bf16, fp16]}
  device: {description: CUDA device index., type: int, default: 0}
  backends:
    description:
      - The kernels to time in one run, on the same INT4 values, back to back at each M and routing; the first is
        the primary (the top-level C(points), the history's C(backend)).
      - C(sglang) is SGLang's fused_marlin_moe with its Marlin repack helpers (needs a CUDA GPU and sglang).
      - C(triton) is SGLang's Triton fused_moe with int4_w4a16, on the layout SGLang's compressed-tensors Triton
        scheme builds from the same words (needs a CUDA GPU and sglang).
      - C(triton_tuned) is the same Triton kernel with a config per M tuned on this GPU first (SGLang's tuning
        procedure, within O(tune_budget_s)); the configs are written as the file SGLang's loader reads (proven by
        reading it back through that loader) and reported with the result.
      - C(torch) is the dequantized grouped GEMM reference (torch._grouped_mm on CUDA, a loop on CPU).
      - C(auto) is sglang when importable, else a failure that says what to install.
      - A backend that cannot run on the host is reported in C(backends) of the result, not fatal, unless none can.
    type: list
    elements: str
    default: [auto]
    choices: [auto, sglang, triton, triton_tuned, torch]
    aliases: [backend]
  routing:
    description:
      - Routing distributions; every backend is timed under each. The result names each one.
      - C(uniform) picks top_k distinct experts uniformly per token.
      - C(zipf) draws them without replacement with popularity 1/rank^O(routing[].skew) over a seeded permutation of the experts.
      - C(hot) sends O(routing[].fraction) of the tokens to O(routing[].experts) hot experts only.
      - C(replay) replays recorded top-k ids from O(routing[].file) on the host, in windows of M rows.
    type: list
    elements: dict
    default: [{kind: uniform}]
    suboptions:
      kind: {description: The distribution., type: str, required: true, choices: [uniform, zipf, hot, replay]}
      skew: {description: Zipf exponent (above 0; 1.0 is classic Zipf)., type: float, default: 1.0}
      fraction: {description: "Share of tokens routed to the hot experts, above 0 and at most 1.", type: float, default: 0.5}
      experts: {description: "Hot experts (top_k..num_experts; default 2 x top_k).", type: int}
      file: {description: "JSON on the host, [[e0, .., e7], ...] or {topk_ids: [...]}, one row per token.", type: path}
  check_bound:
    description: Largest relative error against the fp32 reference a backend may have; above it the sweep fails.
    type: float
    default: 0.03
  warmup: {description: Warm-up calls per point., type: int, default: 5}
  iters: {description: Timed samples (graph replays) per point; the median is reported., type: int, default: 20}
  routings: {description: Different top-k routings captured per graph and rotated per call., type: int, default: 8}
  seed: {description: "Seed of weights, activations and routing.", type: int, default: 0}
  check: {description: "Compare every GPU backend against an fp32 reference on a small expert count.", type: bool, default: true}
  output: {description: JSON file on the host; rewritten after every point., type: path, required: true}
  python: {description: Interpreter that has torch (and sglang); defaults to the one running the module., type: path}
  timeout: {description: "Seconds the sweep process may run before it is killed (the tuning included).", type: int, default: 3600}
  tune_budget_s:
    description:
      - Seconds the C(triton_tuned) backend may spend trying configs before the sweep (one config's timing may run
        past it). Needed (at least 1) with C(triton_tuned), and less than O(timeout).
    type: int
    default: 0
  tune_batch_sizes:
    description:
      - The sizes C(triton_tuned) tunes (each one of O(batch_sizes)); empty is the batch sizes from 256 up (all of
        them when none is). The other sizes keep the config the server runs today.
    type: list
    elements: int
    default: []
  tune_dir:
    description:
      - Where the tuned config file is written, as SGLang's C(SGLANG_MOE_CONFIG_DIR) (its
        C(configs/triton_<version>/) inside); default C(moe-config) beside O(output).
    type: path
  tag:
    description:
      - This run's owner, C(<unit>/<cycle token>), put on the sweep's command line. A running sweep
        tagged with the same unit and another token is an orphan of a cycle whose controller died
        (the lock proves it); it is killed first, so that two sweeps never share the device.
    type: str
  memory_margin: {description: Free memory kept in reserve beyond the estimate (a fraction)., type: float, default: 0.10}
  command_timeout: {description: Seconds nvidia-smi may take., type: int, default: 30}
  import_timeout: {description: "Seconds the O(preflight)'s import of the backends in O(python) may take (torch and sglang:
      a minute on a loaded host or a cold page cache); past it the check is killed and none is read as importable.", type: int, default: 300}
  preflight:
    description:
      - With check mode, also list the GPUs and their free memory (nvidia-smi) and check that O(python) imports the
        backend, so one call answers whether the sweep can run and whether it fits beside a running service.
      - The backends are imported once per installation (C(imports-proven.json) beside O(output), module_utils
        C(bc_imports)); a sweep that does not complete, or where a backend did not run, forgets the proof.
    type: bool
    default: false
  keep_proof: {description: "With O(preflight), keep a whole import's proof; false writes nothing (C(--check)).", type: bool, default: true}
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat]
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode: {support: full, description: "The plan and the estimate; with O(preflight), the sizing (and the imports' proof, a cache)."}
  diff_mode: {support: none, description: Nothing to show as a diff.}
seealso:
  - module: inference_ops.benchmark_cycle.sweep_report
    description: Renders this module's JSON result (fetched to the controller) as a report, a plot and a history line.
  - module: inference_ops.benchmark_cycle.gpu_health
    description: Judges the GPUs before the sweep and right after it (C(phase=post)); a sick GPU's times would lie.
  - module: inference_ops.benchmark_cycle.inference_memory
    description: >-
      Frees the serving GPU's memory in place for the sweep when the preflight says it does not fit (RV(fits) false);
      RV(need_mib) is its C(need_mib).
  - module: inference_ops.benchmark_cycle.inference_unit
    description: >-
      Stops the service when the memory cannot be released, and its C(sweep_tag) ends a sweep of this cycle (O(tag))
      still running before the service starts again.
  - module: inference_ops.benchmark_cycle.host_lock
    description: The lock whose token is in O(tag); holding it proves a sweep of the same unit under another token an orphan.
"""

EXAMPLES = r"""
- name: Full-shape Kimi K2.6 MoE sweep, run detached from the connection
  inference_ops.benchmark_cycle.marlin_sweep:
    tp_size: 1
    backend: sglang
    output: /var/lib/benchmark-cycle/sweep.json
    python: /opt/sglang/bin/python
  async: 1800
  poll: 10

- name: Marlin against Triton and the bf16 reference, uniform and skewed routing, M up to 4096
  inference_ops.benchmark_cycle.marlin_sweep:
    tp_size: 8
    backends: [sglang, triton, torch]
    routing: [{kind: uniform}, {kind: zipf, skew: 1.2}]
    batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    output: /var/lib/benchmark-cycle/sweep-tp8.json
    python: /opt/sglang/bin/python
  async: 3600
  poll: 10
"""

RETURN = r"""
output:
  description: Path of the JSON result on the host (O(output)), rewritten after every point.
  returned: always
  type: str
  sample: /var/lib/benchmark-cycle/sweep-tp8.json
controller_gone:
  description: Why the sweep ended itself (its controller gone), on that failure only.
  returned: when the controller was gone
  type: str
  sample: its controller promised its next contact by 1796490956 and it is 1796490971 (a controller killed, paused or cut off)
backend:
  description: The primary backend (the first that can run of those asked for), whose series is RV(points).
  returned: success, except in check mode
  type: str
  sample: sglang
impl:
  description: The primary backend's kernel.
  returned: success, except in check mode
  type: str
  sample: sglang fused_marlin_moe
shape:
  description: The checked shape - experts C(E), hidden size C(K), per-GPU intermediate size C(N), C(topk), C(group), C(bits).
  returned: always
  type: dict
  sample: {E: 384, K: 7168, N: 256, topk: 8, group: 32, bits: 4}
tp_size:
  description: The tensor-parallel degree the shape was sharded by (O(tp_size)).
  returned: success, except in check mode
  type: int
  sample: 8
dtype:
  description: Activation and scale dtype (O(dtype)).
  returned: success, except in check mode
  type: str
  sample: bf16
seed:
  description: Seed of weights, activations and routing (O(seed)).
  returned: success, except in check mode
  type: int
  sample: 0
routings:
  description: Top-k routings captured per graph and rotated per call (O(routings)).
  returned: success, except in check mode
  type: int
  sample: 8
batch_sizes:
  description: The token counts M of the plan, sorted and without duplicates.
  returned: in check mode, and when the sweep process fails
  type: list
  elements: int
  sample: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
points:
  description:
    - The primary series (first backend, first routing), one entry per M - m, ms (median), ms_min, ms_max,
      us_per_token, experts_touched, bytes_moved, gbs, tflops, floor_bytes_ms, floor_flops_ms, floor_ms, bound
      (memory or compute), efficiency (floor / measured).
  returned: success, except in check mode
  type: list
  elements: dict
  sample:
    - m: 1
      ms: 0.03582
      ms_min: 0.03549
      ms_max: 0.03608
      us_per_token: 35.818
      experts_touched: 8.0
      bytes_moved: 24928256
      gbs: 696.0
      tflops: 2.459
      floor_bytes_ms: 0.0059
      floor_flops_ms: 0.00011
      floor_ms: 0.0059
      bound: memory
      efficiency: 0.1647
series:
  description:
    - Every backend under every routing, each with backend, routing, impl, points (as RV(points)), knee_m, plateau_m,
      plateau_ms and bound_knee_m.
  returned: success, except in check mode
  type: list
  elements: dict
  sample:
    - backend: triton
      routing: zipf(1)
      impl: sglang fused_moe triton int4_w4a16 (triton_utils)
      knee_m: 1024
      plateau_m: 1024
      plateau_ms: 2.9366
      bound_knee_m: 4096
      points:
        - {m: 1, ms: 0.13447, ms_min: 0.13396, ms_max: 0.13498, us_per_token: 134.472, experts_touched: 8.0,
           bytes_moved: 24928256, gbs: 185.4, tflops: 0.655, floor_bytes_ms: 0.0059, floor_flops_ms: 0.00011,
           floor_ms: 0.0059, bound: memory, efficiency: 0.0439}
backends:
  description:
    - After a sweep, each backend asked for - name, status (measured or unavailable), why, impl, prepare_s and its
      check against the fp32 reference; C(triton_tuned) also its C(tuning) (budget, configs tried, the speedup over
      the server's config per tuned M, the config file written and read back, the configs per M).
    - In check mode, and when the sweep process fails, the names of the backends that would be timed (C(auto) resolved).
  returned: always
  type: list
  sample:
    - name: sglang
      status: measured
      why: ""
      impl: sglang fused_marlin_moe
      prepare_s: 0.15
      check: {bound: 0.03, experts: 8, m: 16, ok: true, relative_error: 0.007806277833878994}
    - name: triton
      status: measured
      why: ""
      impl: sglang fused_moe triton int4_w4a16 (triton_utils)
      prepare_s: 0.01
      check: {bound: 0.03, experts: 8, m: 16, ok: true, relative_error: 0.004644910804927349}
    - name: triton_tuned
      status: measured
      why: ""
      impl: sglang fused_moe triton int4_w4a16, tuned here (triton_utils)
      prepare_s: 0.01
      tune_s: 121.4
      tuning:
        budget_s: 120
        spent_s: 121.4
        configs_tried: 38
        configs_failed: 3
        space: 864
        sizes: [256, 1024, 4096]
        speedup: {"256": 3.1, "1024": 4.2, "4096": 5.0}
        file: "E=384,N=128,device_name=NVIDIA_H200,dtype=int4_w4a16.json"
        path: /var/lib/benchmark-cycle/results/moe-config/configs/triton_3_6_0/E=384,N=128,device_name=NVIDIA_H200,dtype=int4_w4a16.json
        config_dir: /var/lib/benchmark-cycle/results/moe-config
        loader_read_back: true
        configs: {"1": {BLOCK_SIZE_M: 16, BLOCK_SIZE_N: 32, BLOCK_SIZE_K: 64, GROUP_SIZE_M: 1}}
      check: {bound: 0.03, experts: 8, m: 4096, ok: true, relative_error: 0.0049}
winners:
  description: Per routing and M, the fastest backend and every backend's ms and ratio to the floor (to_floor).
  returned: success, except in check mode
  type: list
  elements: dict
  sample:
    - routing: uniform
      m: 256
      fastest: sglang
      fastest_ms: 0.5096
      backends:
        sglang: {ms: 0.5096, to_floor: 1.759}
        torch: {ms: 1.78357, to_floor: 6.157}
        triton: {ms: 2.56853, to_floor: 8.866}
routing:
  description: The names of the routing distributions timed.
  returned: always
  type: list
  elements: str
  sample: [uniform, zipf(1)]
dense_tflops:
  description: Dense bf16 matmul throughput measured in the same run (the compute floor); 0.0 on the CPU.
  returned: success, except in check mode
  type: float
  sample: 786.4
copy_bandwidth_gbs:
  description: Device copy bandwidth measured in the same run (read + write); 0.0 on the CPU.
  returned: success, except in check mode
  type: float
  sample: 4226.0
bound_knee_m:
  description: Smallest M of the primary series whose floor is compute bound (null if none).
  returned: success, except in check mode
  type: int
  sample: 4096
knee_m:
  description: Smallest M of the primary series whose time is within 10% of the plateau.
  returned: success, except in check mode
  type: int
  sample: 256
plateau_m:
  description: The first M of the primary series at which every expert's weights are streamed.
  returned: success, except in check mode
  type: int
  sample: 256
plateau_ms:
  description: Time of the primary series once every expert's weights are streamed.
  returned: success, except in check mode
  type: float
  sample: 0.5096
prepare_s:
  description: Seconds spent building the weights and every backend's kernel layout.
  returned: success, except in check mode
  type: float
  sample: 0.5
wall_s:
  description: Seconds the sweep process ran, from its start to the last check.
  returned: success, except in check mode
  type: float
  sample: 43.46
peak_memory_gib:
  description: Peak allocated GPU memory of the sweep.
  returned: success on a GPU
  type: float
  sample: 8.936
estimate_peak_gib:
  description: The estimated peak GPU memory of the sweep (what the preflight sizes the device by).
  returned: always
  type: float
  sample: 8.691
estimate_error:
  description: How far the measured peak is from the estimate (peak / estimate - 1).
  returned: success on a GPU
  type: float
  sample: 0.0282
ran_on:
  description: C(gpu) or C(cpu).
  returned: success, except in check mode
  type: str
  sample: gpu
note:
  description: Says that the sweep ran on the CPU and its times are not GPU kernel times.
  returned: when it ran on the CPU
  type: str
  sample: "ran on the CPU: no CUDA device is visible; times are not GPU kernel times"
environment:
  description: GPU, SM count, GPU memory, CUDA, driver, torch, sglang and python versions, and the host name (on the CPU, C(cpu) instead).
  returned: success, except in check mode
  type: dict
  sample:
    gpu: NVIDIA H200
    sm_count: 132
    gpu_memory_gib: 139.8
    cuda: "13.0"
    driver: 580.159.04
    torch: 2.11.0+cu130
    sglang: 0.5.16
    python: 3.12.3
    device_type: cuda
    host: vm
check:
  description: Relative error of the primary backend against the fp32 reference, with the bound, ok, and the small shape checked.
  returned: success on a GPU with O(check)
  type: dict
  sample: {bound: 0.03, experts: 8, m: 16, ok: true, relative_error: 0.007806277833878994}
orphans_killed:
  description: Orphaned sweeps of the same unit (another cycle's O(tag)) killed before this one.
  returned: success, except in check mode
  type: list
  elements: dict
  sample: [{pid: 61234, tag: sglang-k26-ddtree/20261201T061500Z-118204377}]
plan:
  description: In check mode, every other key of the result in one dict (the plan, and with O(preflight) the sizing).
  returned: in check mode
  type: dict
  sample:
    shape: {E: 384, K: 7168, N: 256, topk: 8, group: 32, bits: 4}
    batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    backends: [sglang, triton, torch]
    routing: [uniform, zipf(1)]
    estimate_peak_gib: 8.691
    output: /var/lib/benchmark-cycle/sweep-tp8.json
gpus:
  description: The host's GPUs with index, name, free_mib and total_mib (empty without nvidia-smi).
  returned: in check mode with O(preflight)
  type: list
  elements: dict
  sample: [{index: 0, name: NVIDIA H200, free_mib: 6037, total_mib: 143771}]
backend_importable: {description: O(python) imports at least one backend asked for (the sweep can run)., returned: in check mode with O(preflight),
  type: bool, sample: true}
backend_error:
  description: What is wrong when no backend asked for can run, naming the fix ("" otherwise).
  returned: in check mode with O(preflight)
  type: str
  sample: ""
skipped_backends:
  description: The backends asked for that cannot run on this host, each with why (the others are timed); {} when none can run.
  returned: in check mode with O(preflight)
  type: dict
  sample: {sglang: "ModuleNotFoundError: No module named 'sglang'", triton: "ModuleNotFoundError: No module named 'sglang'"}
usable_backends:
  description: The backends asked for that import and can run on this host.
  returned: in check mode with O(preflight)
  type: list
  elements: str
  sample: [torch]
runnable:
  description: The sweep fits the device's total memory (or the host's, on the CPU); otherwise it can run nowhere.
  returned: in check mode with O(preflight)
  type: bool
  sample: true
fits:
  description: The sweep fits the device's free memory beside what runs now.
  returned: in check mode with O(preflight)
  type: bool
  sample: false
need_mib:
  description: "The estimate with O(memory_margin), in MiB: what must be free."
  returned: in check mode with O(preflight)
  type: int
  sample: 9790
free_mib:
  description: Free MiB on the device (the host's memory on the CPU).
  returned: in check mode with O(preflight)
  type: int
  sample: 6037
free_gib:
  description: RV(free_mib) in GiB.
  returned: in check mode with O(preflight)
  type: float
  sample: 5.9
total_gib:
  description: The device's total memory in GiB (the host's memory on the CPU).
  returned: in check mode with O(preflight)
  type: float
  sample: 140.4
why:
  description: Why the sweep is not runnable ("" when it is).
  returned: in check mode with O(preflight)
  type: str
  sample: ""
backends_proven: {description: "Not imported: an earlier check's proof stood.", returned: in check mode with O(preflight), type: bool, sample: true}
oom_kills:
  description: The kernel's OOM kill count (/proc/vmstat oom_kill) at the preflight; null when unknown.
  returned: in check mode with O(preflight)
  type: int
  sample: 0
oom_killed:
  description: The kernel's OOM killer killed the sweep (/proc/vmstat oom_kill moved).
  returned: when the sweep process was killed by a signal (the task fails)
  type: bool
  sample: true
signal:
  description: The signal that killed the sweep process.
  returned: when the sweep process was killed by a signal (the task fails)
  type: str
  sample: SIGKILL
rc:
  description: Exit status of the sweep process.
  returned: when the sweep process exited with an error (the task fails)
  type: int
  sample: 3
stderr_tail:
  description: The last 20 lines of the sweep process's standard error.
  returned: when the sweep process was killed or exited with an error (the task fails)
  type: list
  elements: str
  sample:
    - "RuntimeError: CUDA error: an illegal memory access was encountered"
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import HEARTBEAT_OPTION, fenced, lost_lock
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweeprun import (
    SHAPE_KEYS,
    ShapeError,
    plan_of,
    preflight,
    problem,
    sweep,
)

ROUTING_OPTIONS: dict[str, Any] = {
    "kind": {"type": "str", "required": True, "choices": ["uniform", "zipf", "hot", "replay"]},
    "skew": {"type": "float", "default": 1.0}, "fraction": {"type": "float", "default": 0.5},
    "experts": {"type": "int"}, "file": {"type": "path"},
}


SPEC: dict[str, Any] = {
    "num_experts": {"type": "int", "default": 384},
    "hidden_size": {"type": "int", "default": 7168},
    "intermediate_size": {"type": "int", "default": 2048},
    "top_k": {"type": "int", "default": 8},
    "group_size": {"type": "int", "default": 32},
    "num_bits": {"type": "int", "default": 4, "choices": [4, 8]},
    "tp_size": {"type": "int", "default": 1},
    "batch_sizes": {"type": "list", "elements": "int", "default": [2 ** i for i in range(11)]},
    "dtype": {"type": "str", "default": "bf16", "choices": ["bf16", "fp16"]},
    "device": {"type": "int", "default": 0},
    "backends": {"type": "list", "elements": "str", "default": ["auto"], "choices": ["auto", "sglang", "triton", "triton_tuned", "torch"],
                 "aliases": ["backend"]},
    "routing": {"type": "list", "elements": "dict", "default": [{"kind": "uniform"}], "options": ROUTING_OPTIONS},
    "check_bound": {"type": "float", "default": 0.03},
    "warmup": {"type": "int", "default": 5},
    "iters": {"type": "int", "default": 20},
    "routings": {"type": "int", "default": 8},
    "seed": {"type": "int", "default": 0},
    "check": {"type": "bool", "default": True},
    "output": {"type": "path", "required": True},
    "python": {"type": "path"},
    "timeout": {"type": "int", "default": 3600},
    "tune_budget_s": {"type": "int", "default": 0},
    "tune_batch_sizes": {"type": "list", "elements": "int", "default": []},
    "tune_dir": {"type": "path"},
    "preflight": {"type": "bool", "default": False},
    "keep_proof": {"type": "bool", "default": True},
    "tag": {"type": "str"},
    "heartbeat": HEARTBEAT_OPTION,
    "memory_margin": {"type": "float", "default": 0.10},
    "command_timeout": {"type": "int", "default": 30},
    "import_timeout": {"type": "int", "default": 300},
}


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    # a replay file is read by the module here and by the worker in its own folder: one absolute path for both
    p["routing"] = [dict(r, file=os.path.abspath(r["file"])) if r.get("file") else r for r in p["routing"]]
    bad = problem(p)
    if bad:
        module.fail_json(msg=bad)
    try:
        plan = plan_of(p)
    except ShapeError as err:
        module.fail_json(msg="marlin_sweep: %s" % err)
    if module.check_mode:
        plan.update(preflight(module, plan) if p["preflight"] else {})
        module.exit_json(changed=False, plan=plan, **plan)
    # a cycle that no longer holds the lock (a controller paused past its lease, the host taken over) starts nothing
    # on a GPU another cycle owns now. Read only: the heartbeat is the polls' (sweep_wait) to write, and a beat here,
    # run by async after the first poll, would shorten the promise that poll made
    fenced(module, lost_lock(p["heartbeat"]))
    os.makedirs(os.path.dirname(p["output"]) or ".", mode=0o755, exist_ok=True)
    result = sweep(module, dict(p, shape={k: p[k] for k in SHAPE_KEYS}), plan)
    module.exit_json(changed=True, output=p["output"], **result)


if __name__ == "__main__":
    main()
