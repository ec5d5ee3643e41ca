"""Lines that change vLLM's KV arithmetic or what a room means (mostly 0.26–0.33), as line families.

Releases (checked against the released wheels; 0.33 file:line, the string is the same before):

- ``Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d`` (V0 ``engine/llm_engine.py``
  0.5–0.10.2, V1 ``v1/core/kv_cache_utils.py`` 0.6.4–0.32, ``kv_cache_planning.py:1525`` 0.33).
- ``Auto-fit max_model_len: reduced from %d to %d to fit in available GPU memory (%s GiB available for
  KV cache)`` (0.14–0.31) and ``… in available KV cache memory (%s)`` (0.32–0.33): the fitted length.
- ``Chunked prefill is enabled with max_num_batched_tokens=%d.`` (``config.py``/``config/scheduler.py``,
  0.5.5–0.33).
- ``Asynchronous scheduling is %s.`` (``config/vllm.py``, 0.14–0.26).
- ``Mamba cache mode is set to '%s' for %s by default when prefix caching is enabled``
  (``model_executor/models/config.py``, 0.15–0.33, WARNING to 0.2x, INFO later).
- The hybrid KV cache manager off: ``Hybrid KV cache manager is disabled for this hybrid model`` (0.9.1+),
  ``KV cache page sizes cannot be unified; treating sliding-window layers as full attention`` (0.27+),
  ``Turning off hybrid kv cache manager because`` (0.11.1+), the chunked-local ``There is a latency
  regression … Disabling it, by default`` (0.10.1+).
- ``kv cache group sizes %s`` (``v1/core/kv_cache_utils.py``, 0.30–0.33; a list to 0.31, a tuple after).
- ``Encoder graph capturing finished in %.0f secs, took %.2f GiB (%d graphs)``
  (``v1/worker/mm_encoder_model_runner.py``, 0.31–0.33).
- ``Weights are held outside this process: of the %s GiB utilization budget, %s GiB is externally held
  and %s GiB remains for the engine's own allocations.`` (``v1/worker/utils.py``, 0.32–0.33).
- Sleep mode: ``Sleep mode freed %s GiB memory, %s GiB memory is still in use.`` (0.14–0.33) and
  ``CuMemAllocator: sleep freed %.2f GiB memory in total, …`` (``device_allocator/cumem.py``, 0.11–0.33).
- ROCm ``Free memory grew by %s GiB during profiling … torch reserved …`` (``gpu_worker.py``, 0.29–0.33).
- ``[Elastic EP] Synced KV cache memory size to new workers`` (``distributed/elastic_ep``, 0.17–0.33).
- HiSparse ``%s KV cache size`` with ``GPU + host`` and ``HiSparse steady-state maximum concurrency for
  %s tokens per request`` (0.32–0.33).
- ``vLLM server version %s, serving model %s`` and its logo (``… version %s``; 0.15–0.33).
- ``Engine %03d: vllm cache_config_info with initialization after num_gpu_blocks is: %d`` (DEBUG,
  ``v1/metrics/loggers.py``; without ``Engine NNN:`` at INFO in 0.9–0.10) and ``%d Engines: …`` (INFO,
  DP > 1, 0.11.1–0.33).
"""

from __future__ import annotations

import re

from kvplan.io.vllm.handlers import NUM, Handler, flag
from kvplan.io.vllm.values import gib_bytes

#: The 0.6.5 development table's keys → ledger columns.
PROFILE_TABLE = {
    "total_gpu_memory": "total_bytes",
    "the current vLLM instance can use": "requested_bytes",
    "model weights take": "weights_bytes",
    "non_torch_memory": "non_torch_bytes",
    "PyTorch activation peak memory": "activation_peak_bytes",
    "available_kv_cache_memory": "available_kv_bytes",
}
_TABLE_KEYS = "^(" + "|".join(PROFILE_TABLE) + ")"


def _table_field(m: re.Match) -> dict:
    return {PROFILE_TABLE[m.group(1)]: gib_bytes(m.group(2))}


