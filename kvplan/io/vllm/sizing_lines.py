"""Lines that change vLLM's KV arithmetic or what a room means (mostly 0.26–0.33), as line families.

Releases (checked against the released wheels; 0.33 file:line, the string is the same before):

- ``Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d`` (V0 ``engine/llm_engine.py``
  0.5–0.10.2, V1 ``v1/core/kv_cache_utils.py`` 0.6.4–0.32, ``kv_cache_planning.py:1525`` 0.33).
- ``Auto-fit max_model_len: reduced from %d to %d to fit in available GPU memory (%s GiB available for
  KV cache)`` (0.14–0.31) and ``… in available KV cache memory (%s)`` (0.32–0.33): the fitted length.
- ``Chunked prefill is enabled with max_num_batched_tokens=%d.`` (``config.py``/``config/scheduler.py``,
  0.5.5–0.33).
- ``Asynchronous scheduling is %s.`` (``config/vllm.py``, 0.14–0.26); from 0.27 it is on by default and only
  turning it off is logged: ``Async scheduling will be disabled because it is not supported with the `%s`
  distributed executor backend.`` / ``Async scheduling is disabled for ROCm DeepEP …`` (0.26–0.33),
  ``Async scheduling is disabled because the V1 model runner does not support it with …`` (0.32–0.33).
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
  ``CuMemAllocator: sleep freed %.2f GiB memory in total, …`` (``device_allocator/cumem.py``, 0.11–0.33) and
  ``CuMemAllocator: discarded %.2f GiB for tags %s.`` (0.32–0.33), the
  executor's ``It took %.6f seconds to fall asleep.`` / ``… to wake up tags %s.`` (0.26–0.33) / ``… to discard
  tags %s.`` (0.32–0.33).
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

from kvplan.io.vllm.handlers import Family, Groups, family
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


def _table_field(m: Groups) -> dict:
    return {PROFILE_TABLE[m.group(1)]: gib_bytes(m.group(2))}


#: Lines that make a room mean something else: note code → what the note says.
ROOM_CAVEATS = {
    "sleep_mode": "this boot ran with sleep mode (CuMemAllocator): vLLM overestimates 'Available KV cache memory' "
    "under CuMem (vllm#40256), so its room may be too high; profile a boot without --enable-sleep-mode",
    "rocm_free_grew": "free memory grew during profiling (ROCm): vLLM sized the KV cache from torch reserved memory, "
    "a lower bound, instead of the profiling difference; re-profile on a quiet GPU",
    "elastic_ep": "Elastic EP scale-up workers took the first workers' KV cache size without profiling their own "
    "memory: their room is not measured",
    "hisparse": "HiSparse keeps KV cache on the host too: 'GPU + host KV cache size' is limited by both pools, not a "
    "GPU-only figure; the host pool is not modelled",
    "weights_outside": "weights are held outside this process (weight-cache daemon): the requested memory is the "
    "engine's budget after the externally held weights",
}


def _caveat(code: str) -> dict:
    """A caveat row's values: the flag ``caveat:CODE`` with its note (:data:`ROOM_CAVEATS`)."""
    return {f"caveat:{code}": ROOM_CAVEATS[code]}


