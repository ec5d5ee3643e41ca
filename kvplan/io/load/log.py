"""Read a vLLM server log under load (``vllm-load-formats.md``): V0/V1 stats messages, V0's preemption
warning, an event per run of ERROR records (``oom``: ``CUDA out of memory``), restarts, gaps; records from
:mod:`.records`, runs of default V1 stats lines through the sealed engine :mod:`.engine`."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

import kvplan.io.load.engine as whole_lines
from kvplan.io.load.engine import V1_PREEMPTIONS_FIELD_FROM_LINENO
from kvplan.io.load.frame import (
    MICROSECOND,
    LoadFormatError,
    LoadReading,
    LoadSource,
    RowBuilder,
    bounded_lines,
    percent,
    reading_of,
)
from kvplan.io.load.records import WRAP_WIDTH, RecordReader, StatsRecord, log_time_shift, utc_offset_hours
from kvplan.notes import Note

IDLE_GAP_FACTOR = 3  # a gap longer than this many usual intervals is reported

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_STATS = re.compile(r"\bRunning: \d+ reqs")
_ENGINE = re.compile(r"^Engine (\d+): ")
#: each field of a stats message: the first match of its pattern (V0's ``Pending`` is ``waiting``; the first
#: ``<DEVICE> KV cache usage`` is the device's, V0's ``CPU`` one is swap)
_FIELDS = {
    "prompt_tokens_per_s": re.compile(rf"Avg prompt throughput: {_NUMBER} tokens/s"),
    "generation_tokens_per_s": re.compile(rf"Avg generation throughput: {_NUMBER} tokens/s"),
    "running": re.compile(r"Running: (\d+) reqs"),
    "waiting": re.compile(r"(?:Waiting|Pending): (\d+) reqs"),
    "swapped": re.compile(r"Swapped: (\d+) reqs"),
    "preemptions": re.compile(r"Preemptions: (\d+)"),
    "kv_cache_usage_pct": re.compile(rf"(?:^|, |reqs |: )[A-Z]+ KV cache usage: {_NUMBER}%"),
    "prefix_cache_hit_pct": re.compile(rf"(?:^|, )Prefix cache hit rate: {_NUMBER}%"),
}
_INT_FIELDS = {"running", "waiting", "swapped", "preemptions"}
_AGGREGATED = re.compile(r"^\d+ Engines Aggregated: ")
_V1_LATE_MARKERS = ("Preemptions:", "Deferred:", "KV fetch:")
_V0_PREFIX_LINE = re.compile(rf"^Prefix cache hit rate: GPU: {_NUMBER}%, CPU: {_NUMBER}%")
_PREEMPTED = re.compile(
    r"is preempted by PreemptionMode\.\w+ mode because there is not enough KV cache space"
)
_PREEMPTION_TOTAL = re.compile(r"total_(?:num_cumulative_preemption|cumulative_preemption_cnt)=(\d+)")
_DUMP = {
    "running": re.compile(r"SchedulerStats\(.*?\bnum_running_reqs=(\d+)"),
    "waiting": re.compile(r"SchedulerStats\(.*?\bnum_waiting_reqs=(\d+)"),
    "kv_cache_usage_pct": re.compile(r"SchedulerStats\(.*?\bkv_cache_usage=([\d.e+-]+)"),
}
_SERVER_START = re.compile(r"vLLM API server version |Initializing an? (?:V1 )?LLM engine")
_FACTS = {  # what a file says about its server: the literal that must be there, the pattern of its value
    "kv_tokens": ("GPU KV cache size: ", re.compile(r"GPU KV cache size: ([\d,]+) tokens")),
    "manual_bytes": ("'kv_cache_memory_bytes': ", re.compile(r"'kv_cache_memory_bytes': (\d+)")),
}


def parse_stats_message(message: str) -> dict | None:
    """The row's fields one stats message states, ``engine`` and ``form`` (``v0``/``v1``); ``None`` if none.

    >>> parse_stats_message("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 210.3 tokens/s, "
    ...     "Running: 12 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 97.1%, "
    ...     "CPU KV cache usage: 0.0%.")
    {'form': 'v0', 'engine': None, 'prompt_tokens_per_s': 0.0, 'generation_tokens_per_s': 210.3, 'running': 12, 'waiting': 4, 'swapped': 0, 'kv_cache_usage_pct': 97.1}
    """
    if not _STATS.search(message) or "SchedulerStats(" in message:
        return None
    fields: dict = {"form": "v0" if "Pending:" in message or "Swapped:" in message else "v1"}
    engine = _ENGINE.match(message)
    fields["engine"] = int(engine.group(1)) if engine else None
    for key, pattern in _FIELDS.items():
        match = pattern.search(message)
        if match:
            fields[key] = int(match.group(1)) if key in _INT_FIELDS else float(match.group(1))
    return fields


class StatsLog:
    """What one pass over a log's records gathered: the rows (the last one still open), counters, facts."""

    def __init__(self, source: str, shift: timedelta) -> None:
        self.source, self.shift = source, shift
        self.shift_micros = shift // MICROSECOND
        self.rows = RowBuilder()
        self.code = self.rows.source_code(source)
        self.last: dict | None = None  # the newest row, still open for its companion lines
        self.last_form: str | None = None
        self.restarts = self.rows_at_start = 0
        self.late_v1 = False
        self.pending_v1: array = array("q")  # V1 rows without "Preemptions" while late_v1 was unknown
        self.forms: set[str] = set()
        self.kv_tokens: set[int] = set()
        self.manual_bytes: set[int] = set()
        self.stamped: set[int] = set()  # UTC offsets [min] from docker stamps
        self.yearless = False
        self.last_preemption: tuple[int, int | None] | None = None
        self.warnings: list[str] = []

    def count(self) -> int:
        return len(self.rows) + (self.last is not None)

    def add(self, record: StatsRecord, form: str | None = None, **values) -> dict:
        """Open a new row from ``record`` (its time shifted to UTC when the offset is given)."""
        self.close()
        time = record.time + self.shift if record.time is not None and self.shift else record.time
        row = {"engine": record.engine_prefix, "restarts": self.restarts, "year_known": record.year_known}
        row.update(values, source=self.source, line=record.line, time=time)
        if values.get("event") is not None:
            row["raw"] = record.message
        self.last, self.last_form = row, form
        return row

    def close(self) -> None:
        if self.last is not None:
            self.rows.add(self.last)
            self.last = None


