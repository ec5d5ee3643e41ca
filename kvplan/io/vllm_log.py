"""Read vLLM startup logs (releases 0.5 to 0.33) into the per-rank ledger.

One row per boot × rank with the columns of :data:`kvplan.columns.LEDGER_COLUMNS`, bytes as
nullable ``Int64`` and ``NA`` where the log does not say. Files are streamed in blocks: a fast
pre-filter (:data:`kvplan.io.vllm_lines.ANCHORS`) picks the few lines worth reading, so a
gigabyte of serving traffic costs little time and memory. Every value keeps the file, line number
and raw line it came from (``metadata["provenance"]``).

Room per rank (``room_bytes``, ``room_source``), best evidence first:

1. ``suggestion``: vLLM's ``--kv-cache-memory=N`` "to fully utilize gpu memory" (every rank);
2. ``available_kv``: "Available KV cache memory", minus the CUDA-graph memory captured after the
   KV cache was sized (releases that do not estimate graphs first), or minus what the captured pool
   exceeded the estimate by (releases that do);
3. ``parts``: ``init_free − (weights + activation peak + non-torch + graphs) − 150 MiB``, vLLM's
   own suggestion arithmetic from DEBUG lines.
"""

from __future__ import annotations

import glob as globlib
import io
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from kvplan.columns import BYTES_COLUMNS, KEY_COLUMNS, LEDGER_COLUMNS, world_size
from kvplan.io.vllm_lines import ANCHOR_PAIRS, ANCHORS, CONFIG_NAMES, Record, read_message, split_records
from kvplan.releases import rank0_only_advice, version_tuple
from kvplan.units import MiB

#: vLLM's ``redundancy_buffer_memory`` in the suggestion arithmetic.
SUGGESTION_BUFFER_BYTES = 150 * MiB
CHUNK_BYTES = 1 << 23
#: A "line" longer than this (no newline at all) is read in pieces rather than held whole.
MAX_LINE_BYTES = 1 << 24

INT_COLUMNS = [
    *BYTES_COLUMNS,
    "boot",
    "rank",
    "tp_rank",
    "pp_rank",
    "dp_rank",
    "pid",
    "max_model_len",
    "block_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "kv_cache_tokens",
    "num_gpu_blocks",
]
FLOAT_COLUMNS = ["gpu_memory_utilization", "max_concurrency"]
BOOL_COLUMNS = ["enforce_eager"]
PROVENANCE_COLUMNS = ["source", "line", "boot", "rank", "column", "value", "raw"]
ENGINE_COLUMNS = ("kv_cache_tokens", "max_concurrency", "num_gpu_blocks")
KV_SIZED_COLUMNS = (
    "available_kv_bytes",
    "suggested_full_bytes",
    "manual_kv_bytes",
    "kv_in_use_bytes",
    "num_gpu_blocks",
    "kv_cache_tokens",
)
#: The last startup line of a rank in releases that may print no boot-level completion line
#: (0.5.0–0.6.3, "Graph capturing finished in N secs."). Later releases log more after graph capture
#: (graph pool, --kv-cache-memory suggestion, warm-up), so only "init engine … took" or "Application
#: startup complete" completes their boots.
OLD_LAST_LINE_FAMILIES = ("graph_finished",)
#: Where a configuration value came from, most trusted first.
CONFIG_PRIORITY = {
    "version": 0,
    "engine_config": 1,
    "non_default_args": 2,
    "namespace_args": 2,
    "block_size": 3,
    "rank": 4,
    "engine": 4,
}
_FRONTEND_RE = re.compile(r"(?:APIServer|ApiServer|DPSupervisor|MainProcess|DPCoordinator)\w*")
_ENGINE_RE = re.compile(r"(?:EngineCore|DPEngineCoreActor)(?:_DP(\d+)|_(\d+))?")
_WORKER_RE = re.compile(r"(?:Worker|VllmWorker)((?:[ _](?:DP|PP|PCP|TP|DCP|EP)\d+)*)")
_GROUP_RE = re.compile(r"(DP|PP|PCP|TP|DCP|EP)(\d+)")
#: Ray's name for a vLLM worker actor (V0 and V1): ``(RayWorkerWrapper pid=N, ip=A.B.C.D)``.
_RAY_WORKER_RE = re.compile(r"RayWorker\w*")


class LogParseError(ValueError):
    """Input that is not a text log at all; the message names the file and line."""


class EvidenceLines(Mapping):
    """Read-only ``(source, boot, rank, column) → line`` of the room, outcome and key values.

    Kept in ``ledger.attrs["lines"]`` (rank ``-1`` for boot-level key fields, and column ``boot`` for
    the boot's first line) so that refusals can name the line; immutable, so pandas shares it between
    frames instead of deep-copying it.

    >>> EvidenceLines({("a.log", 0, 2, "outcome"): 65})[("a.log", 0, 2, "outcome")]
    65
    """

    def __init__(self, items: Iterable | Mapping = ()) -> None:
        self._lines = dict(items)

    def __getitem__(self, key: tuple) -> int:
        return self._lines[key]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    def __deepcopy__(self, memo: dict) -> EvidenceLines:
        return self


@dataclass
class _Event:
    line: int
    raw: str
    key: tuple | None
    family: str
    scope: str
    values: dict
    level: str | None


@dataclass(frozen=True)
class _Failure:
    """An OOM or error line: how bad (0 = OOM first), where, what, who printed it, and when."""

    priority: int
    line: int
    outcome: str
    text: str
    raw: str
    process: str
    after_startup: bool


