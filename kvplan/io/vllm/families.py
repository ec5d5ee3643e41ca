"""vLLM log line families, a table row each (releases and source of the rarer ones: ``docs/vllm-lines.md``),
and reading a message."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from itertools import chain
from types import MappingProxyType

from kvplan.columns import FAILURE_PHASES
from kvplan.io.ledger_frame import ImpossibleValue, check_parallel_size, check_value
from kvplan.io.vllm.handlers import (
    Fact,
    Family,
    engine_config,
    failure,
    family,
    manual,
    namespace,
    non_default,
    plan_applied,
    profile_result,
    suggestion,
    v0_one_line,
    weights,
)
from kvplan.io.vllm.values import PARALLEL_COLUMNS, config_columns, gib_bytes

# One row a family, in the order they are tried: family, trigger, scope, values, regex.
# fmt: off
_MEMORY_FAMILIES = [
    family("weights", "took", "rank", weights, r"(?:Loading model weights|Model loading) took {num} (GiB|GB|MB)\b"),
    family("profile_v0_one_line", "total_gpu_memory=", "rank", v0_one_line, r"Memory profiling results: .*?total_gpu_memory={num} ?GiB.*?kv_cache_size="),
    family("profile_v0_total", "total_gpu_memory (", "rank", ("total_bytes", "gpu_memory_utilization", "requested_bytes"), r"total_gpu_memory \({num}GiB\) x gpu_memory_utilization \({num}\) = {num}GiB"),
    family("profile_v0_parts", "model weights take", "rank", ("weights_bytes", "non_torch_bytes", "activation_peak_bytes", "available_kv_bytes"), r"model weights take {num}GiB; non_torch_memory takes {num}GiB; PyTorch activation peak memory takes {num}GiB; the rest of the memory reserved for KV Cache is {num}GiB"),
    family("profile_result", "Total non KV cache memory", "rank", profile_result, r"Total non KV cache memory: {num} ?GiB; torch peak memory increase: {num} ?GiB; (non-torch forward increase memory|total consumed \(from mem_get_info\)): {num} ?GiB; weights memory: {num} ?GiB"),
    family("available_kv", "Available KV cache memory", "rank", ("available_kv_bytes",), r"Available KV cache memory: {num} GiB"),
    family("init_free_debug_old", "Initial free memory:", "rank", ("init_free_bytes", None, "requested_bytes"), r"Initial free memory: {num} GiB, free memory: {num} GiB, requested GPU memory: {num} GiB"),
    family("init_free_debug", "Initial free memory:", "rank", ("init_free_bytes", "gpu_memory_utilization", "requested_bytes"), r"Initial free memory: {num} GiB; Requested memory: {num} \(util\), {num} GiB"),
    family("free_after_profiling", "Free memory after profiling:", "rank", ("profiled_free_bytes",), r"Free memory after profiling: {num} ?GiB \(total\), {num} ?GiB \(within requested\)"),
    family("memory_snapshot", "memory snapshot", "rank", ("init_free_bytes", "total_bytes"), r"init memory snapshot: .*?free_memory={num} ?GiB, total_memory={num} ?GiB"),
    family("requested_debug", "worker requested memory", "rank", ("requested_bytes",), r"worker requested memory: {num} ?GiB"),
    family("device_free", "Free memory on device", "rank", ("init_free_bytes", "total_bytes", "gpu_memory_utilization", "requested_bytes"), r"Free memory on device(?: \S+)? \({num}/{num} GiB\) on startup(?:\.| is less than) (?:[Dd]esired GPU memory utilization (?:is )?|the engine's budget after excluding external process's weights )\({num}, {num} GiB\)"),
    family("external_weights_over", "Externally held weights", "rank", ("external_weights_bytes", "total_bytes", "gpu_memory_utilization", "requested_bytes"), r"Externally held weights on device \S+ \({num}/{num} GiB\) exceed the desired GPU memory utilization \({num}, {num} GiB\)"),
    family("usage", "for CUDAGraph memory", "rank", ("weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes"), r"Actual usage is {num} GiB for weight, {num} GiB for peak activation, {num} GiB for non-torch memory, and {num} GiB for CUDAGraph memory"),
    family("usage_consumed", "for CUDAGraph memory", "rank", (None, "activation_peak_bytes", "cuda_graph_bytes"), r"Actual usage is {num} GiB for consumed memory \(weights \+ non-torch\), {num} GiB for peak activation, and {num} GiB for CUDAGraph memory"),
    # any line holding a vLLM-quoted suggestion; its handler reads the whole line once, checks it, or refuses it
    family("suggestion", "--kv-cache-memory=", "rank", suggestion, r"`--kv-cache-memory=|--kv-cache-memory=-?\d+`"),
    family("kv_in_use", "kv cache memory in use", "rank", ("kv_in_use_bytes:int", "kv_in_use_bytes"), r"Current kv cache memory in use is (?:(\d+) bytes|{num} GiB)"),
    family("manual", "as specified by kv_cache_memory_bytes", "rank", manual, r"Initial free memory {num} GiB, reserved {num} ?GiB memory for KV Cache"),
    family("startup_plan", "persisted startup plan", "rank", plan_applied, r"kv_cache_memory_bytes=(\d+) \({num} GiB\), recorded free-memory baseline {num} GiB, current {num} GiB"),
    family("startup_plan_not_applied", "Startup plan not applied", "rank", ("init_free_bytes",), r"current free memory \({num} GiB\) is below the recorded baseline"),
    family("graph_took", "Graph capturing finished", "rank", ("cuda_graph_bytes",), r"Graph capturing finished in \d+ secs?, took {num} GiB"),
    family("graph_finished", "Graph capturing finished", "rank", {}, r"Graph capturing finished in \d+ secs?\.\s*$"),
    family("graph_estimate", "Estimated CUDA graph memory", "rank", ("cuda_graph_estimate_bytes",), r"Estimated CUDA graph memory: {num} GiB total"),
    family("graph_pool", "CUDA graph pool memory", "rank", ("cuda_graph_bytes", "cuda_graph_estimate_bytes"), r"CUDA graph pool memory: {num} GiB \(actual\), {num} GiB \(estimated\)"),
    family("graph_estimate_on", "CUDA graph memory profiling is enabled", "flag", {"estimate_applied": True}, r"profiling is enabled"),
    family("graph_estimate_off", "CUDA graph memory profiling", "flag", {"estimate_applied": False}, r"CUDA graph memory profiling is disabled|In v0\.19, CUDA graph memory profiling will be enabled"),
]
_ENGINE_FAMILIES = [
    family("kv_tokens", "KV cache size:", "engine", ("kv_cache_tokens", "max_model_len", "max_concurrency"), r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: {num}x)?"),
    family("concurrency", "Maximum concurrency for", "engine", ("max_model_len", "max_concurrency"), r"^Maximum concurrency for ([\d,]+) tokens per request: {num}x"),
    # "# GPU blocks: N"; a bare line pasted into Markdown loses its leading "#" ("GPU blocks: N, # CPU …")
    family("blocks", " blocks: ", "engine", ("num_gpu_blocks",), r"(?:# |^)(?:GPU|CUDA|cuda) blocks: (\d+)"),
]
_CONFIG_FAMILIES = [
    family("version", " version ", "config", ("vllm_version",), r"vLLM API server version (v?\d+\.\d+[\w.+\-]*)"),
    # "a V0 LLM engine" is the real V0 form of 0.7.3–0.10.x (vllm-log-formats.md §10 lists only
    # "an LLM engine" and "a V1 LLM engine")
    family("engine_config", "with config", "config", engine_config, r"Initializing (?:an|a V0|a V1) LLM engine (?:\((v?[^)\s]+)\) )?with config: (.*)$"),
    family("non_default_args", "non-default args", "config", non_default, r"non-default args: (\{.*\})\s*$"),
    family("namespace_args", "args: Namespace(", "config", namespace, r"args: Namespace\((.*)\)\s*$"),
    family("block_size", "block size", "config", ("block_size",), r"(?:(?:Forcing|Setting) kv cache|Setting attention) block size to (\d+)"),
    # parallel_state.py; "PCP rank %s" from 0.12. Its "EP rank" is not read: releases that build the EP group
    # without --enable-expert-parallel print one, where the worker's name (no _EP part) says EP is off
    family("rank_assign", "in world size", "assign", ("rank", "world_size", "dp_rank", "pp_rank", "pcp_rank", "tp_rank"), r"rank (\d+) in world size (\d+) is assigned as DP rank (\d+), PP rank (\d+),(?: PCP rank (\d+),)? TP rank (\d+)"),
    family("world_debug", "world_size=", "assign", ("world_size", "rank"), r"world_size=(\d+) rank=(\d+) local_rank=\d+"),
    family("startup_done", "took", "flag", {"startup_done": True}, r"init engine \(profile, create kv cache, warmup model\) took"),
    family("startup_done", "startup complete", "flag", {"startup_done": True}, r"Application startup complete"),
]
# fmt: on
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

#: Traceback frames of the vLLM functions in :data:`FAILURE_PHASES` (``  File "…", line N, in NAME``).
FRAME_RE = r'^File "[^"]*", line \d+, in (' + "|".join(map(re.escape, FAILURE_PHASES)) + r")\s*$"

# One row a family, as in FAMILIES: family, trigger, scope, values, regex.
# fmt: off
#: Value families of failure lines.
FAILURE_VALUE_FAMILIES: list[Family] = [
    family("worker_method", "Exception in worker", "frame", ("failed_in",), r"Exception in worker \S+ while processing method (\w+)"),
    family("v0_max_tokens", "maximum number of tokens that can be", "engine", ("kv_cache_tokens",), r"stored in KV cache \((\d+)\)"),
    family("available_in_error", "larger than the available KV cache memory", "rank", ("available_kv_bytes",), r"larger than the available KV cache memory \({num} GiB\)"),
    # v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.9–0.32; kv_cache_planning.py 0.33) and V0
    # worker.py raise_if_cache_size_invalid (0.5–0.10): the length vLLM checked the KV cache against
    family("max_len_in_error", "max seq len (", "config", ("max_model_len",), r"max seq len \((\d+)\)(?:, \(| is larger than the maximum number of tokens)"),
    family("nixl_num_blocks", "num_blocks: ", "rank", ("num_gpu_blocks",), r"^num_blocks: (\d+), block_shape: "),
    family("frame", 'File "', "frame", ("failed_in",), FRAME_RE),
]
#: Failure families: the message is the error text. Groups of (outcome, priority, rows); a lower priority
#: names the failure first (:func:`~kvplan.io.vllm.handlers.failure`). Outcome families stop at the first
#: that matches, in this order.
FAILURE_FAMILIES: list[Family] = [
    family(name, trigger, "outcome", failure(outcome, priority), pattern)
    for outcome, priority, rows in [
        ("error", 3, [  # generic: the exception text follows in the traceback
            ("error_engine_start", "failed to start", r"(?:EngineCore|WorkerProc) failed to start"),
            ("error_engine_hit", "hit an exception", r"EngineCore hit an exception"),
            ("error_worker_method", "Exception in worker", r"Exception in worker \S+ while processing method \w+"),
        ]),
        ("error", 1, [
            ("error_v0_max_seq_len", "maximum number of tokens that can be", r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"),
            ("error_nixl", "NIXL", r"NIXL_ERR_\w+"),
            ("error_ucx", "UCX", r"\bUCX\s+ERROR\b"),
        ]),
        ("oom", 0, [("oom", "emory", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")]),
        ("error", 1, [
            ("error_kv_too_small", "KV cache is needed", r"KV cache is needed, which is larger than the available KV cache memory"),
            ("error_no_blocks", "No available memory for the cache blocks", r"No available memory"),
            ("error_free_below", "less than desired GPU memory", r"is less than desired GPU memory"),
            ("error_fatal", "fatal error", r"EngineCore encountered a fatal error"),
            ("error_profiling", "Error in memory profiling", r"Error in memory profiling"),
        ]),
        ("error", 2, [("error_exception", "Error", r"^(?:[\w.]+\.)?[A-Za-z]*(?:Error|Exception): \S")]),
    ]
    for name, trigger, pattern in rows
]
# fmt: on

FAMILIES = (
    _MEMORY_FAMILIES
    + _ENGINE_FAMILIES
    + _CONFIG_FAMILIES
    + SIZING_FAMILIES
    + FAILURE_VALUE_FAMILIES
    + FAILURE_FAMILIES
)


#: Each distinct trigger with the positions (in :data:`FAMILIES` order) of the families it gates.
_BY_TRIGGER: dict[str, list[int]] = {}
for _position, (_family, _trigger, *_rest) in enumerate(FAMILIES):
    _BY_TRIGGER.setdefault(_trigger, []).append(_position)


@lru_cache(maxsize=512)  # > a boot's distinct messages (every sample boot: 300); 4096 held 6 MiB in a fleet
def read_message(message: str) -> tuple[Fact, ...]:
    """The facts (read-only: shared) of one message, one per family whose trigger it holds and whose regex
    matches, in table order; outcome families stop at the first match (one error line is one error).

    >>> [(f.family, dict(f.values)) for f in read_message("Available KV cache memory: 12.5 GiB")]
    [('available_kv', {'available_kv_bytes': 13421772800})]
    >>> read_message("Loading safetensors checkpoint shards: 100% Completed")
    ()
    """
    positions = sorted(
        chain.from_iterable(map(_BY_TRIGGER.__getitem__, filter(message.__contains__, _BY_TRIGGER)))
    )
    facts = []
    seen_outcome = False
    for position in positions:
        name, _trigger, pattern, scope, handler = FAMILIES[position]
        if seen_outcome and scope == "outcome":
            continue
        match = pattern.search(message)
        if match is not None:
            values = handler(match)
            columns = config_columns(values) if scope == "config" else ()
            facts.append(Fact(name, scope, MappingProxyType(values), columns))
            seen_outcome = seen_outcome or scope == "outcome"
    return tuple(facts)


@lru_cache(maxsize=512)  # as read_message's
def impossible_in(message: str) -> tuple[Callable, str, object] | None:
    """The first value of the message's facts no vLLM line can show, as ``(check, column, value)`` (``check``
    refuses it naming file and line; a config fact's parallel sizes first); None when all can be."""
    facts = read_message(message)
    checks: list[tuple[Callable, tuple]] = [
        (check_value, item) for fact in facts if fact.scope != "config" for item in fact.values.items()
    ]
    for fact in facts:
        checks += [(check_parallel_size, item) for item in fact.columns if item[0] in PARALLEL_COLUMNS]
        checks += [(check_value, item) for item in fact.columns]
    for check, (column, value) in checks:
        try:
            check(column, value, "", 0)
        except ImpossibleValue:
            return check, column, value
    return None