#: (family, trigger, regex, scope, handler), as in ``FAMILIES``.
SIZING_FAMILIES: list[tuple[str, str, re.Pattern, str, Handler]] = [
    (
        "blocks_override",
        "num_gpu_blocks_override",
        re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)"),
        "config",
        lambda m: {"num_gpu_blocks_override": int(m.group(2))},
    ),
    (
        "auto_fit",
        "Auto-fit max_model_len: reduced",
        re.compile(r"Auto-fit max_model_len: reduced from (\d+) to (\d+) to fit in available"),
        "config",
        lambda m: {"max_model_len": int(m.group(2))},
    ),
    (
        "max_num_batched_tokens",
        "max_num_batched_tokens=",
        re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
        "config",
        lambda m: {"max_num_batched_tokens": int(m.group(1))},
    ),
    (
        "async_scheduling",
        "scheduling is",  # config/vllm.py info_once, 0.14–0.26
        re.compile(r"^Asynchronous scheduling is (enabled|disabled)"),
        "config",
        lambda m: {"async_scheduling": m.group(1) == "enabled"},
    ),
    (
        "mamba_cache_mode",
        "ache mode is set to",
        re.compile(r"Mamba cache mode is set to '(\w+)'"),
        "config",
        lambda m: {"mamba_cache_mode": m.group(1)},
    ),
    (
        "hybrid_off",
        "ybrid",
        re.compile(
            r"Hybrid KV cache manager is disabled for this hybrid model|"
            r"Turning off hybrid kv cache manager|"
            r"chunked local attention with the hybrid KV cache manager\. Disabling it"
        ),
        "config",
        lambda m: {"hybrid_kv_cache_manager": False},
    ),
    (
        "hybrid_off",
        "cannot be unified",
        re.compile(
            r"KV cache page sizes cannot be unified; treating sliding-window layers as full attention"
        ),
        "config",
        lambda m: {"hybrid_kv_cache_manager": False},
    ),
    (
        "group_sizes",
        "group sizes",
        re.compile(r"^kv cache group sizes ([\[(][\d, ]*[\])])"),
        "config",
        lambda m: {"kv_cache_group_block_sizes": m.group(1)},
    ),
    (
        "kv_pools",
        "KV cache size:",
        re.compile(r"^(GPU \+ host|GPU|[A-Z]{2,}) KV cache size: "),
        "config",
        lambda m: {"kv_cache_pools": m.group(1)},
    ),
    (
        "encoder_graph",
        "Encoder graph capturing",
        re.compile(r"Encoder graph capturing finished in \d+ secs?, took " + NUM + r" GiB"),
        "rank",
        lambda m: {"encoder_cuda_graph_bytes": gib_bytes(m.group(1))},
    ),
    (
        "weights_outside",
        "held outside this process",
        re.compile(
            r"Weights are held outside this process: of the "
            + NUM
            + r" GiB utilization budget, "
            + NUM
            + r" GiB is externally held and "
            + NUM
            + r" GiB remains"
        ),
        "rank",
        lambda m: {"external_weights_bytes": gib_bytes(m.group(2)), "requested_bytes": gib_bytes(m.group(3))},
    ),
    (
        "api_num_gpu_blocks",
        "num_gpu_blocks is:",
        re.compile(r"vllm cache_config_info with initialization after num_gpu_blocks is: (\d+)"),
        "engine",
        lambda m: {"num_gpu_blocks": int(m.group(1))},
    ),
    (
        "version",
        " version ",
        re.compile(r"vLLM server version (v?\d+\.\d+[\w.+\-]*), serving model"),
        "config",
        lambda m: {"vllm_version": m.group(1).lstrip("v")},
    ),
    (
        "version",
        " version ",
        re.compile(r"█\s+version (v?\d+\.\d+[\w.+\-]*)\s*$"),
        "config",
        lambda m: {"vllm_version": m.group(1).lstrip("v")},
    ),
    # the 0.6.5 development line's table (PR #10511): "key<TAB>value" (or runs of spaces), one a line
    ("profile_table", "\t", re.compile(_TABLE_KEYS + r"\t\s*" + NUM + r"\s*GiB\s*$"), "rank", _table_field),
    ("profile_table", "  ", re.compile(_TABLE_KEYS + r" {2,}" + NUM + r"\s*GiB\s*$"), "rank", _table_field),
]
SLEEP_MODE_NOTE = (
    "this boot ran with sleep mode (CuMemAllocator): vLLM overestimates 'Available KV cache memory' under "
    "CuMem (vllm#40256), so its room may be too high; profile a boot without --enable-sleep-mode"
)
HISPARSE_NOTE = (
    "HiSparse keeps KV cache on the host too: 'GPU + host KV cache size' is limited by both pools, not a "
    "GPU-only figure; the host pool is not modelled"
)
#: Lines that make a room mean something else, (note code, trigger, regex, what the note says).
ROOM_CAVEATS = [
    ("sleep_mode", "freed", r"^Sleep mode freed|^CuMemAllocator: sleep freed", SLEEP_MODE_NOTE),
    # v1/executor/abstract.py (0.33: 409/427/449): the executor's sleep, wake-up and discard timings
    (
        "sleep_mode",
        "seconds to ",
        r"^It took [\d.]+ seconds to (?:fall asleep|wake up tags|discard tags)",
        SLEEP_MODE_NOTE,
    ),
    (
        "rocm_free_grew",
        "Free memory grew by",
        r"^Free memory grew by .* torch reserved",
        "free memory grew during profiling (ROCm): vLLM sized the KV cache from torch reserved memory, a lower "
        "bound, instead of the profiling difference; re-profile on a quiet GPU",
    ),
    (
        "elastic_ep",
        "Elastic EP",
        r"\[Elastic EP\] Synced KV cache memory size",
        "Elastic EP scale-up workers took the first workers' KV cache size without profiling their own memory: "
        "their room is not measured",
    ),
    ("hisparse", "HiSparse", r"^HiSparse steady-state maximum concurrency", HISPARSE_NOTE),
    ("hisparse", "KV cache size:", r"^GPU \+ host KV cache size", HISPARSE_NOTE),
    (
        "weights_outside",
        "held outside this process",
        r"^Weights are held outside this process",
        "weights are held outside this process (weight-cache daemon): the requested memory is the engine's "
        "budget after the externally held weights",
    ),
]
SIZING_FAMILIES += [
    (code, trigger, re.compile(pattern), "flag", flag(f"caveat:{code}", note))
    for code, trigger, pattern, note in ROOM_CAVEATS
]