def parse_stats_text(
    text: str,
    source: str,
    year: int | None = None,
    wrap_width: int = WRAP_WIDTH,
    utc_offset: float | None = None,
) -> LoadReading:
    """The reading of one server log's text: ``year`` anchors vLLM's yearless stamps (else an outer stamp's,
    else ``year_known=False``); ``utc_offset`` [h] makes times UTC (else agreeing docker stamps do).

    >>> parse_stats_text("2026-11-29T17:00:10Z INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Running: 4 "
    ...     "reqs, Waiting: 0 reqs, GPU KV cache usage: 5.2%", "docker.log").records()[0]["time"]  # UTC-7
    '2026-11-29T17:00:10'
    """
    return parse_stats_lines(
        text.split("\n"), source, year=year, wrap_width=wrap_width, utc_offset=utc_offset
    )


def read_vllm_stats(
    path: str | Path, year: int | None = None, utc_offset: float | None = None
) -> LoadReading:
    """The reading of one server log file, read as a stream (``source``: the path as given)."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        return parse_stats_lines(bounded_lines(lines, str(path)), str(path), year=year, utc_offset=utc_offset)


def parse_stats_lines(
    lines: Iterable[str],
    source: str,
    year: int | None = None,
    wrap_width: int = WRAP_WIDTH,
    utc_offset: float | None = None,
) -> LoadReading:
    """The reading of one server log's lines, in one pass (see :func:`parse_stats_text`)."""
    log = StatsLog(source, log_time_shift(utc_offset))
    reader = RecordReader(year, wrap_width, source)
    reader.read(
        lines,
        whole_lines.V1_STATS_LINE,  # the sealed engine's lines (tests switch it off to compare)
        lambda *run: whole_lines.take_stats_lines(log, *run),
        lambda line: _read_records(log, reader.push(line)),
        log.shift_micros,
    )
    _read_records(log, reader.finish())
    log.close()
    if not log.rows and not log.kv_tokens:
        raise LoadFormatError(
            f"{source}: no vLLM stats line ('… Running: N reqs …'), preemption warning, OOM or error line "
            "found; expected a vLLM server log or a saved /metrics snapshot"
        )
    frame = log.rows.frame()
    if log.late_v1:
        frame.loc[np.asarray(log.pending_v1, dtype=np.int64), "preemptions"] = 0
    warnings: list[str] = []
    offset = utc_offset_hours(source, log.stamped, utc_offset, warnings)
    if utc_offset is None and offset is not None:
        frame["time"] += log_time_shift(offset)
    warnings += log.warnings + _warnings(log, frame)
    if frame.empty:
        warnings.append(
            f"{source}: startup lines only, no stats line, preemption or OOM line "
            "(idle intervals are logged at DEBUG)"
        )
    if len(log.kv_tokens) > 1:
        warnings.append(
            f"{source}: several 'GPU KV cache size' values {sorted(log.kv_tokens)}; capacity left unknown"
        )
    facts = LoadSource(
        source,
        "log",
        kv_cache_tokens=next(iter(log.kv_tokens)) if len(log.kv_tokens) == 1 else None,
        kv_cache_memory_bytes=next(iter(log.manual_bytes)) if len(log.manual_bytes) == 1 else None,
        reports_preemptions="v0" in log.forms or ("v1" in log.forms and log.late_v1),
        utc_offset_hours=offset,
    )
    return reading_of([frame], warnings, [facts])


