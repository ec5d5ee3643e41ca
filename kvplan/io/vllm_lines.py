"""vLLM log lines, one family at a time: split a physical line into records, read each message.

The formats (every release from 0.5 to 0.33) are in ``vllm-log-formats.md``; the table
:data:`FAMILIES` holds one entry per line family: a cheap trigger substring, a regex, and what the
match means (ledger columns, engine-level values, configuration, rank assignment, outcome).
:func:`split_records` copes with what real files contain: ANSI colour, ``\\r`` progress updates,
several process prefixes on one line, two processes' output interleaved, lost headers.

Sizes become bytes here, and only here, through :func:`kvplan.units.parse_size`: vLLM prints GiB
(and, in old releases, "GB" or "MB" meaning GiB and MiB).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from kvplan.units import parse_size

#: Byte strings of which every line the reader uses contains at least one (the fast pre-filter).
ANCHORS: tuple[bytes, ...] = (
    b"emory",  # every memory line: profiling, available KV, free memory, graphs, OOM, suggestion
    b" took ",  # weights loaded, graphs captured, engine initialised
    b"KV cache size",
    b"Maximum concurrency",
    b" blocks: ",
    b" version ",
    b"with config",
    b"args: ",
    b"world",
    b"Error",
    b"block size",
    b"startup complete",
    b"Graph capturing",  # 0.5–0.6.3 "Graph capturing finished in N secs." has no other anchor
    b"fatal error",
)
#: One byte pair of each anchor, rare in serving traffic and prose, that the fast scan looks for.
ANCHOR_PAIRS: tuple[bytes, ...] = (
    b"ry",
    b"oo",
    b"ze",
    b"xi",
    b"s:",
    b" v",
    b"nf",
    b"gs",
    b"rl",
    b"Er",
    b"k ",
    b"tu",
    b"Gr",
    b"rr",
)

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX_RE = re.compile(r"\((?:([A-Za-z_][\w.\-= ]*?) )?pid=(\d+)(?:, ip=([^)\s]+))?\)\s?")
_HEADER_RE = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
    r"(?:\[?[\w./<>-]+:\d+\] ?)?"
)
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
#: A colour code whose ESC byte was lost in copy-paste (``[1;36m``), and the tokens of a record's
#: head (process prefix, level, date, ``[file:line]``) among which such codes are stripped.
_BARE_CODE_RE = re.compile(r"\[[0-9;]*m")
_HEAD_TOKEN_RE = re.compile(
    r"(?P<code>\[[0-9;]*m)|(?P<space>[ \t]+)"
    r"|(?P<prefix>\((?:[A-Za-z_][\w.\-= ]*? )?pid=\d+(?:, ip=[^)\s]+)?\))"
    r"|(?P<level>(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?![\w:]))"
    r"|(?P<time>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)|(?P<file>\[?[\w./<>-]+:\d+\])"
)
NUM = r"(-?\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class Record:
    """One log record: who printed it and what it says.

    ``process`` is the innermost prefix name ('' when none), ``pid``/``ip`` the process identity
    (None when no prefix), ``outer`` the relaying prefixes outside it (Ray through EngineCore),
    ``level`` the log level when the header survived, ``repeated`` Ray's collapsed-line count.
    """

    message: str
    process: str = ""
    pid: int | None = None
    ip: str | None = None
    level: str | None = None
    repeated: int = 0
    outer: tuple[str, ...] = ()


def strip_ansi(text: str) -> str:
    """Text without ANSI colour codes.

    >>> strip_ansi("\\x1b[32mINFO\\x1b[0m 08-14")
    'INFO 08-14'
    """
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def split_records(line: str) -> list[Record]:
    """The records in one physical line (``\\n`` already removed).

    ``\\r`` separates progress-bar updates and continuation lines; a process prefix or a log
    header in the middle of a line starts a new record (two processes wrote into one line).
    Consecutive prefixes are relays: the innermost one names the process that printed.

    >>> r = split_records("(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Hi")[0]
    >>> r.process, r.pid, r.level, r.message
    ('Worker_TP1', 12, 'INFO', 'Hi')
    >>> [x.message for x in split_records("50%|##  \\rINFO 08-14 14:07:22 [a.py:1] done")]
    ['50%|##', 'done']
    """
    records = []
    for segment in strip_ansi(line).split("\r"):
        records.extend(_segment_records(strip_bare_colour(segment)))
    return records


def strip_bare_colour(segment: str) -> str:
    """``segment`` without the colour codes that lost their ESC byte (``[1;36m``) in a record's head.

    Only codes among the process prefix, level, date and ``[file:line]`` at the start of a record
    (the segment's start, or a process prefix) go, as :func:`strip_ansi` removes real ones; the same
    text inside a message body stays.

    >>> strip_bare_colour("[1;36m(VllmWorkerProcess pid=902)[0;0m INFO 09-13 10:00:16 [a.py:1] x [1m")
    '(VllmWorkerProcess pid=902) INFO 09-13 10:00:16 [a.py:1] x [1m'
    >>> strip_bare_colour("[32mINFO[0m [90m06-01 10:00:00[0m [90m[a.py:1][0m [1mbold")
    'INFO 06-01 10:00:00 [a.py:1] [1mbold'
    >>> strip_bare_colour("[1;36mno head here")
    '[1;36mno head here'
    """
    if "m" not in segment or _BARE_CODE_RE.search(segment) is None:
        return segment
    starts = [0]
    for match in _PREFIX_RE.finditer(segment):
        before = segment[: match.start()]
        code = re.search(r"(?:\[[0-9;]*m)+$", before)
        starts.append(code.start() if code else match.start())
    cuts: list[tuple[int, int]] = []
    done = 0
    for start in starts:
        if start < done:
            continue
        codes, head, position = [], False, start
        while True:
            token = _HEAD_TOKEN_RE.match(segment, position)
            if token is None or token.end() == position:
                break
            kind = token.lastgroup
            if kind == "code":
                codes.append(token.span())
            elif kind in ("prefix", "level"):
                head = True
            position = token.end()
            if kind == "file":
                # the message follows; only a reset glued to ``[file:line]`` is still the head's
                adjacent = _BARE_CODE_RE.match(segment, position)
                while adjacent:
                    codes.append(adjacent.span())
                    position = adjacent.end()
                    adjacent = _BARE_CODE_RE.match(segment, position)
                break
        done = position
        if head:
            cuts.extend(codes)
    if not cuts:
        return segment
    parts, last = [], 0
    for begin, end in cuts:
        parts.append(segment[last:begin])
        last = end
    parts.append(segment[last:])
    return "".join(parts)


def _segment_records(segment: str) -> list[Record]:
    starts = sorted(
        [(m.start(), m.end(), "prefix", m) for m in _PREFIX_RE.finditer(segment)]
        + [(m.start(), m.end(), "header", m) for m in _HEADER_RE.finditer(segment)]
    )
    records: list[Record] = []
    if not starts:
        text = segment.strip()
        return [Record(text)] if text else []
    head = segment[: starts[0][0]].strip()
    if head and not _is_external_stamp(head):
        records.append(Record(head))
    index = 0
    while index < len(starts):
        prefixes, level, end = [], None, starts[index][0]
        while index < len(starts) and starts[index][0] <= end + 1:
            _start, end, kind, match = starts[index]
            if kind == "prefix" and level is None:
                prefixes.append(match)
            elif kind == "header" and level is None:
                level = match.group(0).split(" ", 1)[0]
            else:
                break
            index += 1
        stop = starts[index][0] if index < len(starts) else len(segment)
        message = segment[end:stop].strip()
        records.append(_record(message, prefixes, level))
    return records


def _is_external_stamp(text: str) -> bool:
    """True for text that wrappers put before vLLM's own line (docker, compose, ``ts``)."""
    return text.endswith("|") or bool(re.fullmatch(r"[\d\-:.,TZ+ ]+", text))


def _record(message: str, prefixes: list[re.Match], level: str | None) -> Record:
    repeated = 0
    repeat = _RAY_REPEAT_RE.search(message)
    if repeat:
        repeated = int(repeat.group(1))
        message = message[: repeat.start()]
    if not prefixes:
        return Record(message, level=level, repeated=repeated)
    inner = prefixes[-1]
    return Record(
        message,
        process=(inner.group(1) or "").strip(),
        pid=int(inner.group(2)),
        ip=inner.group(3),
        level=level,
        repeated=repeated,
        outer=tuple((m.group(1) or "").strip() for m in prefixes[:-1]),
    )


# --- values -----------------------------------------------------------------------------------


def gib_bytes(text: str, unit: str = "GiB") -> int:
    """Bytes in a number vLLM printed in GiB; "GB"/"Gib" meant GiB, "MB" meant MiB.

    >>> gib_bytes("10.2"), gib_bytes("-9.96"), gib_bytes("14.9864", "GB"), gib_bytes("512", "MB")
    (10952166605, -10694468567, 16091524471, 536870912)
    """
    binary = {"GiB": "GiB", "GB": "GiB", "Gib": "GiB", "MiB": "MiB", "MB": "MiB"}[unit]
    return parse_size(f"{text}{binary}")


def literal_value(text: str) -> object:
    """A configuration value as Python sees it: numbers, booleans, None, quoted strings.

    Anything else (``torch.bfloat16``, ``auto``, ``{...}``) stays text.

    >>> literal_value("32768"), literal_value("'fp8'"), literal_value("None"), literal_value("torch.bfloat16")
    (32768, 'fp8', None, 'torch.bfloat16')
    """
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


_SPLIT_RE = re.compile(r"[\"'()\[\]{},]")


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and quotes (engine-config and dict literals).

    >>> split_top_level("a=1, b={'x': 1, 'y': [2, 3]}, c='p,q'")
    ['a=1', " b={'x': 1, 'y': [2, 3]}", " c='p,q'"]
    """
    parts, depth, quote, start = [], 0, "", 0
    for match in _SPLIT_RE.finditer(text):
        char = match.group()
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0:
            parts.append(text[start : match.start()])
            start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return parts


#: Configuration names as vLLM logs them (engine config, ``non-default args``, ``Namespace``) →
#: glossary names; only these are read.
CONFIG_NAMES = {
    "model": "model",
    "model_tag": "model",
    "revision": "revision",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_seq_len": "max_model_len",
    "max_model_len": "max_model_len",
    "block_size": "block_size",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "decode_context_parallel_size": "decode_context_parallel_size",
    "enforce_eager": "enforce_eager",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "vllm_version": "vllm_version",
    "cudagraph_mode": "cudagraph_mode",
}

#: ``compilation_config``'s ``cudagraph_mode`` as logged: an enum repr (0.11+), a number or a pair (0.10).
_CUDAGRAPH_MODE_RE = re.compile(
    r"""['"]cudagraph_mode['"]\s*:\s*(?:<CUDAGraphMode\.(\w+)|[\[(]\s*(\d)\s*,\s*(\d)\s*[\])]|(\d)\b|['"](\w+)['"])"""
)
#: vLLM's ``CUDAGraphMode`` values: NONE 0, PIECEWISE 1, FULL 2, and the (decode, mixed) pairs.
_CUDAGRAPH_MODES = {("0",): "NONE", ("1",): "PIECEWISE", ("2",): "FULL", ("2", "0"): "FULL_DECODE_ONLY",
                    ("2", "1"): "FULL_AND_PIECEWISE"}


def cudagraph_mode(config_text: str) -> str | None:
    """The CUDA graph mode a config line states, by its enum name; None when it states none.

    >>> cudagraph_mode("compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}")
    'FULL_AND_PIECEWISE'
    >>> cudagraph_mode('compilation_config={"cudagraph_mode":[2,1]}'), cudagraph_mode('{"cudagraph_mode":1}')
    ('FULL_AND_PIECEWISE', 'PIECEWISE')
    """
    m = _CUDAGRAPH_MODE_RE.search(config_text)
    if m is None:
        return None
    name, first, second, single, quoted = m.groups()
    if name or quoted:
        return name or quoted
    return _CUDAGRAPH_MODES.get((first, second) if first else (single,))


def key_values(text: str, separator: str = "=", names: Collection[str] | None = None) -> dict[str, object]:
    """``key=value, key=value`` (engine config, ``Namespace(...)``) or a dict literal's items.

    With ``names``, only those keys are kept (and their values evaluated).

    >>> key_values("model='m', max_seq_len=32768, compilation_config={\\"level\\":3, \\"x\\":[1,2]}")
    {'model': 'm', 'max_seq_len': 32768, 'compilation_config': {'level': 3, 'x': [1, 2]}}
    >>> key_values("'tensor_parallel_size': 4, 'kv_cache_dtype': 'fp8'", ":", names={"kv_cache_dtype"})
    {'kv_cache_dtype': 'fp8'}
    """
    values: dict[str, object] = {}
    for part in split_top_level(text):
        name, sep, value = part.partition(separator)
        name = name.strip().strip("'\"")
        if sep and (name in names if names is not None else re.fullmatch(r"\w+", name)):
            values[name] = literal_value(value)
    return values


# --- line families ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """What one matched line says.

    ``scope`` is ``rank`` (a value of the rank that printed it), ``engine`` (an engine-level value:
    KV cache size, concurrency, blocks), ``config`` (compatibility-key fields), ``assign`` (ties the
    printing process to a rank), ``outcome`` (``oom``/``error`` with text), ``flag`` (boot facts).
    """

    family: str
    scope: str
    values: dict = field(default_factory=dict)


Handler = Callable[[re.Match], dict]


def _weights(m: re.Match) -> dict:
    return {"weights_bytes": gib_bytes(m.group(1), m.group(2))}


_V0_RESULT_FIELDS = {
    "total_bytes": re.compile(r"total_gpu_memory=" + NUM + r" ?Gi[Bb]"),
    "non_torch_bytes": re.compile(r"non_torch_memory=" + NUM + r" ?Gi[Bb]"),
    "available_kv_bytes": re.compile(r"kv_cache_size=" + NUM + r" ?Gi[Bb]"),
}


def _v0_one_line(m: re.Match) -> dict:
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


def _v0_total(m: re.Match) -> dict:
    return {
        "total_bytes": gib_bytes(m.group(1)),
        "gpu_memory_utilization": float(m.group(2)),
        "requested_bytes": gib_bytes(m.group(3)),
    }


def _v0_parts(m: re.Match) -> dict:
    return {
        "weights_bytes": gib_bytes(m.group(1)),
        "non_torch_bytes": gib_bytes(m.group(2)),
        "activation_peak_bytes": gib_bytes(m.group(3)),
        "available_kv_bytes": gib_bytes(m.group(4)),
    }


def _profile_result(m: re.Match) -> dict:
    """V1 DEBUG profile result; 0.27+ prints total consumed (weights + non-torch) instead."""
    non_kv, torch_peak, third, weights = (gib_bytes(m.group(i)) for i in (1, 2, 4, 5))
    if m.group(3).startswith("non-torch"):
        return {"activation_peak_bytes": torch_peak, "non_torch_bytes": third, "weights_bytes": weights}
    return {
        "weights_bytes": weights,
        "non_torch_bytes": third - weights,
        "activation_peak_bytes": non_kv - third,
    }


def _init_free_old(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), "requested_bytes": gib_bytes(m.group(3))}


def _init_free(m: re.Match) -> dict:
    return {
        "init_free_bytes": gib_bytes(m.group(1)),
        "gpu_memory_utilization": float(m.group(2)),
        "requested_bytes": gib_bytes(m.group(3)),
    }


def _snapshot(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), "total_bytes": gib_bytes(m.group(2))}


def _device_free(m: re.Match) -> dict:
    return {
        "init_free_bytes": gib_bytes(m.group(1)),
        "total_bytes": gib_bytes(m.group(2)),
        "gpu_memory_utilization": float(m.group(3)),
        "requested_bytes": gib_bytes(m.group(4)),
    }


def _usage_old(m: re.Match) -> dict:
    return {
        "weights_bytes": gib_bytes(m.group(1)),
        "activation_peak_bytes": gib_bytes(m.group(2)),
        "non_torch_bytes": gib_bytes(m.group(3)),
        "cuda_graph_bytes": gib_bytes(m.group(4)),
    }


def _usage_new(m: re.Match) -> dict:
    return {"activation_peak_bytes": gib_bytes(m.group(2)), "cuda_graph_bytes": gib_bytes(m.group(3))}


def _suggestion(m: re.Match) -> dict:
    return {"suggested_fit_bytes": int(m.group(1)), "suggested_full_bytes": int(m.group(2))}


def _in_use(m: re.Match) -> dict:
    return {"kv_in_use_bytes": int(m.group(1)) if m.group(1) else gib_bytes(m.group(2))}


def _manual(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), "manual_kv_bytes": gib_bytes(m.group(2))}


def _plan_applied(m: re.Match) -> dict:
    return {"manual_kv_bytes": int(m.group(1)), "init_free_bytes": gib_bytes(m.group(4))}


def _graph_took(m: re.Match) -> dict:
    return {"cuda_graph_bytes": gib_bytes(m.group(1))}


def _graph_pool(m: re.Match) -> dict:
    return {"cuda_graph_bytes": gib_bytes(m.group(1)), "cuda_graph_estimate_bytes": gib_bytes(m.group(2))}


def _graph_estimate(m: re.Match) -> dict:
    return {"cuda_graph_estimate_bytes": gib_bytes(m.group(1))}


def _tokens(m: re.Match) -> dict:
    values = {"kv_cache_tokens": int(m.group(1).replace(",", ""))}
    if m.group(2):
        values.update(max_model_len=int(m.group(2).replace(",", "")), max_concurrency=float(m.group(3)))
    return values


def _concurrency(m: re.Match) -> dict:
    return {"max_model_len": int(m.group(1).replace(",", "")), "max_concurrency": float(m.group(2))}


def _blocks(m: re.Match) -> dict:
    return {"num_gpu_blocks": int(m.group(1))}


def _version(m: re.Match) -> dict:
    return {"vllm_version": m.group(1).lstrip("v")}


def _engine_config(m: re.Match) -> dict:
    values = key_values(m.group(2), names=CONFIG_NAMES)
    mode = cudagraph_mode(m.group(2))
    if mode:
        values["cudagraph_mode"] = mode
    if m.group(1):
        values["vllm_version"] = m.group(1).lstrip("v")
    values["_v1"] = "V1" in m.group(0)[:40]
    return values


def _non_default(m: re.Match) -> dict:
    values = key_values(
        m.group(1).strip().removeprefix("{").removesuffix("}"), separator=":", names=CONFIG_NAMES
    )
    mode = cudagraph_mode(m.group(1))
    if mode:
        values["cudagraph_mode"] = mode
    return values


def _namespace(m: re.Match) -> dict:
    return key_values(m.group(1), names=CONFIG_NAMES)


def _assign(m: re.Match) -> dict:
    return {
        "rank": int(m.group(1)),
        "world_size": int(m.group(2)),
        "dp_rank": int(m.group(3)),
        "pp_rank": int(m.group(4)),
        "tp_rank": int(m.group(6)),
    }


def _world_debug(m: re.Match) -> dict:
    return {"world_size": int(m.group(1)), "rank": int(m.group(2))}


def _block_size(m: re.Match) -> dict:
    return {"block_size": int(m.group(1))}


def _text(m: re.Match) -> dict:
    return {"text": m.string.strip()}


def _flag(name: str, value: object = True) -> Handler:
    return lambda m: {name: value}


#: (family, trigger substring, regex, scope, handler). The trigger is checked first (cheap).
FAMILIES: list[tuple[str, str, re.Pattern, str, Handler]] = [
    (
        "weights",
        "took",
        re.compile(r"(?:Loading model weights|Model loading) took " + NUM + r" (GiB|GB|MB)\b"),
        "rank",
        _weights,
    ),
    (
        "profile_v0_one_line",
        "total_gpu_memory=",
        re.compile(r"Memory profiling results: .*?total_gpu_memory=" + NUM + r" ?GiB.*?kv_cache_size="),
        "rank",
        _v0_one_line,
    ),
    (
        "profile_v0_total",
        "total_gpu_memory (",
        re.compile(
            r"total_gpu_memory \(" + NUM + r"GiB\) x gpu_memory_utilization \(" + NUM + r"\) = " + NUM + "GiB"
        ),
        "rank",
        _v0_total,
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
        _v0_parts,
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
        _profile_result,
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
        _init_free_old,
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
        _init_free,
    ),
    (
        "free_after_profiling",
        "Free memory after profiling:",
        re.compile(
            r"Free memory after profiling: " + NUM + r" ?GiB \(total\), " + NUM
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
        _snapshot,
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
            r"[Dd]esired GPU memory utilization (?:is )?\(" + NUM + ", " + NUM + r" GiB\)"
        ),
        "rank",
        _device_free,
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
        _usage_old,
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
        _usage_new,
    ),
    (
        "suggestion",
        "--kv-cache-memory=",
        re.compile(
            r"`--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fit into requested memory, or "
            r"`--kv-cache-memory=(-?\d+)`(?: \(-?[\d.]+ GiB\))? to fully utilize gpu memory"
        ),
        "rank",
        _suggestion,
    ),
    (
        "kv_in_use",
        "kv cache memory in use",
        re.compile(r"Current kv cache memory in use is (?:(\d+) bytes|" + NUM + r" GiB)"),
        "rank",
        _in_use,
    ),
    (
        "manual",
        "as specified by kv_cache_memory_bytes",
        re.compile(r"Initial free memory " + NUM + r" GiB, reserved " + NUM + r" ?GiB memory for KV Cache"),
        "rank",
        _manual,
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
        _plan_applied,
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
        _graph_took,
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
        _graph_estimate,
    ),
    (
        "graph_pool",
        "CUDA graph pool memory",
        re.compile(r"CUDA graph pool memory: " + NUM + r" GiB \(actual\), " + NUM + r" GiB \(estimated\)"),
        "rank",
        _graph_pool,
    ),
    (
        "graph_estimate_on",
        "CUDA graph memory profiling is enabled",
        re.compile(r"profiling is enabled"),
        "flag",
        _flag("estimate_applied", True),
    ),
    (
        "graph_estimate_off",
        "CUDA graph memory profiling",
        re.compile(
            r"CUDA graph memory profiling is disabled|In v0\.19, CUDA graph memory profiling will be enabled"
        ),
        "flag",
        _flag("estimate_applied", False),
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
        _tokens,
    ),
    (
        "concurrency",
        "Maximum concurrency for",
        re.compile(r"^Maximum concurrency for ([\d,]+) tokens per request: " + NUM + r"x"),
        "engine",
        _concurrency,
    ),
    ("blocks", " blocks: ", re.compile(r"# (?:GPU|CUDA|cuda) blocks: (\d+)"), "engine", _blocks),
    (
        "version",
        " version ",
        re.compile(r"vLLM API server version (v?\d+\.\d+[\w.+\-]*)"),
        "config",
        _version,
    ),
    (
        "engine_config",
        "with config",
        # "a V0 LLM engine" is the real V0 form of 0.7.3–0.10.x (vllm-log-formats.md §10 lists only
        # "an LLM engine" and "a V1 LLM engine")
        re.compile(r"Initializing (?:an|a V0|a V1) LLM engine (?:\((v?[^)\s]+)\) )?with config: (.*)$"),
        "config",
        _engine_config,
    ),
    (
        "non_default_args",
        "non-default args",
        re.compile(r"non-default args: (\{.*\})\s*$"),
        "config",
        _non_default,
    ),
    ("namespace_args", "args: Namespace(", re.compile(r"args: Namespace\((.*)\)\s*$"), "config", _namespace),
    (
        "block_size",
        "block size",
        re.compile(r"(?:(?:Forcing|Setting) kv cache|Setting attention) block size to (\d+)"),
        "config",
        _block_size,
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
        _assign,
    ),
    (
        "world_debug",
        "world_size=",
        re.compile(r"world_size=(\d+) rank=(\d+) local_rank=\d+"),
        "assign",
        _world_debug,
    ),
    (
        "startup_done",
        "took",
        re.compile(r"init engine \(profile, create kv cache, warmup model\) took"),
        "flag",
        _flag("startup_done"),
    ),
    (
        "startup_done",
        "startup complete",
        re.compile(r"Application startup complete"),
        "flag",
        _flag("startup_done"),
    ),
    (
        "oom",
        "emory",
        re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
        "outcome",
        lambda m: {"outcome": "oom", **_text(m)},
    ),
    (
        "error_kv_too_small",
        "KV cache is needed",
        re.compile(r"KV cache is needed, which is larger than the available KV cache memory"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
    (
        "error_no_blocks",
        "No available memory for the cache blocks",
        re.compile(r"No available memory"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
    (
        "error_free_below",
        "less than desired GPU memory",
        re.compile(r"is less than desired GPU memory"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
    (
        "error_fatal",
        "fatal error",
        re.compile(r"EngineCore encountered a fatal error"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
    (
        "error_profiling",
        "Error in memory profiling",
        re.compile(r"Error in memory profiling"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
    (
        "error_exception",
        "Error",
        re.compile(r"^(?:[\w.]+\.)?[A-Za-z]*(?:Error|Exception): \S"),
        "outcome",
        lambda m: {"outcome": "error", **_text(m)},
    ),
]


def read_message(message: str) -> list[Fact]:
    """The facts in one log message, one per line family that matches.

    Outcome families stop at the first match, so one error line is one error.

    >>> [(f.family, f.values) for f in read_message("Available KV cache memory: 12.5 GiB")]
    [('available_kv', {'available_kv_bytes': 13421772800})]
    >>> read_message("Loading safetensors checkpoint shards: 100% Completed")
    []
    """
    facts = []
    seen_outcome = False
    for family, trigger, pattern, scope, handler in FAMILIES:
        if trigger not in message or (scope == "outcome" and seen_outcome):
            continue
        match = pattern.search(message)
        if match is None:
            continue
        facts.append(Fact(family, scope, handler(match)))
        seen_outcome = seen_outcome or scope == "outcome"
    return facts