@dataclass
class _Boot:
    index: int
    first_line: int
    last_line: int = 0
    config: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    names: dict = field(default_factory=lambda: defaultdict(list))
    config_printers: set = field(default_factory=set)
    flags: dict = field(default_factory=dict)
    kv_reached: bool = False
    warnings: list = field(default_factory=list)
    #: lines where Ray collapsed KV-sizing lines of several workers into one ([repeated Nx across cluster])
    ray_repeats: list = field(default_factory=list)


# --- streaming ----------------------------------------------------------------------------------


@dataclass
class ScanStats:
    """What the scan saw besides the candidate lines: total lines, a missing final newline."""

    lines: int = 0
    ended_mid_line: bool = False


def iter_candidate_lines(
    stream: IO[bytes], stats: ScanStats | None = None, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, bytes]]:
    """``(line number from 1, raw bytes)`` of every line holding one of the anchors, in order.

    Reads ``chunk_bytes`` at a time; memory stays at about two blocks however large the file.

    >>> data = io.BytesIO(b"noise\\nAvailable KV cache memory: 1.0 GiB\\nnoise\\nAvailable KV")
    >>> list(iter_candidate_lines(data))
    [(2, b'Available KV cache memory: 1.0 GiB')]
    """
    stats = stats if stats is not None else ScanStats()
    base, tail = 0, b""
    while True:
        block = stream.read(chunk_bytes)
        if not block:
            break
        first = block.find(b"\n")
        if first == -1:
            tail += block
            if len(tail) > MAX_LINE_BYTES:
                yield from _scan(tail + b"\n", base)[0]
                tail = b""
            continue
        # The line that spans the chunk boundary, then the whole lines of the block, scanned in place.
        yield from _scan(tail + block[: first + 1], base)[0]
        last = block.rfind(b"\n")
        found, newlines = _scan(memoryview(block)[first + 1 : last + 1], base + 1)
        yield from found
        base += 1 + newlines
        tail = block[last + 1 :]
    if tail:
        stats.ended_mid_line = True
        yield from _scan(tail + b"\n", base)[0]
        base += 1
    stats.lines = base


