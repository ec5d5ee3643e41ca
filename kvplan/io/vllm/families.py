"""vLLM log line families: one table row per family (trigger, scope, values, regex), and reading a message.

The formats (every release from 0.5 to 0.33) are in ``vllm-log-formats.md``; the table
:data:`FAMILIES` holds one row per line family (:func:`~kvplan.io.vllm.handlers.family`): a cheap
trigger substring, the scope, what the regex's groups hold (ledger columns, engine-level values,
configuration, rank assignment, outcome) and the regex.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain

from kvplan.io.vllm.failure_lines import FAILURE_FAMILIES, FAILURE_VALUE_FAMILIES
from kvplan.io.vllm.handlers import (
    Fact,
    Family,
    engine_config,
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
from kvplan.io.vllm.sizing_lines import SIZING_FAMILIES

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
    family("suggestion", "--kv-cache-memory=", "rank", suggestion, r"`--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fit into requested memory, or `--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fully utilize gpu memory"),
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
FAMILIES: list[Family] = [
    *_MEMORY_FAMILIES,
    *_ENGINE_FAMILIES,
    *_CONFIG_FAMILIES,
    *SIZING_FAMILIES,
    *FAILURE_VALUE_FAMILIES,
    *FAILURE_FAMILIES,
]


#: Each distinct trigger with the positions (in :data:`FAMILIES` order) of the families it gates.
_BY_TRIGGER: dict[str, list[int]] = {}
for _position, (_family, _trigger, *_rest) in enumerate(FAMILIES):
    _BY_TRIGGER.setdefault(_trigger, []).append(_position)
#: Messages :func:`read_message` remembers (the boots of one deployment print the same ones again).
MESSAGES_KEPT = 4096


def read_message(message: str) -> list[Fact]:
    """The facts in one log message, one per line family that matches, each with its own values dict.

    The families tried are those whose trigger the message holds, in table order. Outcome families
    stop at the first match, so one error line is one error.

    >>> [(f.family, f.values) for f in read_message("Available KV cache memory: 12.5 GiB")]
    [('available_kv', {'available_kv_bytes': 13421772800})]
    >>> read_message("Loading safetensors checkpoint shards: 100% Completed")
    []
    """
    return [Fact(family, scope, dict(values)) for family, scope, values in _message_facts(message)]


@lru_cache(maxsize=MESSAGES_KEPT)
def _message_facts(message: str) -> tuple[tuple[str, str, dict], ...]:
    """What :func:`read_message` reads in ``message`` (remembered: its callers get copies)."""
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
            facts.append((name, scope, handler(match)))
            seen_outcome = seen_outcome or scope == "outcome"
    return tuple(facts)