def _read_records(log: StatsLog, found: Iterable[StatsRecord]) -> None:
    """Take each record into ``log``; an unreadable one is a :class:`LoadFormatError`."""
    for record in found:
        try:
            _read_record(log, record)
        except LoadFormatError:
            raise
        except (ValueError, OverflowError) as exc:
            raise LoadFormatError(f"{log.source}:{record.line}: cannot read this record ({exc})") from None


def _read_record(log: StatsLog, record: StatsRecord) -> None:
    """Take one record into ``log``: a row, a companion line's value, a restart, or a fact of the file."""
    message = record.message
    _note_facts(log, record)
    is_oom = "CUDA out of memory" in message or "OutOfMemoryError" in message
    error_row = log.last if log.last is not None and log.last.get("event") in ("oom", "error") else None
    if record.level in ("ERROR", "CRITICAL") or (record.level is None and is_oom):
        _read_error(log, record, error_row, is_oom)
        return
    stats = parse_stats_message(message)
    preempted = "is preempted by " in message and _PREEMPTED.search(message)
    if error_row is not None and (record.level is not None or stats or preempted):
        error_row["closed"] = True  # the error block ended: the next error starts a new event
    prefix_line = (
        _V0_PREFIX_LINE.match(message) if message.startswith("Prefix cache hit rate: GPU: ") else None
    )
    if stats:
        _read_stats(log, record, stats)
    elif prefix_line and log.last_form == "v0":
        log.last["prefix_cache_hit_pct"] = float(prefix_line.group(1))  # type: ignore[index]
    elif preempted:
        total = _PREEMPTION_TOTAL.search(message)
        log.add(record, event="preemption", preemptions_total=int(total.group(1)) if total else None)
        log.last_preemption = (record.line, log.last["preemptions_total"])  # type: ignore[index]


def _note_facts(log: StatsLog, record: StatsRecord) -> None:
    """What a record tells about the log: a stamp's offset, no year, V1's late form, a restart, facts."""
    message = record.message
    if record.utc_offset_minutes is not None:
        log.stamped.add(record.utc_offset_minutes)
    if record.time is not None and not record.year_known:
        log.yearless = True
    if not log.late_v1 and (
        (record.file == "loggers.py" and (record.lineno or 0) >= V1_PREEMPTIONS_FIELD_FROM_LINENO)
        or (
            (_AGGREGATED.match(message) or any(m in message for m in _V1_LATE_MARKERS))
            and _STATS.search(message)
        )
    ):
        log.late_v1 = True
    if ("vLLM API server version " in message or "Initializing a" in message) and _SERVER_START.search(
        message
    ):
        if log.count() > log.rows_at_start:
            log.restarts += 1
            log.warnings.append(
                f"{log.source}:{record.line}: the server restarted (a new vLLM start after stats lines); "
                "its log counters (V0's total_num_cumulative_preemption) count from zero again"
            )
        log.rows_at_start = log.count()
    for name, (literal, pattern) in _FACTS.items():
        match = pattern.search(message) if literal in message else None
        if match:
            getattr(log, name).add(int(match.group(1).replace(",", "")))


