"""vLLM log line families: one entry per family (trigger, regex, scope, handler), and reading a message.

The formats (every release from 0.5 to 0.33) are in ``vllm-log-formats.md``; the table
:data:`FAMILIES` holds one entry per line family: a cheap trigger substring, a regex, and what the
match means (ledger columns, engine-level values, configuration, rank assignment, outcome).
"""

from __future__ import annotations

import re

from kvplan.io.vllm import handlers as h
from kvplan.io.vllm.failure_lines import FAILURE_FAMILIES, FAILURE_VALUE_FAMILIES, failure_handler
from kvplan.io.vllm.handlers import NUM, Fact, Handler
from kvplan.io.vllm.sizing_lines import SIZING_FAMILIES
from kvplan.io.vllm.values import gib_bytes

#: (family, trigger substring, regex, scope, handler). The trigger is checked first (cheap).
FAMILIES: list[tuple[str, str, re.Pattern, str, Handler]] = [
    (
        "weights",
        "took",
        re.compile(r"(?:Loading model weights|Model loading) took " + NUM + r" (GiB|GB|MB)\b"),
        "rank",
        h.weights,
    ),
    (
        "profile_v0_one_line",
        "total_gpu_memory=",
        re.compile(r"Memory profiling results: .*?total_gpu_memory=" + NUM + r" ?GiB.*?kv_cache_size="),
        "rank",
        h.v0_one_line,
    ),
    (
        "profile_v0_total",
        "total_gpu_memory (",
        re.compile(
            r"total_gpu_memory \(" + NUM + r"GiB\) x gpu_memory_utilization \(" + NUM + r"\) = " + NUM + "GiB"
        ),
        "rank",
        h.v0_total,
    ),
    (
        "profile_v0_parts",
        "model weights take",
        re.compile(
            r"model weights take "
            + NUM
            + r"GiB; non_torch_memory takes "
            + NUM
            + r"GiB; PyTorch activation peak memory takes "
            + NUM
            + r"GiB; the rest of the memory reserved for KV Cache is "
            + NUM
            + "GiB"
        ),
        "rank",
        h.v0_parts,
    ),
    (
        "profile_result",
        "Total non KV cache memory",
        re.compile(
            r"Total non KV cache memory: "
            + NUM
            + r" ?GiB; torch peak memory increase: "
            + NUM
            + r" ?GiB; (non-torch forward increase memory|total consumed \(from mem_get_info\)): "
            + NUM
            + r" ?GiB; weights memory: "
            + NUM
            + r" ?GiB"
        ),
        "rank",
        h.profile_result,
    ),
    (
        "available_kv",
        "Available KV cache memory",
        re.compile(r"Available KV cache memory: " + NUM + r" GiB"),
        "rank",
        lambda m: {"available_kv_bytes": gib_bytes(m.group(1))},
    ),
    (
        "init_free_debug_old",
        "Initial free memory:",
        re.compile(
            r"Initial free memory: "
            + NUM
            + r" GiB, free memory: "
            + NUM
            + r" GiB, requested GPU memory: "
            + NUM
            + r" GiB"
        ),
        "rank",
        h.init_free_old,
    ),
    (
        "init_free_debug",
        "Initial free memory:",
        re.compile(
            r"Initial free memory: "
            + NUM
            + r" GiB; Requested memory: "
            + NUM
            + r" \(util\), "
            + NUM
            + r" GiB"
        ),
        "rank",
        h.init_free,
    ),
    (
        "free_after_profiling",
        "Free memory after profiling:",
        re.compile(
            r"Free memory after profiling: "
            + NUM
            + r" ?GiB \(total\), "
            + NUM
            + r" ?GiB \(within requested\)"
        ),
        "rank",
        lambda m: {"profiled_free_bytes": gib_bytes(m.group(1))},
    ),
    (
        "memory_snapshot",
        "memory snapshot",
        re.compile(r"init memory snapshot: .*?free_memory=" + NUM + r" ?GiB, total_memory=" + NUM + r" ?GiB"),
        "rank",
        h.snapshot,
    ),
    (
        "requested_debug",
        "worker requested memory",
        re.compile(r"worker requested memory: " + NUM + r" ?GiB"),
        "rank",
        lambda m: {"requested_bytes": gib_bytes(m.group(1))},
    ),
    (
        "device_free",
        "Free memory on device",
        re.compile(
            r"Free memory on device(?: \S+)? \(" + NUM + "/" + NUM + r" GiB\) on startup(?:\.| is less than) "
            r"(?:[Dd]esired GPU memory utilization (?:is )?|the engine's budget after excluding external "
            r"process's weights )\(" + NUM + ", " + NUM + r" GiB\)"
        ),
        "rank",
        h.device_free,
    ),
    (
        "external_weights_over",
        "Externally held weights",
        re.compile(
            r"Externally held weights on device \S+ \(" + NUM + "/" + NUM + r" GiB\) exceed the desired GPU "
            r"memory utilization \(" + NUM + ", " + NUM + r" GiB\)"
        ),
        "rank",
        h.external_weights_over,
    ),
    (
        "usage",
        "for CUDAGraph memory",
        re.compile(
            r"Actual usage is "
            + NUM
            + r" GiB for weight, "
            + NUM
            + r" GiB for peak activation, "
            + NUM
            + r" GiB for non-torch memory, and "
            + NUM
            + r" GiB for CUDAGraph memory"
        ),
        "rank",
        h.usage_old,
    ),
    (
        "usage_consumed",
        "for CUDAGraph memory",
        re.compile(
            r"Actual usage is "
            + NUM
            + r" GiB for consumed memory \(weights \+ non-torch\), "
            + NUM
            + r" GiB for peak activation, and "
            + NUM
            + r" GiB for CUDAGraph memory"
        ),
        "rank",
        h.usage_new,
    ),
    (
        "suggestion",
        "--kv-cache-memory=",
        re.compile(
            r"`--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fit into requested memory, or "
            r"`--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fully utilize gpu memory"
        ),
        "rank",
        h.suggestion,
    ),
    (
        "kv_in_use",
        "kv cache memory in use",
        re.compile(r"Current kv cache memory in use is (?:(\d+) bytes|" + NUM + r" GiB)"),
        "rank",
        h.in_use,
    ),
    (
        "manual",
        "as specified by kv_cache_memory_bytes",
        re.compile(r"Initial free memory " + NUM + r" GiB, reserved " + NUM + r" ?GiB memory for KV Cache"),
        "rank",
        h.manual,
    ),
    (
        "startup_plan",
        "persisted startup plan",
        re.compile(
            r"kv_cache_memory_bytes=(\d+) \("
            + NUM
            + r" GiB\), recorded free-memory baseline "
            + NUM
            + r" GiB, current "
            + NUM
            + r" GiB"
        ),
        "rank",
        h.plan_applied,
    ),
    (
        "startup_plan_not_applied",
        "Startup plan not applied",
        re.compile(r"current free memory \(" + NUM + r" GiB\) is below the recorded baseline"),
        "rank",
        lambda m: {"init_free_bytes": gib_bytes(m.group(1))},
    ),
    (
        "graph_took",
        "Graph capturing finished",
        re.compile(r"Graph capturing finished in \d+ secs?, took " + NUM + r" GiB"),
        "rank",
        h.graph_took,
    ),
    (
        "graph_finished",
        "Graph capturing finished",
        re.compile(r"Graph capturing finished in \d+ secs?\.\s*$"),
        "rank",
        lambda m: {},
    ),
    (
        "graph_estimate",
        "Estimated CUDA graph memory",
        re.compile(r"Estimated CUDA graph memory: " + NUM + r" GiB total"),
        "rank",
        h.graph_estimate,
    ),
    (
        "graph_pool",
        "CUDA graph pool memory",
        re.compile(r"CUDA graph pool memory: " + NUM + r" GiB \(actual\), " + NUM + r" GiB \(estimated\)"),
        "rank",
        h.graph_pool,
    ),
    (
        "graph_estimate_on",
        "CUDA graph memory profiling is enabled",
        re.compile(r"profiling is enabled"),
        "flag",
        h.flag("estimate_applied", True),
    ),
    (
        "graph_estimate_off",
        "CUDA graph memory profiling",
        re.compile(
            r"CUDA graph memory profiling is disabled|In v0\.19, CUDA graph memory profiling will be enabled"
        ),
        "flag",
        h.flag("estimate_applied", False),
    ),
    (
        "kv_tokens",
        "KV cache size:",
        re.compile(
            r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: "
            + NUM
            + r"x)?"
        ),
        "engine",
        h.tokens,
    ),
    (
        "concurrency",
        "Maximum concurrency for",
        re.compile(r"^Maximum concurrency for ([\d,]+) tokens per request: " + NUM + r"x"),
        "engine",
        h.concurrency,
    ),
    # "# GPU blocks: N"; a bare line pasted into Markdown loses its leading "#" ("GPU blocks: N, # CPU …")
    ("blocks", " blocks: ", re.compile(r"(?:# |^)(?:GPU|CUDA|cuda) blocks: (\d+)"), "engine", h.blocks),
    (
        "version",
        " version ",
        re.compile(r"vLLM API server version (v?\d+\.\d+[\w.+\-]*)"),
        "config",
        h.version,
    ),
    (
        "engine_config",
        "with config",
        # "a V0 LLM engine" is the real V0 form of 0.7.3–0.10.x (vllm-log-formats.md §10 lists only
        # "an LLM engine" and "a V1 LLM engine")
        re.compile(r"Initializing (?:an|a V0|a V1) LLM engine (?:\((v?[^)\s]+)\) )?with config: (.*)$"),
        "config",
        h.engine_config,
    ),
    (
        "non_default_args",
        "non-default args",
        re.compile(r"non-default args: (\{.*\})\s*$"),
        "config",
        h.non_default,
    ),
    ("namespace_args", "args: Namespace(", re.compile(r"args: Namespace\((.*)\)\s*$"), "config", h.namespace),
    (
        "block_size",
        "block size",
        re.compile(r"(?:(?:Forcing|Setting) kv cache|Setting attention) block size to (\d+)"),
        "config",
        h.block_size,
    ),
    (
        "rank_assign",
        "in world size",
        re.compile(
            r"rank (\d+) in world size (\d+) is assigned as DP rank (\d+), PP rank (\d+),"
            r"(?: PCP rank (\d+),)? "
            r"TP rank (\d+)"
        ),
        "assign",
        h.assign,
    ),
    (
        "world_debug",
        "world_size=",
        re.compile(r"world_size=(\d+) rank=(\d+) local_rank=\d+"),
        "assign",
        h.world_debug,
    ),
    (
        "startup_done",
        "took",
        re.compile(r"init engine \(profile, create kv cache, warmup model\) took"),
        "flag",
        h.flag("startup_done"),
    ),
    (
        "startup_done",
        "startup complete",
        re.compile(r"Application startup complete"),
        "flag",
        h.flag("startup_done"),
    ),
]
#: Failure families, (family, trigger, regex, outcome): the message is the error text.
FAILURES = [
    ("oom", "emory", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", "oom"),
    (
        "error_kv_too_small",
        "KV cache is needed",
        r"KV cache is needed, which is larger than the available KV cache memory",
        "error",
    ),
    ("error_no_blocks", "No available memory for the cache blocks", r"No available memory", "error"),
    ("error_free_below", "less than desired GPU memory", r"is less than desired GPU memory", "error"),
    ("error_fatal", "fatal error", r"EngineCore encountered a fatal error", "error"),
    ("error_profiling", "Error in memory profiling", r"Error in memory profiling", "error"),
    ("error_exception", "Error", r"^(?:[\w.]+\.)?[A-Za-z]*(?:Error|Exception): \S", "error"),
]
FAMILIES += SIZING_FAMILIES + FAILURE_VALUE_FAMILIES
FAMILIES += [
    (family, trigger, re.compile(pattern), "outcome", failure_handler(outcome, priority))
    for family, trigger, pattern, outcome, priority in FAILURE_FAMILIES
]
FAMILIES += [
    (
        family,
        trigger,
        re.compile(pattern),
        "outcome",
        failure_handler(outcome, 0 if outcome == "oom" else 2 if family == "error_exception" else 1),
    )
    for family, trigger, pattern, outcome in FAILURES
]


#: Each distinct trigger with the positions (in :data:`FAMILIES` order) of the families it gates.
_BY_TRIGGER: dict[str, list[int]] = {}
for _position, (_family, _trigger, *_rest) in enumerate(FAMILIES):
    _BY_TRIGGER.setdefault(_trigger, []).append(_position)
_TRIGGERS = tuple(_BY_TRIGGER.items())
#: A message's shape: its text with every ASCII digit read as 0 (the numbers vary, the shape recurs).
_DIGITS = str.maketrans("123456789", "000000000")
if any(char in "0123456789" for trigger in _BY_TRIGGER for char in trigger):
    raise ValueError("a trigger holds a digit: a message's shape would not tell whether it holds it")
#: Families whose regex matches a message exactly when it matches the message's shape: no literal
#: digit outside an escape or a {m,n} count (``\d``, ``\w``, ``.`` read any digit as they read 0).
_SHAPE_SAFE = frozenset(
    position
    for position, (_family, _trigger, pattern, *_rest) in enumerate(FAMILIES)
    if not re.search(r"\d", re.sub(r"\\.|\{\d*,?\d*\}", "", pattern.pattern))
)
#: Shape → the positions of the families worth trying on a message of that shape (in table order):
#: the shape holds the trigger, and the regex either matched the shape or is not shape-safe.
_SHAPES: dict[str, tuple[int, ...]] = {}
#: At most this many shapes are kept (then the table starts over): memory stays bounded.
MAX_SHAPES = 4096


def _worth_trying(message: str) -> tuple[int, ...]:
    """The families worth trying on ``message``, learnt once per shape (see :data:`_SHAPES`)."""
    shape = message.translate(_DIGITS)
    found = _SHAPES.get(shape)
    if found is None:
        positions = sorted(position for trigger, group in _TRIGGERS if trigger in shape for position in group)
        found = tuple(
            position
            for position in positions
            if position not in _SHAPE_SAFE or FAMILIES[position][2].search(shape) is not None
        )
        if len(_SHAPES) >= MAX_SHAPES:
            _SHAPES.clear()
        _SHAPES[shape] = found
    return found


def read_message(message: str) -> list[Fact]:
    """The facts in one log message, one per line family that matches.

    The families tried are those whose trigger the message holds, in table order (learnt once per
    shape of message, :func:`_worth_trying`). Outcome families stop at the first match, so one error
    line is one error.

    >>> [(f.family, f.values) for f in read_message("Available KV cache memory: 12.5 GiB")]
    [('available_kv', {'available_kv_bytes': 13421772800})]
    >>> read_message("Loading safetensors checkpoint shards: 100% Completed")
    []
    """
    candidates = _worth_trying(message)
    if not candidates:
        return []
    facts = []
    seen_outcome = False
    for position in candidates:
        family, _trigger, pattern, scope, handler = FAMILIES[position]
        if scope == "outcome" and seen_outcome:
            continue
        match = pattern.search(message)
        if match is None:
            continue
        facts.append(Fact(family, scope, handler(match)))
        seen_outcome = seen_outcome or scope == "outcome"
    return facts