def _scan(body: bytes | memoryview, base: int) -> tuple[list[tuple[int, bytes]], int]:
    """Candidate lines of ``body`` (which ends with a newline; ``base`` newlines precede it) and
    the number of lines in it.

    Two vectorised look-ups (the byte pairs at even and at odd offsets, read in place as
    little-endian 16-bit numbers) mark every position where a signature pair of an anchor starts
    (:data:`~kvplan.io.vllm_lines.ANCHOR_PAIRS`); only lines holding such a pair are checked for
    the anchors themselves.
    """
    size = len(body)
    if size == 0:
        return [], 0
    even = np.frombuffer(body, dtype="<u2", count=size // 2)
    odd = np.frombuffer(body, dtype="<u2", offset=1, count=(size - 1) // 2)
    hits = np.concatenate((np.flatnonzero(_PAIR_TABLE[even]) * 2, np.flatnonzero(_PAIR_TABLE[odd]) * 2 + 1))
    newlines = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == 10)
    found = []
    for index in np.unique(np.searchsorted(newlines, hits)).tolist():
        start = int(newlines[index - 1]) + 1 if index else 0
        line = bytes(body[start : int(newlines[index])])
        if any(anchor in line for anchor in ANCHORS):
            found.append((base + index + 1, line))
    return found, len(newlines)


def _pair_table() -> np.ndarray:
    """Pair → is a signature, indexed by the pair read as a little-endian 16-bit number."""
    table = np.zeros(1 << 16, dtype=bool)
    for pair in ANCHOR_PAIRS:
        table[pair[1] << 8 | pair[0]] = True
    return table


_PAIR_TABLE = _pair_table()


# --- reading ------------------------------------------------------------------------------------


def read_vllm_log(
    path_or_text: str | os.PathLike | bytes | IO[bytes], source: str | None = None
) -> tuple[pd.DataFrame, dict]:
    """The ledger of one vLLM log (a path, the log text itself, bytes or a binary stream).

    Returns ``(ledger, metadata)``: the ledger has one row per boot × rank, columns in
    :data:`~kvplan.columns.LEDGER_COLUMNS` order; metadata holds ``warnings`` (each naming file
    and line), ``provenance`` (source, line, boot, rank, column, value, raw) and ``boots`` (per
    boot: version, compatibility key, lines, outcome). A path ending in ``.csv`` is a ledger CSV and is
    read by :func:`kvplan.io.ledger_csv.read_ledger_csv` into the same shape.

    >>> text = ("INFO 07-15 10:21:33 [gpu_worker.py:227] Available KV cache memory: 12.5 GiB\\n"
    ...         "INFO 07-15 10:21:34 [kv_cache_utils.py:1] GPU KV cache size: 102,400 tokens\\n"
    ...         "INFO:     Application startup complete.\\n")
    >>> ledger, meta = read_vllm_log(text)
    >>> row = ledger.iloc[0]
    >>> int(row["rank"]), int(row["available_kv_bytes"]), int(row["kv_cache_tokens"]), row["outcome"]
    (0, 13421772800, 102400, 'ok')
    """
    if isinstance(path_or_text, (bytes, bytearray)):
        return _read_stream(io.BytesIO(path_or_text), source or "<text>")
    if hasattr(path_or_text, "read"):
        return _read_stream(path_or_text, source or getattr(path_or_text, "name", "<stream>"))
    if isinstance(path_or_text, os.PathLike) or _looks_like_path(path_or_text):
        path = Path(path_or_text)
        if path.suffix.lower() == ".csv":
            return _read_ledger_csv(path, source or str(path_or_text))
        with open(path, "rb") as stream:
            return _read_stream(stream, source or str(path_or_text))
    return _read_stream(io.BytesIO(str(path_or_text).encode("utf-8")), source or "<text>")


def _looks_like_path(text: str) -> bool:
    if "\n" in text or "\r" in text:
        return False
    return os.path.exists(text) or bool(re.fullmatch(r"\S+\.(log|txt|out|err)", text))


def read_vllm_logs(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, dict]:
    """The ledgers of many logs concatenated: a list of paths, a folder (its ``*.log``), or a glob.

    ``source`` is each path as given; metadata lists are concatenated in file order. A ``.csv`` path
    (given, or matched by a glob; a folder gives its ``*.log`` only) is a ledger CSV, read by
    :func:`kvplan.io.ledger_csv.read_ledger_csv` (as :func:`read_vllm_log` reads any ``.csv`` path, so
    that an evidence bundle that copies such a file reads it back alike); an nvidia-smi snapshot given
    here is refused, pointing to ``--nvidia-smi``.
    """
    files = _expand(paths)
    if not files:
        raise FileNotFoundError(f"no log files in {paths!r} (expected paths, a folder of *.log, or a glob)")
    ledgers, metas = [], []
    for path in files:
        ledger, meta = read_vllm_log(Path(path), source=str(path))
        ledgers.append(ledger)
        metas.append(meta)
    ledger = pd.concat(ledgers, ignore_index=True) if len(ledgers) > 1 else ledgers[0]
    lines = EvidenceLines({key: line for meta in metas for key, line in meta["lines"].items()})
    ledger.attrs = {"lines": lines}
    provenance = pd.concat([m["provenance"] for m in metas], ignore_index=True)
    return ledger, {
        "warnings": [w for m in metas for w in m["warnings"]],
        "provenance": provenance,
        "boots": [b for m in metas for b in m["boots"]],
        "lines": lines,
        "files": [str(path) for path in files],
    }


def _read_ledger_csv(path: Path, source: str) -> tuple[pd.DataFrame, dict]:
    from kvplan.io.ledger_csv import read_ledger_csv  # here, as that module builds on this one

    return read_ledger_csv(path, source=source)


def _expand(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[str] = []
    for item in items:
        text = str(item)
        if os.path.isdir(text):
            files.extend(sorted(str(p) for p in Path(text).glob("*.log")))
        elif any(char in text for char in "*?[") and not os.path.exists(text):
            files.extend(sorted(globlib.glob(text)))
        else:
            files.append(text)
    return files


def _read_stream(stream: IO[bytes], source: str) -> tuple[pd.DataFrame, dict]:
    reader = _Reader(source)
    stats = ScanStats()
    first = stream.read(8192)
    # CR-only line ends (classic Mac, `tr '\n' '\r'`): a first block with \r but no \n. Then every \r
    # ends a line, so that file:line counts as an editor would; elsewhere \r stays a progress update.
    cr_only = b"\r" in first and b"\n" not in first
    end = b"\r" if cr_only else b"\n"
    if b"\x00" in first:
        line = first[: first.index(b"\x00")].count(end) + 1
        raise LogParseError(f"{source}: line {line}: NUL byte: not a text log (compressed or binary?)")
    for number, raw in iter_candidate_lines(_Prepend(first, stream, cr_only), stats):
        reader.line(number, raw.decode("utf-8", "replace"))
    if stats.ended_mid_line:
        reader.warnings.append(f"{source}:{stats.lines}: the file ends mid-line (the log was cut off)")
    return reader.finish(stats.lines)


class _Prepend:
    """A binary stream with ``head`` put back in front (what the NUL check read); with ``cr_only``,
    every ``\r`` read as ``\n``."""

    def __init__(self, head: bytes, stream: IO[bytes], cr_only: bool = False) -> None:
        self.head, self.stream, self.cr_only = head, stream, cr_only

    def read(self, size: int) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            block = head + self.stream.read(max(0, size - len(head)))
        else:
            block = self.stream.read(size)
        return block.replace(b"\r", b"\n") if self.cr_only else block


class _Reader:
    """Turns candidate lines into boots, and boots into ledger rows."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.boot = _Boot(0, 1)
        self.rows: list[dict] = []
        self.provenance: list[tuple] = []
        self.warnings: list[str] = []
        self.boots: list[dict] = []

    def line(self, number: int, text: str) -> None:
        for record in split_records(text):
            for fact in read_message(record.message):
                self._fact(number, text, record, fact)

    def _fact(self, number: int, raw: str, record: Record, fact) -> None:
        key = None if record.pid is None else (record.pid, record.ip)
        if fact.scope == "config":
            self._maybe_new_boot(number, fact.family, key)
        boot = self.boot
        boot.last_line = number
        if record.repeated:
            boot.warnings.append(
                f"{self.source}:{number}: Ray collapsed {record.repeated} similar lines from other workers "
                "into this one ([repeated Nx across cluster]); their values are lost. Set RAY_DEDUP_LOGS=0."
            )
        if key is not None and record.process not in boot.names[key]:
            boot.names[key].append(record.process)
        if fact.scope == "config":
            if fact.family == "engine_config":
                boot.config_printers.add(key)
                boot.flags.setdefault("v1", fact.values.get("_v1"))
            self._config(number, raw, fact.family, fact.values)
            return
        if fact.scope == "outcome" and record.level in ("DEBUG", "INFO", "WARNING"):
            return
        if fact.scope == "flag":
            for name, value in fact.values.items():
                boot.flags.setdefault(name, (value, number))
            return
        if fact.scope in ("rank", "engine", "outcome") and _sizes_kv(fact):
            boot.kv_reached = True
            if record.repeated and fact.scope == "rank":
                boot.ray_repeats.append(number)
        boot.events.append(_Event(number, raw, key, fact.family, fact.scope, fact.values, record.level))

    def _maybe_new_boot(self, number: int, family: str, key: tuple | None) -> None:
        boot = self.boot
        seen = {name for name, (_v, _l, _r, origin) in boot.config.items() if origin == family}
        if family == "version":
            start = bool(boot.events) or bool(boot.config_printers) or "vllm_version" in seen
        elif family in ("non_default_args", "namespace_args"):
            start = bool(boot.events) or bool(boot.config_printers) or bool(seen)
        elif family == "engine_config":
            start = boot.kv_reached or "startup_done" in boot.flags or key in boot.config_printers
        else:
            start = False
        if start:
            self._close()
            self.boot = _Boot(boot.index + 1, number)

    def _config(self, number: int, raw: str, family: str, values: dict) -> None:
        config = self.boot.config
        for name, value in values.items():
            column = CONFIG_NAMES.get(name)
            if column is None:
                continue
            priority = CONFIG_PRIORITY[family]
            if column not in config or CONFIG_PRIORITY[config[column][3]] > priority:
                config[column] = (_config_value(column, value), number, raw, family)

    def _close(self) -> None:
        boot = self.boot
        if not boot.events and not boot.config:
            return
        rows, provenance, warnings, info = _resolve(boot, self.source)
        self.rows.extend(rows)
        self.provenance.extend(provenance)
        self.warnings.extend(warnings)
        self.boots.append(info)

    def finish(self, total_lines: int) -> tuple[pd.DataFrame, dict]:
        self._close()
        ledger = ledger_frame(self.rows)
        provenance = pd.DataFrame(self.provenance, columns=PROVENANCE_COLUMNS)
        for column in ("line", "boot", "rank"):
            provenance[column] = provenance[column].astype("Int64")
        lines = EvidenceLines(
            [
                *(
                    ((self.source, row[2], -1 if row[3] is pd.NA else row[3], row[4]), row[1])
                    for row in self.provenance
                    if row[4] in ("room_bytes", "outcome") or row[4] in KEY_COLUMNS
                ),
                *(((self.source, info["boot"], -1, "boot"), info["first_line"]) for info in self.boots),
            ]
        )
        ledger.attrs = {"lines": lines}
        return ledger, {
            "warnings": self.warnings,
            "provenance": provenance,
            "boots": self.boots,
            "lines": lines,
            "total_lines": total_lines,
        }


def _sizes_kv(fact) -> bool:
    return fact.scope == "outcome" or any(name in KV_SIZED_COLUMNS for name in fact.values)


def _config_value(column: str, value: object) -> object:
    if value is None or (isinstance(value, str) and value in ("None", "")):
        return pd.NA
    if column in ("max_model_len", "block_size") or column.endswith("_parallel_size"):
        try:
            return int(value)
        except (TypeError, ValueError):
            return pd.NA
    if column == "gpu_memory_utilization":
        try:
            return float(value)
        except (TypeError, ValueError):
            return pd.NA
    if column == "enforce_eager":
        return value if isinstance(value, bool) else str(value) == "True"
    return str(value)


# --- one boot → rows ----------------------------------------------------------------------------


def _resolve(boot: _Boot, source: str) -> tuple[list[dict], list[tuple], list[str], dict]:
    """Attribute a boot's events to ranks and compute each rank's row."""
    warnings = list(boot.warnings)
    provenance: list[tuple] = []
    key, key_origin = _boot_key(boot)
    version = version_tuple(key.get("vllm_version"))
    ranks_of = _attribute(boot, key, version, source, warnings)
    rows: dict[int, dict] = {}
    origin: dict[tuple[int, str], tuple[int, str]] = {}

    def row(rank: int) -> dict:
        if rank not in rows:
            rows[rank] = {"rank": rank}
        return rows[rank]

    printed = {event.key for event in boot.events if event.scope in ("rank", "assign", "outcome")}
    for process_key, info in ranks_of.items():
        if info.get("rank") is not None and process_key in printed:
            target = row(info["rank"])
            for name in ("tp_rank", "pp_rank", "dp_rank", "process", "pid"):
                if info.get(name) is not None:
                    target[name] = info[name]
    unattributed, failures, serving_failures, engine_values = _sort_events(boot, ranks_of, row, origin)
    if unattributed:
        warnings.append(
            f"{source}:{unattributed[0]}: {len(unattributed)} line(s) with per-rank values carry no process "
            "prefix that names a rank; they are left out of the ledger (first shown)"
        )
    if serving_failures:
        warnings.append(
            f"{source}:{serving_failures[0]}: out-of-memory or error after startup completed "
            f"({len(serving_failures)} line(s)): the boot is marked oom/error, so no budget or gate "
            "passes on it; the value may be too high for live traffic"
        )
    _attach_engine_values(engine_values, rows, key, origin, source, warnings, row)
    if not rows and (failures or boot.events):
        single = (_size(key, "tensor_parallel_size") or 1) * (_size(key, "pipeline_parallel_size") or 1)
        if single == 1 and not unattributed:
            row(0)
    flags = _boot_flags(boot, key, version)
    flags["startup_done"] = _startup_done(boot, rows, key)
    for rank, values in rows.items():
        _fill_row(values, rank, key, boot, source, failures, flags, origin, warnings)
    _boot_warnings(rows, key, flags, source, boot, origin, warnings)
    records = []
    for rank in sorted(rows):
        values = rows[rank]
        values.update(source=source, boot=boot.index)
        for column, value in key.items():
            values.setdefault(column, value)
        records.append(values)
    for (rank, column), (line, raw) in origin.items():
        if rank in rows and column in LEDGER_COLUMNS:
            provenance.append((source, line, boot.index, rank, column, rows[rank].get(column), raw))
    for column, (line, raw) in key_origin.items():
        provenance.append((source, line, boot.index, pd.NA, column, key[column], raw))
    provenance.sort(key=lambda item: (item[1] if isinstance(item[1], int) else -1, str(item[3]), item[4]))
    info = {
        "source": source,
        "boot": boot.index,
        "first_line": boot.first_line,
        "last_line": boot.last_line,
        "vllm_version": key.get("vllm_version"),
        "compatibility_key": dict(key),
        "ranks": sorted(rows),
        "outcomes": {rank: rows[rank].get("outcome") for rank in sorted(rows)},
    }
    return records, provenance, warnings, info


def _sort_events(boot: _Boot, ranks_of: dict, row, origin: dict) -> tuple[list, dict, list, dict]:
    """Put each event where it belongs: a rank's row, an engine's values, a failure, or nowhere.

    Returns the lines of unattributed per-rank values, the worst failure per rank (None: engine
    or API server; OOM first, then the earliest), the lines of failures after startup completed, and
    engine values by DP rank. A rank's last startup line of an old release marks it ``_done``.
    """
    done_line = boot.flags.get("startup_done", (None, None))[1]
    unattributed: list[int] = []
    failures: dict[int | None, _Failure] = {}
    serving_failures: list[int] = []
    engine_values: dict[int | None, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for event in boot.events:
        info = ranks_of.get(event.key, {})
        rank = info.get("rank")
        if event.scope == "outcome":
            after = done_line is not None and event.line > done_line
            if after:
                serving_failures.append(event.line)
            outcome = event.values["outcome"]
            failure = _Failure(
                {"oom": 0}.get(outcome, 2 if event.family == "error_exception" else 1),
                event.line,
                outcome,
                event.values["text"],
                event.raw,
                info.get("process") or "a process without prefix",
                after,
            )
            if rank not in failures or failures[rank].priority > failure.priority:
                failures[rank] = failure
            continue
        if event.scope == "engine" or (event.scope == "rank" and info.get("engine") and rank is None):
            if event.scope == "rank":
                unattributed.append(event.line)
                continue
            for name, value in event.values.items():
                engine_values[info.get("engine_dp")][name].append((value, event))
            continue
        if event.scope != "rank":
            continue
        if rank is None:
            unattributed.append(event.line)
            continue
        target = row(rank)
        if event.family in OLD_LAST_LINE_FAMILIES:
            target["_done"] = True
        for name, value in event.values.items():
            if name == "gpu_memory_utilization":
                continue
            target[name] = value
            origin[(rank, name)] = (event.line, event.raw)
    return unattributed, failures, serving_failures, engine_values


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def _boot_key(boot: _Boot) -> tuple[dict, dict]:
    """The boot's compatibility key and, per field, the line it came from (defaults: no line)."""
    key: dict = {column: pd.NA for column in KEY_COLUMNS}
    origin: dict = {}
    for column, (value, line, raw, _family) in boot.config.items():
        if column in key:
            key[column], origin[column] = value, (line, raw)
    for event in boot.events:
        for name in ("gpu_memory_utilization", "max_model_len"):
            if name in event.values and _missing(key[name]):
                key[name], origin[name] = event.values[name], (event.line, event.raw)
    version = version_tuple(key["vllm_version"])
    if version is not None:
        defaults = {"gpu_memory_utilization": 0.92 if version >= (0, 20) else 0.9, "block_size": 16}
        for name, value in defaults.items():
            if _missing(key[name]):
                key[name], origin[name] = value, (pd.NA, f"default of vLLM {key['vllm_version']}")
    if boot.config_printers:
        for name in ("pipeline_parallel_size", "data_parallel_size"):
            if _missing(key[name]):
                key[name], origin[name] = 1, (pd.NA, "not in the engine config: 1")
    if any(family == "non_default_args" for *_rest, family in boot.config.values()):
        # 'non-default args' lists what differs from the defaults: a size it does not list is 1
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if _missing(key[name]):
                key[name], origin[name] = 1, (pd.NA, "not in the non-default args: 1")
    return key, origin


def _size(key: dict, name: str) -> int | None:
    value = key.get(name)
    return None if _missing(value) else int(value)


def _rank_from_name(name: str, key: dict) -> dict:
    """Rank and group ranks from a process prefix name (``Worker_PP1_TP0``, ``VllmWorker rank=2``)."""
    match = re.fullmatch(r"VllmWorker rank=(\d+)", name)
    if match:
        return {"rank": int(match.group(1))}
    match = _WORKER_RE.fullmatch(name)
    if (
        match is None
        or name in ("Worker",)
        or (
            name == "VllmWorker"
            and (_size(key, "tensor_parallel_size") or 1) * (_size(key, "pipeline_parallel_size") or 1) != 1
        )
    ):
        return {}
    groups = {group: int(index) for group, index in _GROUP_RE.findall(match.group(1))}
    tp, pp, dp = groups.get("TP", 0), groups.get("PP", 0), groups.get("DP", 0)
    pcp = groups.get("PCP", 0)
    tp_size, pp_size = _size(key, "tensor_parallel_size"), _size(key, "pipeline_parallel_size")
    info = {"tp_rank": tp, "pp_rank": pp, "dp_rank": dp}
    if pp == pcp == dp == 0:
        info["rank"] = tp
    elif tp_size is not None and (pcp == 0 or "PCP" in groups) and (dp == 0 or pp_size is not None):
        pcp_size = 1 if pcp == 0 else None
        if pcp_size is not None:
            info["rank"] = tp + tp_size * (pp + (pp_size or 1) * dp)
    return info


def _attribute(boot: _Boot, key: dict, version: tuple | None, source: str, warnings: list) -> dict:
    """Process identity ``(pid, ip)`` (None: no prefix) → rank, group ranks, roles."""
    world = world_size(key)
    tp_pp = None
    if _size(key, "tensor_parallel_size") is not None and _size(key, "pipeline_parallel_size") is not None:
        tp_pp = _size(key, "tensor_parallel_size") * _size(key, "pipeline_parallel_size")
    assigned: dict = {}
    for event in boot.events:
        if event.scope == "assign" and event.key is not None:
            assigned[event.key] = event.values
    all_names = {name for names in boot.names.values() for name in names}
    v0 = (
        boot.flags.get("v1") is False
        or "VllmWorkerProcess" in all_names
        or (boot.flags.get("v1") is None and version is not None and version < (0, 8))
    )
    info: dict = {}
    for process_key, names in boot.names.items():
        item: dict = {"pid": process_key[0], "process": _best_name(names)}
        for name in names:
            if _FRONTEND_RE.fullmatch(name):
                item["frontend"] = True
            engine = _ENGINE_RE.fullmatch(name)
            if engine:
                item["engine"] = True
                index = engine.group(1) or engine.group(2)
                item["engine_dp"] = int(index) if index is not None else None
            for name_key, value in _rank_from_name(name, key).items():
                item.setdefault(name_key, value)
        if process_key in assigned:
            values = assigned[process_key]
            item.update({k: values[k] for k in ("rank", "tp_rank", "pp_rank", "dp_rank") if k in values})
        info[process_key] = item
    has_workers = any(item.get("rank") is not None for item in info.values())
    for item in info.values():
        if (
            item.get("engine")
            and item.get("rank") is None
            and (tp_pp == 1 or (tp_pp is None and not has_workers))
        ):
            item["rank"] = item["dp_rank"] = item.get("engine_dp") or 0
    _v0_workers(info, boot, world, source, warnings)
    has_workers = _ray_workers(info, boot, world, 1 if v0 else 0, source, warnings) or has_workers
    info[None] = {"engine": True, "engine_dp": None}
    if v0 or (not has_workers and (world is None or world == 1)):
        info[None].update(rank=0, tp_rank=0, pp_rank=0, dp_rank=0)
    used: dict[int, tuple] = {}
    printed = {event.key for event in boot.events if event.scope in ("rank", "assign", "outcome")}
    for process_key, item in info.items():
        rank = item.get("rank")
        if rank is None or process_key not in printed:
            continue
        line = _first_line(boot, process_key)
        if world is not None and rank >= world:
            warnings.append(
                f"{source}:{line}: process {item.get('process') or '(no prefix)'} claims rank {rank} "
                f"but the world size is {world}; its lines are left out"
            )
            item["rank"] = None
        elif rank in used:
            warnings.append(
                f"{source}:{line}: two processes claim rank {rank} in one boot "
                f"(pids {used[rank][0]} and {process_key[0] if process_key else 'none'}); "
                "the second one's lines are left out"
            )
            item["rank"] = None
        else:
            used[rank] = process_key or (None,)
    return info


def _v0_workers(info: dict, boot: _Boot, world: int | None, source: str, warnings: list) -> None:
    """V0 ``VllmWorkerProcess`` workers without a rank line: ranks 1.. in pid order (spawn order)."""
    pending = sorted(
        k for k, item in info.items() if item.get("rank") is None and "VllmWorkerProcess" in boot.names[k]
    )
    if not pending:
        return
    taken = {item.get("rank") for item in info.values()}
    limit = world if world is not None else len(pending) + 1
    free = [rank for rank in range(1, limit) if rank not in taken]
    for process_key, rank in zip(pending, free):
        info[process_key]["rank"] = rank
    if len(pending) > 1:
        warnings.append(
            f"{source}:{_first_line(boot, pending[0])}: vLLM V0 does not log which rank a "
            f"VllmWorkerProcess is; ranks {free[: len(pending)]} were given to pids "
            f"{[k[0] for k in pending]} in pid (spawn) order. "
            "VLLM_LOGGING_LEVEL=DEBUG logs 'world_size=… rank=…' per worker."
        )


def _ray_workers(info: dict, boot: _Boot, world: int | None, first: int, source: str, warnings: list) -> bool:
    """Ray workers without a rank line: the free ranks from ``first`` (1 under V0, whose driver
    without prefix is rank 0) in order of first appearance, as vLLM logs no rank for them.

    True when a Ray worker was given a rank here."""
    pending = [
        k
        for k, item in info.items()  # in order of first appearance (boot.names is filled line by line)
        if item.get("rank") is None
        and not item.get("engine")
        and any(_RAY_WORKER_RE.fullmatch(name) for name in boot.names[k])
    ]
    if not pending:
        return False
    taken = {item.get("rank") for item in info.values()}
    limit = world if world is not None else len(pending) + first
    free = [rank for rank in range(first, limit) if rank not in taken]
    for process_key, rank in zip(pending, free):
        info[process_key]["rank"] = rank
    if len(pending) > 1 or len(free) > 1:
        given = ", ".join(f"pid {key[0]} → rank {rank}" for key, rank in zip(pending, free))
        warnings.append(
            f"{source}:{_first_line(boot, pending[0])}: no 'rank R in world size W is assigned as …' or "
            f"'world_size=… rank=…' line ties the Ray workers to ranks, so their rank numbers are by order "
            f"of first appearance ({given}), not vLLM's own rank: the per-rank table may name ranks "
            "differently, while the uniform budget (a minimum over all ranks) is unaffected. "
            "VLLM_LOGGING_LEVEL=DEBUG logs 'world_size=… rank=…' per worker."
        )
    return bool(free)


def _best_name(names: list[str]) -> str:
    specific = [name for name in names if _GROUP_RE.search(name) or "rank=" in name or "_DP" in name]
    return (specific or names)[-1]


def _first_line(boot: _Boot, process_key: tuple | None) -> int:
    return next((event.line for event in boot.events if event.key == process_key), boot.first_line)


def _attach_engine_values(
    engine_values: dict, rows: dict, key: dict, origin: dict, source: str, warnings: list, row
) -> None:
    """Engine-level values onto ranks: one line per worker in rank order (0.9–0.11.0), else to all."""
    tp_pp = (_size(key, "tensor_parallel_size") or 1) * (_size(key, "pipeline_parallel_size") or 1)
    for dp, columns in engine_values.items():
        targets = sorted(
            rank for rank, values in rows.items() if dp is None or values.get("dp_rank", rank // tp_pp) == dp
        )
        if not targets and tp_pp == 1 and (dp is None or _size(key, "tensor_parallel_size") is not None):
            row(dp or 0)
            targets = [dp or 0]
        for column, pairs in columns.items():
            if column not in ENGINE_COLUMNS:
                continue
            if len(pairs) == len(targets) > 1:
                assignment = list(zip(targets, pairs))
            else:
                chosen = min(pairs, key=lambda pair: pair[0])
                if len({value for value, _event in pairs}) > 1:
                    warnings.append(
                        f"{source}:{chosen[1].line}: {len(pairs)} different '{column}' lines for "
                        f"{len(targets)} rank(s); the lowest is kept for every rank"
                    )
                assignment = [(rank, chosen) for rank in targets]
            for rank, (value, event) in assignment:
                rows[rank][column] = value
                origin[(rank, column)] = (event.line, event.raw)


def _startup_done(boot: _Boot, rows: dict, key: dict) -> bool:
    """Whether the boot got through startup, for all its ranks at once: its completion line, or
    (old releases that may print none) the last startup line of every rank of the world.
    """
    ranks = range(max(world_size(key) or 0, len(rows), 1))
    return "startup_done" in boot.flags or all(rows.get(rank, {}).get("_done") for rank in ranks)


def _boot_flags(boot: _Boot, key: dict, version: tuple | None) -> dict:
    """Whether vLLM subtracted a CUDA-graph estimate before sizing KV, and whether graphs were off."""
    if "estimate_applied" in boot.flags:
        applied = bool(boot.flags["estimate_applied"][0])
    else:
        applied = version is not None and version >= (0, 20)
    return {"estimate_applied": applied, "eager": key.get("enforce_eager") is True, "version": version}


def _fill_row(
    values: dict,
    rank: int,
    key: dict,
    boot: _Boot,
    source: str,
    failures: dict,
    flags: dict,
    origin: dict,
    warnings: list,
) -> None:
    tp_size, pp_size = _size(key, "tensor_parallel_size"), _size(key, "pipeline_parallel_size")
    if tp_size is not None and pp_size is not None:
        values.setdefault("tp_rank", rank % tp_size)
        values.setdefault("pp_rank", rank // tp_size % pp_size)
        values.setdefault("dp_rank", rank // (tp_size * pp_size))
    failure, engine = failures.get(rank), failures.get(None)
    # a Ray worker whose KV lines Ray collapsed into another worker's [repeated Nx across cluster] line
    # sized its KV cache like the rest: its outcome is the boot's, with no room of its own
    collapsed = bool(boot.ray_repeats) and bool(_RAY_WORKER_RE.fullmatch(str(values.get("process") or "")))
    sized = collapsed or any(values.get(column) is not None for column in KV_SIZED_COLUMNS)
    if failure is not None:
        text = failure.text
        if failure.after_startup:
            text = f"after startup completed, at {source}:{failure.line}: {text}"
        values.update(outcome=failure.outcome, error=text)
        origin[(rank, "outcome")] = (failure.line, failure.raw)
    elif engine is not None:
        # the engine or API server failed; this rank logged no failure of its own
        phase = " after startup completed" if engine.after_startup else ""
        values.update(
            outcome="error",
            error=f"not this rank's own failure: {engine.process} failed{phase}, at {source}:{engine.line}: "
            f"{engine.text}",
        )
        origin[(rank, "outcome")] = (engine.line, engine.raw)
    elif not sized:
        values.update(
            outcome="incomplete",
            error=f"the log stops before the KV cache was sized (last line read: {boot.last_line})",
        )
        origin[(rank, "outcome")] = (boot.last_line, "")
    elif flags["startup_done"]:
        values["outcome"] = "ok"
    else:
        values.update(
            outcome="incomplete",
            error="the log stops after the KV cache was sized but before startup completed: no "
            "'init engine … took' or 'Application startup complete' line "
            f"(last line read: {boot.last_line})",
        )
        origin[(rank, "outcome")] = (boot.last_line, "")
    room = room_evidence(values, rank, flags, origin, source, warnings)
    if room is not None:
        values["room_bytes"], values["room_source"], line_raw = room
        origin[(rank, "room_bytes")] = line_raw


def room_evidence(
    values: dict, rank: int, flags: dict, origin: dict, source: str, warnings: list
) -> tuple[int, str, tuple] | None:
    """``(room_bytes, room_source, (line, raw))`` for one rank, best evidence first."""
    if values.get("suggested_full_bytes") is not None:
        return values["suggested_full_bytes"], "suggestion", origin[(rank, "suggested_full_bytes")]
    graph, estimate = values.get("cuda_graph_bytes"), values.get("cuda_graph_estimate_bytes")
    if values.get("available_kv_bytes") is not None:
        if flags["estimate_applied"]:
            correction = max(0, graph - estimate) if graph is not None and estimate is not None else 0
        elif flags["eager"]:
            correction = 0
        else:
            correction = None if graph is None else max(0, graph)
        if correction is not None:
            return (
                values["available_kv_bytes"] - correction,
                "available_kv",
                origin[(rank, "available_kv_bytes")],
            )
        line = origin[(rank, "available_kv_bytes")][0]
        if values.get("outcome") in ("ok", "incomplete"):
            warnings.append(
                f"{source}:{line}: rank {rank}: 'Available KV cache memory' is not used as room: "
                "CUDA graphs are captured after it and the log shows no 'Graph capturing finished … "
                "took X GiB' for this rank"
            )
    parts = [
        values.get(name)
        for name in ("init_free_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes")
    ]
    graph_bytes = graph if graph is not None else estimate
    if graph_bytes is None and flags["eager"]:
        graph_bytes = 0
    if None in parts or graph_bytes is None:
        return None
    init_free, weights, activation, non_torch = parts
    room = init_free - (weights + activation + non_torch + max(0, graph_bytes)) - SUGGESTION_BUFFER_BYTES
    return room, "parts", origin[(rank, "init_free_bytes")]


def _boot_warnings(
    rows: dict, key: dict, flags: dict, source: str, boot: _Boot, origin: dict, warnings: list
) -> None:
    version = flags["version"]
    sources = {rank: values.get("room_source") for rank, values in rows.items()}
    known = {rank: src for rank, src in sources.items() if src is not None}
    first = boot.first_line
    if len(set(known.values())) > 1:
        listing = ", ".join(f"rank {rank}: {src}" for rank, src in sorted(known.items()))
        warnings.append(
            f"{source}:{first}: boot {boot.index}: room comes from different evidence per rank "
            f"({listing}); compare with care"
        )
    world = world_size(key) or len(rows)
    lacking = [rank for rank in range(max(world, len(rows))) if rank not in known]
    if lacking and boot.ray_repeats:
        warnings.append(
            f"{source}:{boot.ray_repeats[0]}: boot {boot.index}: rank(s) "
            f"{', '.join(str(rank) for rank in lacking)} show no room of their own: Ray deduplicated their "
            "lines into other workers' '[repeated Nx across cluster]' lines (each value shown stays on the "
            "pid that printed it). Rerun with RAY_DEDUP_LOGS=0 for per-rank numbers."
        )
    elif known and lacking and set(known.values()) == {"available_kv"}:
        line = origin.get((min(known), "room_bytes"), (first,))[0]
        warnings.append(
            f"{source}:{line}: boot {boot.index}: this log shows the room of rank(s) "
            f"{', '.join(str(rank) for rank in sorted(known))} only; rank(s) "
            f"{', '.join(str(rank) for rank in lacking)} show none. {rank0_only_advice(version, False)}."
        )
    double = version is not None and ((0, 18) <= version < (0, 19) or version >= (0, 27))
    if (
        double
        and flags["estimate_applied"]
        and any(
            values.get("room_source") == "suggestion" and (values.get("cuda_graph_bytes") or 0) > 0
            for values in rows.values()
        )
    ):
        warnings.append(
            f"{source}:{first}: boot {boot.index}: vLLM {key['vllm_version']} counts CUDA-graph memory "
            "twice in "
            "its --kv-cache-memory suggestion (vllm#57936): the room shown is lower than the GPU really has "
            "(conservative)"
        )


def ledger_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows → ledger with the glossary's columns, order and nullable dtypes."""
    data = {}
    for column in LEDGER_COLUMNS:
        values = [None if _missing(row.get(column)) else row.get(column) for row in rows]
        if column in INT_COLUMNS:
            data[column] = pd.array(values, dtype="Int64")
        elif column in FLOAT_COLUMNS:
            data[column] = pd.array(values, dtype="Float64")
        elif column in BOOL_COLUMNS:
            data[column] = pd.array(values, dtype="boolean")
        else:
            data[column] = pd.array([None if v is None else str(v) for v in values], dtype="string")
    return pd.DataFrame(data, columns=LEDGER_COLUMNS)