# One row a family, as in FAMILIES: family, trigger, scope, values, regex.
# fmt: off
SIZING_FAMILIES: list[Family] = [
    family("blocks_override", "num_gpu_blocks_override", "config", (None, "num_gpu_blocks_override"), r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)"),
    family("auto_fit", "Auto-fit max_model_len: reduced", "config", (None, "max_model_len"), r"Auto-fit max_model_len: reduced from (\d+) to (\d+) to fit in available"),
    # 0.27–0.31 "… full model context length %d fits in available GPU memory", 0.32+ "… in available KV cache memory (%s)"
    family("auto_fit", "Auto-fit max_model_len: full model", "config", ("max_model_len",), r"Auto-fit max_model_len: full model context length (\d+) fits in available"),
    family("max_num_batched_tokens", "max_num_batched_tokens=", "config", ("max_num_batched_tokens",), r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
    # config/vllm.py info_once, 0.14–0.26
    family("async_scheduling", "scheduling is", "config", ("async_scheduling:enabled",), r"^Asynchronous scheduling is (enabled|disabled)"),
    # config/vllm.py warning_once when the default is turned off, 0.26–0.33 (0.27+ print nothing when it is on)
    family("async_scheduling", "Async scheduling ", "config", {"async_scheduling": False}, r"^Async scheduling (?:will be disabled|is disabled) (?:because|for) "),
    family("mamba_cache_mode", "ache mode is set to", "config", ("mamba_cache_mode",), r"Mamba cache mode is set to '(\w+)'"),
    family("hybrid_off", "ybrid", "config", {"hybrid_kv_cache_manager": False}, r"Hybrid KV cache manager is disabled for this hybrid model|Turning off hybrid kv cache manager|chunked local attention with the hybrid KV cache manager\. Disabling it"),
    family("hybrid_off", "cannot be unified", "config", {"hybrid_kv_cache_manager": False}, r"KV cache page sizes cannot be unified; treating sliding-window layers as full attention"),
    family("group_sizes", "group sizes", "config", ("kv_cache_group_block_sizes",), r"^kv cache group sizes ([\[(][\d, ]*[\])])"),
    family("kv_pools", "KV cache size:", "config", ("kv_cache_pools",), r"^(GPU \+ host|GPU|[A-Z]{2,}) KV cache size: "),
    family("encoder_graph", "Encoder graph capturing", "rank", ("encoder_cuda_graph_bytes",), r"Encoder graph capturing finished in \d+ secs?, took {num} GiB"),
    family("weights_outside", "held outside this process", "rank", (None, "external_weights_bytes", "requested_bytes"), r"Weights are held outside this process: of the {num} GiB utilization budget, {num} GiB is externally held and {num} GiB remains"),
    family("api_num_gpu_blocks", "num_gpu_blocks is:", "engine", ("num_gpu_blocks",), r"vllm cache_config_info with initialization after num_gpu_blocks is: (\d+)"),
    family("version", " version ", "config", ("vllm_version",), r"vLLM server version (v?\d+\.\d+[\w.+\-]*), serving model"),
    family("version", " version ", "config", ("vllm_version",), r"█\s+version (v?\d+\.\d+[\w.+\-]*)\s*$"),
    # the 0.6.5 development line's table (PR #10511): "key<TAB>value" (or runs of spaces), one a line
    family("profile_table", "\t", "rank", _table_field, _TABLE_KEYS + r"\t\s*{num}\s*GiB\s*$"),
    family("profile_table", "  ", "rank", _table_field, _TABLE_KEYS + r" {2,}{num}\s*GiB\s*$"),
    # the lines of ROOM_CAVEATS
    family("sleep_mode", "freed", "flag", _caveat("sleep_mode"), r"^Sleep mode freed|^CuMemAllocator: sleep freed"),
    family("sleep_mode", "CuMemAllocator: discarded", "flag", _caveat("sleep_mode"), r"^CuMemAllocator: discarded [\d.]+ GiB for tags"),
    # v1/executor/abstract.py (0.33: 409/427/449): the executor's sleep, wake-up and discard timings
    family("sleep_mode", "seconds to ", "flag", _caveat("sleep_mode"), r"^It took [\d.]+ seconds to (?:fall asleep|wake up tags|discard tags)"),
    family("rocm_free_grew", "Free memory grew by", "flag", _caveat("rocm_free_grew"), r"^Free memory grew by .* torch reserved"),
    family("elastic_ep", "Elastic EP", "flag", _caveat("elastic_ep"), r"\[Elastic EP\] Synced KV cache memory size"),
    family("hisparse", "HiSparse", "flag", _caveat("hisparse"), r"^HiSparse steady-state maximum concurrency"),
    family("hisparse", "KV cache size:", "flag", _caveat("hisparse"), r"^GPU \+ host KV cache size"),
    family("weights_outside", "held outside this process", "flag", _caveat("weights_outside"), r"^Weights are held outside this process"),
]
# fmt: on
