"""What a matched line family means: a table row's regex groups into ledger values, or a handler here."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kvplan.io.vllm.manual import PRINTED_HALF_BYTES, printed_manual
from kvplan.io.vllm.values import config_items, cudagraph_mode, gib_bytes

NUM = r"(-?\d+(?:\.\d+)?)"


class Fact(NamedTuple):
    """What one matched line says. ``scope``: ``rank`` (the printing rank's value), ``engine`` (KV cache size,
    concurrency, blocks), ``config`` (key fields; ``columns`` as ledger columns), ``assign`` (ties the process to a
    rank), ``outcome`` (``oom``/``error`` with text), ``flag`` (boot facts), ``frame`` (a traceback's)."""

    family: str
    scope: str
    values: Mapping[str, Any]
    columns: tuple[tuple[str, object], ...] = ()


#: What turns a family's match into values.
Handler = Callable[[re.Match], dict]


class Family(NamedTuple):
    """One line family: name, a substring every line of it holds (checked first), regex, scope, handler."""

    name: str
    trigger: str
    pattern: re.Pattern
    scope: str
    handler: Handler


#: How a group's text becomes a value: ``gib`` a size vLLM printed in GiB into bytes, ``int`` a count
#: (thousands commas allowed), ``version`` without its ``v``, ``enabled`` a boolean.
CONVERTERS: dict[str, Callable[[str], object]] = {
    "gib": gib_bytes,
    "int": lambda text: int(text.replace(",", "")),
    "float": float,
    "text": str,
    "version": lambda text: text.lstrip("v"),
    "enabled": lambda text: text == "enabled",
}
#: The kind of each column a row may name without one (``*_bytes`` columns are ``gib``).
COLUMN_KINDS = {
    "gpu_memory_utilization": "float",
    "max_concurrency": "float",
    "vllm_version": "version",
    "mamba_cache_mode": "text",
    "kv_cache_group_block_sizes": "text",
    "kv_cache_pools": "text",
    "failed_in": "text",
    **dict.fromkeys(
        [
            "kv_cache_tokens",
            "max_model_len",
            "num_gpu_blocks",
            "num_gpu_blocks_override",
            "max_num_batched_tokens",
            "block_size",
            "rank",
            "world_size",
            "dp_rank",
            "pp_rank",
            "tp_rank",
            "pcp_rank",
        ],
        "int",
    ),
}


def family(
    name: str, trigger: str, scope: str, values: tuple[str | None, ...] | dict | Handler, pattern: str
) -> Family:
    """One row of a family table (``{num}`` in ``pattern``: a decimal number). ``values``: a handler, a dict (what
    every match gives), or the columns the groups hold (None skips one; ``column:kind`` names a converter)."""
    if isinstance(values, tuple):
        handler = _groups_handler(values)
    elif isinstance(values, dict):
        handler = lambda _m, values=values: dict(values)  # noqa: E731 (a new dict each match)
    else:
        handler = values
    return Family(name, trigger, re.compile(pattern.replace("{num}", NUM)), scope, handler)


def _groups_handler(columns: tuple[str | None, ...]) -> Handler:
    """The handler of a row whose groups hold ``columns`` (see :func:`family`)."""
    fields = []
    for index, item in enumerate(columns, start=1):
        if item is not None:
            column, _colon, kind = item.partition(":")
            kind = kind or ("gib" if column.endswith("_bytes") else COLUMN_KINDS[column])
            fields.append((index, column, CONVERTERS[kind]))

    def handler(m: re.Match) -> dict:  # a group that took no part in the match gives nothing
        values = {}
        for index, column, convert in fields:
            text = m.group(index)
            if text is not None:
                values[column] = convert(text)
        return values

    return handler


def weights(m: re.Match) -> dict:
    """``… took N GiB`` (``GB`` and ``MB`` in old releases: GiB and MiB)."""
    return {"weights_bytes": gib_bytes(m.group(1), m.group(2))}


_V0_RESULT_FIELDS = {
    "total_bytes": re.compile(r"total_gpu_memory=" + NUM + r" ?Gi[Bb]"),
    "non_torch_bytes": re.compile(r"non_torch_memory=" + NUM + r" ?Gi[Bb]"),
    "available_kv_bytes": re.compile(r"kv_cache_size=" + NUM + r" ?Gi[Bb]"),
}


def v0_one_line(m: re.Match) -> dict:
    """0.6.4's ``Memory profiling results: key=value …`` (space- or comma-separated forms)."""
    values = {}
    for column, pattern in _V0_RESULT_FIELDS.items():
        found = pattern.search(m.string)
        if found:
            values[column] = gib_bytes(found.group(1))
    util = re.search(r"gpu_memory_utilization=(\d+(?:\.\d+)?)", m.string)
    if util:
        values["gpu_memory_utilization"] = float(util.group(1))
    return values


def profile_result(m: re.Match) -> dict:
    """V1 DEBUG profile result; 0.27+ prints total consumed (weights + non-torch) instead."""
    non_kv, torch_peak, third, weights_bytes = (gib_bytes(m.group(i)) for i in (1, 2, 4, 5))
    if m.group(3).startswith("non-torch"):
        return {"activation_peak_bytes": torch_peak, "non_torch_bytes": third, "weights_bytes": weights_bytes}
    return {
        "weights_bytes": weights_bytes,
        "non_torch_bytes": third - weights_bytes,
        "activation_peak_bytes": non_kv - third,
    }


class PartsDisagree(ValueError):
    """A vLLM line whose printed figures contradict each other beyond their rounding: edited or corrupted."""


#: vLLM's ``redundancy_buffer_memory`` in the suggestion arithmetic [bytes].
_REDUNDANCY_BUFFER_BYTES = 150 << 20
#: The whole suggestion line (``gpu_worker.py`` ``compile_or_warm_up_model``, 0.10.2–0.33): free and total
#: memory, utilization and requested memory, the parts (weights, activation, non-torch, graphs to 0.26;
#: consumed, activation, graphs from 0.27), each suggestion [bytes] and its GiB figure (0.11+), the KV cache
#: in use (bytes in 0.10.2, GiB after).
_SUGGESTION_LINE = re.compile(
    r"Free memory on device \({num}/{num} GiB\) on startup\. Desired GPU memory utilization is \({num}, {num} GiB\)\. "
    r"Actual usage is (?:{num} GiB for weight, {num} GiB for peak activation, {num} GiB for non-torch memory, and "
    r"{num}|{num} GiB for consumed memory \(weights \+ non-torch\), {num} GiB for peak activation, and {num}) GiB "
    r"for CUDAGraph memory\. Replace gpu_memory_utilization config with `--kv-cache-memory=(-?\d+)`"
    r"(?: \({num} GiB\))? to fit into requested memory, or `--kv-cache-memory=(-?\d+)`(?: \({num} GiB\))? "
    r"to fully utilize gpu memory\. Current kv cache memory in use is (?:\d+ bytes|{num} GiB)\.".replace(
        "{num}", NUM
    )
)
#: Words of the suggestion line no other vLLM line holds: a message holds each only inside its one whole line.
_SUGGESTION_WORDS = (
    "--kv-cache-memory=",
    "Free memory on device",
    "Actual usage is",
    "kv cache memory in use",
)
_SUGGESTION_EXPECTED = (
    "a line with a --kv-cache-memory suggestion that cannot be checked (cut short, edited, or more than one): "
    "expected vLLM's whole line once, 'Free memory on device (F/T GiB) on startup. Desired GPU memory utilization "
    "is (U, R GiB). Actual usage is … GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    "`--kv-cache-memory=B` … to fit into requested memory, or `--kv-cache-memory=B` … to fully utilize gpu memory. "
    "Current kv cache memory in use is X GiB.'; give the log as vLLM wrote it"
)


def suggestion(m: re.Match) -> dict:
    """vLLM's two ``--kv-cache-memory`` suggestions [bytes], read from the one whole line that
    :func:`check_suggestion` verified; any other line holding one is refused (:class:`PartsDisagree`): a
    tampered suggestion must not raise a budget."""
    message = m.string
    whole = _SUGGESTION_LINE.search(message)
    if whole is None or any(message.count(word) != whole.group(0).count(word) for word in _SUGGESTION_WORDS):
        raise PartsDisagree(_SUGGESTION_EXPECTED)
    check_suggestion(whole)
    return {"suggested_fit_bytes": int(whole.group(12)), "suggested_full_bytes": int(whole.group(14))}


def check_suggestion(whole: re.Match) -> None:
    """Refuse a suggestion line (``whole``) whose parts give less than it suggests, beyond their rounding.

    vLLM computes ``full = free − Σparts − 150 MiB`` and ``fit = requested − Σparts − 150 MiB`` in bytes
    and prints every other figure rounded to 0.01 GiB (±0.005 GiB): a sum of n printed figures is within
    n × 0.005 GiB of its bytes. ``requested = ceil(total × utilization)`` (less with weights held outside
    the process, 0.32+): printed, at most total × U + 0.005·U + 0.005 GiB. A suggestion's GiB figure
    (0.11+) is within 0.005 GiB of its bytes. Only a suggestion **above** what its line gives is refused:
    one below it is on the safe side, as vLLM's own quirks are (vllm#57936 counts the graphs twice in 0.18
    and 0.27+: the suggestion is low, and its printed activation already holds the graph estimate).
    """
    free, total, requested = (gib_bytes(whole.group(i)) for i in (1, 2, 4))
    util = float(whole.group(3))
    shown = [whole.group(i) for i in range(5, 12) if whole.group(i) is not None]
    parts = sum(map(gib_bytes, shown))
    fit, full = int(whole.group(12)), int(whole.group(14))
    slack = (len(shown) + 1) * PRINTED_HALF_BYTES
    problems = []
    for name, base, suggested in (("free", free, full), ("requested", requested, fit)):
        most = base - parts - _REDUNDANCY_BUFFER_BYTES + slack
        if suggested > most:
            problems.append(
                f"--kv-cache-memory={suggested} is above {name} − the {len(shown)} parts − 150 MiB = {most} B "
                f"at most (± 0.005 GiB for each of {len(shown) + 1} printed figures)"
            )
    most = int(total * util + PRINTED_HALF_BYTES * (1 + util)) + 1
    if requested > most:
        problems.append(f"requested memory {requested} B is above total × {util} = {most} B at most")
    for group, suggested in ((13, fit), (15, full)):
        if whole.group(group) is not None and suggested > gib_bytes(whole.group(group)) + PRINTED_HALF_BYTES:
            problems.append(f"--kv-cache-memory={suggested} is above its printed {whole.group(group)} GiB")
    if problems:
        raise PartsDisagree(
            "vLLM's --kv-cache-memory suggestion line does not add up: "
            + "; ".join(problems)
            + ". The line was edited or corrupted; give the log as vLLM wrote it"
        )


def manual(m: re.Match) -> dict:
    """A manual boot's free memory and its printed KV figure, with the most the flag can be."""
    return {"init_free_bytes": gib_bytes(m.group(1)), **printed_manual(gib_bytes(m.group(2)))}


def plan_applied(m: re.Match) -> dict:
    """The startup plan's exact ``kv_cache_memory_bytes`` (the most it can be, too) and the free memory."""
    exact = int(m.group(1))
    return {"manual_kv_bytes": exact, "manual_kv_max_bytes": exact, "init_free_bytes": gib_bytes(m.group(4))}


def engine_config(m: re.Match) -> dict:
    values = dict(config_items(m.group(2)))
    mode = cudagraph_mode(m.group(2))
    if mode:
        values["cudagraph_mode"] = mode
    if m.group(1):
        values["vllm_version"] = m.group(1).lstrip("v")
    values["_v1"] = "V1" in m.group(0)[:40]
    return values


def non_default(m: re.Match) -> dict:
    values = dict(config_items(m.group(1).strip().removeprefix("{").removesuffix("}"), ":"))
    mode = cudagraph_mode(m.group(1))
    if mode:
        values["cudagraph_mode"] = mode
    return values


def namespace(m: re.Match) -> dict:
    return dict(config_items(m.group(1)))


def failure(outcome: str, priority: int) -> Handler:
    """A failure family's handler: outcome, the message as error text, and priority (lower is named first: 0
    OOM, 1 a specific error, 2 any exception, 3 a generic one)."""
    return lambda m: {"outcome": outcome, "text": m.string.strip(), "priority": priority}