def _read_error(log: StatsLog, record: StatsRecord, error_row: dict | None, is_oom: bool) -> None:
    """An ERROR record: a new event, or a line of the open one (an OOM line is the one it quotes)."""
    if error_row is None or log.last.get("closed"):  # type: ignore[union-attr]
        error_row = log.add(record, event="oom" if is_oom else "error")
    elif is_oom and error_row["event"] != "oom":
        error_row.update(event="oom", raw=record.message)  # quote the OOM line, not the block's first line
    if "SchedulerStats(" in record.message:
        for key, pattern in _DUMP.items():
            match = pattern.search(record.message)
            if match:
                value = float(match.group(1))
                error_row[key] = percent(value) if key == "kv_cache_usage_pct" else int(value)


def _read_stats(log: StatsLog, record: StatsRecord, stats: dict) -> None:
    """A stats message: a new row (a usage outside 0–100 % is unknown, with a warning)."""
    usage = stats.get("kv_cache_usage_pct")
    if usage is not None and not 0 <= usage <= 100:  # vLLM prints 100 × a fraction of its blocks
        stats["kv_cache_usage_pct"] = None
        log.warnings.append(
            Note(
                f"{log.source}:{record.line}: KV cache usage {usage:g}% is outside 0–100% (vLLM prints "
                "the share of its KV blocks in use): read as unknown",
                code="kv-usage-out-of-range",
                file=log.source,
                line=record.line,
            )
        )
    form = stats.pop("form")
    log.forms.add(form)
    pending = form == "v1" and "preemptions" not in stats and not log.late_v1
    if form == "v1" and "preemptions" not in stats:
        stats["preemptions"] = 0 if log.late_v1 else None
    log.add(record, form, **stats)
    if pending:
        log.pending_v1.append(len(log.rows))  # its index once closed


def _warnings(log: StatsLog, frame: pd.DataFrame) -> list[str]:
    """The log's warnings: no year, untimed rows, V0's lower bound, gaps between stats rows."""
    source, warnings = log.source, []
    untimed = frame["time"].isna().to_numpy()
    if log.yearless:
        warnings.append(
            f"{source}: vLLM's timestamps carry no year; times are shown as MM-DD HH:MM:SS "
            "(pass --year / year= to anchor them)"
        )
    if untimed.any():
        warnings.append(
            f"{source}: {untimed.sum()} row(s) lost their log header and have no time "
            f"(first at line {frame['line'].iloc[untimed.argmax()]})"
        )
    if log.last_preemption is not None:
        line, total = log.last_preemption
        value = "" if total is None else f" (total_num_cumulative_preemption={total})"
        warnings.append(
            f"{source}: vLLM V0 logs a preemption warning only at the 1st, 51st, 101st … preemption; the "
            "preemptions counted from this log are a lower bound: up to 49 more may follow the last "
            f"warning, line {line}{value}"
        )
    if "v1" in log.forms and not log.late_v1:
        warnings.append(
            f"{source}: these V1 stats lines (before vLLM 0.11.1) do not report preemptions; "
            "add a /metrics snapshot (vllm:num_preemptions_total) to count them"
        )
    stats = frame["event"].isna().to_numpy() & ~untimed
    engines = frame["engine"].to_numpy(np.int64, na_value=-1)[stats]  # -1: no engine, listed first
    micros = frame["time"].to_numpy("datetime64[us]").view(np.int64)[stats]
    for engine in np.unique(engines).tolist():
        lines = frame["line"].to_numpy(np.int64)[stats][engines == engine]
        gaps = np.diff(micros[engines == engine]) / 1e6  # [s]
        usual = float(np.median(gaps)) if len(gaps) else 0
        longer = np.flatnonzero(gaps > IDLE_GAP_FACTOR * usual).tolist() if usual > 0 else []
        for position in longer:
            name = "" if engine < 0 else f" of engine {engine}"
            warnings.append(
                f"{source}: no stats line{name} between lines {lines[position]} and "
                f"{lines[position + 1]} ({float(gaps[position]):g} s; usual interval {usual:g} s): idle "
                "(vLLM logs idle intervals at DEBUG) or not logging"
            )
    return warnings
