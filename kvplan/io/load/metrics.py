"""Read saved snapshots of vLLM's ``/metrics`` (``prometheus_client``), one or many scrapes a file, told apart
by sample timestamps, a time comment (``# 2026-11-29T10:00:10Z``, ``# 1732874410``), a family's ``# HELP`` or a
series seen again (no time, so no rates); times naive UTC; ``NaN``/``±Inf`` samples unknown, with a warning."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kvplan.io.load.frame import LoadFormatError, LoadReading, bounded_lines
from kvplan.io.load.scrapes import (
    CACHE_CONFIG,
    CREATED,
    READ,
    REFUSED,
    Sample,
    Scrape,
    impossible_value,
    sample_note,
    scrapes_reading,
    take_sample,
    unix_time,
)

_TIME_COMMENT = re.compile(
    r"^#\s*(?!HELP\b|TYPE\b)(?:.*?\b)?"
    r"(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<epoch>\d{10}(?:\.\d+)?))\s*$"
)
_DECLARATION = re.compile(r"^#\s*(HELP|TYPE)\s+(\S+)")
_SAMPLE = re.compile(r"^[A-Za-z_:][\w:]*(?:\{.*\})?\s+\S+")
#: a label set; quoted values unrolled so that sre matches a 20 MiB label value in constant memory
_QUOTED = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_LABELS = rf"\{{[^\"}}]*(?:{_QUOTED}[^\"}}]*)*\}}"
_SERIES = re.compile(
    rf"^\s*(?P<name>[A-Za-z_:][\w:]*)\s*(?P<labels>{_LABELS})?\s+(?P<value>\S+)(?:\s+(?P<time>\S+))?"
)
_LABEL = re.compile(r'([A-Za-z_]\w*)\s*=\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
_NUMBER = r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)"
_STRICT_SAMPLE = re.compile(rf"^[A-Za-z_:][\w:]*\s*(?:{_LABELS})?\s+{_NUMBER}(?:\s+-?\d+(?:\.\d+)?)?$")


def is_metrics_lines(lines: Iterable[str]) -> bool:
    """Whether ``lines`` are Prometheus text: a ``# HELP``/``# TYPE`` line or a ``vllm:`` sample after
    well-formed samples only, read as far as needed.

    >>> is_metrics_lines(['python_gc_objects_collected_total{generation="0"} 1.0', "vllm:num_requests_running 3"])
    True
    >>> is_metrics_lines(["INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Running: 1 reqs"])
    False
    """
    for line in lines:
        line = line.strip()
        if not line or (line.startswith("#") and not _DECLARATION.match(line)):
            continue
        if _DECLARATION.match(line) or (_SAMPLE.match(line) and line.startswith("vllm:")):
            return True
        if not _STRICT_SAMPLE.match(line):
            return False
    return False


def _comment_time(line: str) -> datetime | None:
    match = _TIME_COMMENT.match(line.strip())
    if not match:
        return None
    if match.group("epoch"):
        return unix_time(float(match.group("epoch")))
    stamp = datetime.fromisoformat(match.group("iso").replace("Z", "+00:00").replace(" ", "T"))
    return stamp.astimezone(timezone.utc).replace(tzinfo=None) if stamp.tzinfo else stamp


def _series(line: str) -> tuple[tuple, str] | None:
    """(identity, text) of a sample line's series (name, sorted labels, timestamp); ``None`` if no sample."""
    match = _SERIES.match(line)
    if not match:
        return None
    name, labels = match.group("name"), match.group("labels") or ""
    return (name, tuple(sorted(_LABEL.findall(labels))), match.group("time")), name + labels


@dataclass
class _Chunk:
    """The lines of one scrape in a file, with their line numbers."""

    line: int
    time: datetime | None
    repeated: str | None = None  # the series whose second appearance started this chunk
    lines: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    declared: set[tuple[str, str]] = field(default_factory=set)
    series: set[tuple] = field(default_factory=set)
    has_samples: bool = False


def physical_lines(lines: Iterable[str]) -> Iterator[str]:
    """The lines as ``str.splitlines`` cuts text (also at form feeds and the like)."""
    for line in lines:
        yield from line.splitlines() or [""]  # an empty line is a line


def _chunks(lines: Iterable[str]) -> Iterator[_Chunk]:
    """The scrapes of a file, one at a time."""
    current: _Chunk | None = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        comment = stripped.startswith("#")
        stamp = _comment_time(line) if comment else None
        declaration = _DECLARATION.match(stripped) if comment else None
        series = _series(stripped) if stripped and not comment else None
        if stamp is not None and current is not None and not current.has_samples and current.time is None:
            current.time = stamp
            continue
        repeated = series is not None and current is not None and series[0] in current.series
        if stamp or current is None or repeated or (declaration and declaration.groups() in current.declared):
            if current is not None and current.has_samples:
                yield current
            current = _Chunk(number, stamp, repeated=series[1] if series and repeated else None)
            if stamp is not None:
                continue
        if declaration:
            current.declared.add(declaration.groups())
        elif stripped and not comment:
            current.has_samples = True
            if series is not None:
                current.series.add(series[0])
        current.lines.append(line)
        current.numbers.append(number)
    if current is not None and current.has_samples:
        yield current


def split_scrapes(text: str) -> list[tuple[int, datetime | None, str]]:
    """(first line number, time from a time comment or ``None``, text) for each scrape in a file."""
    return [(chunk.line, chunk.time, "\n".join(chunk.lines) + "\n") for chunk in _chunks(text.splitlines())]


def _families(chunk: _Chunk, source: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families  # 0.1 s: not for a stats log

    try:
        return list(text_string_to_metric_families("\n".join(chunk.lines) + "\n"))
    except (ValueError, IndexError, TypeError) as exc:
        for number, line in zip(chunk.numbers, chunk.lines):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except (ValueError, IndexError, TypeError):
                raise LoadFormatError(
                    f"{source}:{number}: not Prometheus text exposition: {line.strip()[:120]!r}"
                ) from None
        raise LoadFormatError(
            f"{source}: lines from {chunk.line}: not Prometheus text exposition ({exc})"
        ) from None


def _sample_lines(chunk: _Chunk) -> list[tuple[int, str, float]]:
    """(line, name, value) of the chunk's samples whose value is a number."""
    found = []
    for number, line in zip(chunk.numbers, chunk.lines):
        match = _SERIES.match(line)
        if match:
            with contextlib.suppress(ValueError):
                found.append((number, match.group("name"), float(match.group("value"))))
    return found


def _sample_line(lines: list[tuple[int, str, float]], name: str, value: float, default: int) -> int:
    """The line of the first ``name`` sample with ``value``; non-finite ones match any non-finite value once."""
    finite = math.isfinite(value)
    for entry in lines:
        if entry[1] == name and (entry[2] == value if finite else not math.isfinite(entry[2])):
            if not finite:
                lines.remove(entry)
            return entry[0]
    return default


def _read_metrics_lines(lines: Iterable[str], source: str) -> tuple[list[Scrape], list[str]]:
    """The scrapes of one saved /metrics file and the warnings."""
    scrapes: list[Scrape] = []
    warnings: list[str] = []
    found = False
    repeats: list[tuple[int, str]] = []  # (line, series) where a repeated series started a scrape
    for chunk in _chunks(lines):
        if chunk.repeated is not None:
            repeats.append((chunk.line, chunk.repeated))
        sampled: list | None = None  # the chunk's sample lines, read when a sample needs its line
        by_time: dict[float | None, Scrape] = {}
        for family in _families(chunk, source):
            for sample in family.samples:
                name = sample.name
                if not name.startswith("vllm:"):
                    continue
                found = found or name not in CREATED
                when = sample.timestamp
                if when is not None and not isinstance(when, (int, float)):
                    when = float(when.sec) + when.nsec / 1e9
                scrape = by_time.get(when)
                if scrape is None and (name in READ or name in CREATED or name == CACHE_CONFIG):
                    time = chunk.time if when is None else unix_time(when)
                    scrape = by_time[when] = Scrape(source, chunk.line, time)
                problem = take_sample(scrape, name, sample.labels, sample.value) if scrape else None
                if problem is not None:
                    sampled = _sample_lines(chunk) if sampled is None else sampled
                    line = _sample_line(sampled, name, sample.value, chunk.line)
                    if problem == REFUSED:
                        raise refused_sample_error(source, line, name, sample.value)
                    warnings.append(sample_note(source, line, name, sample.value))
        for scrape in by_time.values():
            for engine, values in scrape.values.items():
                scrape.values[engine] = {name: v for name, v in values.items() if not math.isnan(v)}
        scrapes.extend(by_time.values())
    if not found:
        raise LoadFormatError(f"{source}: no vllm: metric found; expected a saved vLLM /metrics snapshot")
    if repeats:
        warnings.append(
            f"{source}:{repeats[0][0]}: the scrapes had no timestamps and were split where a series "
            f"repeated ({repeats[0][1]} again; {len(repeats)} split(s) in this file): scrapes "
            "concatenated without a time comment or # HELP between them have no time, so no rates"
        )
    return scrapes, warnings


def parse_metrics_text(text: str, source: str) -> list[Scrape]:
    """The scrapes in the text of one saved /metrics file (no rates yet).

    >>> text = ('vllm:num_preemptions_total{engine="0"} 3.0 1732874410000\\n'
    ...         'vllm:num_preemptions_created{engine="0"} 1.7328744e+09 1732874410000\\n')
    >>> s = parse_metrics_text(text, "m.prom")
    >>> s[0].values, s[0].time.isoformat()
    ({0: {'vllm:num_preemptions_total': 3.0}}, '2024-11-29T10:00:10')
    """
    return _read_metrics_lines(text.splitlines(), source)[0]


def parse_metrics_snapshots(files: Sequence[tuple[str, str]]) -> LoadReading:
    """The reading of one run's /metrics files given as ``(source, text)``."""
    return _metrics_reading([(source, text.splitlines()) for source, text in files])


def _metrics_reading(files: Iterable[tuple[str, Iterable[str]]]) -> LoadReading:
    """The reading of ``(source, lines)`` of one run's /metrics files, in order."""
    scrapes: list[Scrape] = []
    notes: list[str] = []
    sources: list[str] = []
    for source, lines in files:
        file_scrapes, file_notes = _read_metrics_lines(lines, source)
        scrapes += file_scrapes
        notes += file_notes
        sources.append(source)
    return scrapes_reading(scrapes, sources, notes)


def read_metrics_snapshots(paths: Sequence[str | Path]) -> LoadReading:
    """The reading of one run's saved /metrics files, each read as a stream."""

    def files() -> Iterator[tuple[str, Iterator[str]]]:
        for path in paths:
            with open(path, encoding="utf-8", errors="replace") as lines:
                yield str(path), physical_lines(bounded_lines(lines, str(path)))

    return _metrics_reading(files())


def refused_sample_error(source: str, line: int, name: str, value: float) -> LoadFormatError:
    """The refusal of a sample no vLLM exports (:func:`~.scrapes.impossible_value`)."""
    return LoadFormatError(f"{source}:{line}: {name} is {value:g}, {impossible_value(name, float(value))}")


def samples_reading(samples: Iterable[Sample], source: str) -> LoadReading:
    """The reading of Prometheus samples of one run, one scrape per timestamp, as for /metrics files; rows
    and warnings name ``source`` and the sample's position as the line.

    >>> reading = samples_reading([Sample("vllm:num_preemptions_total", {"engine": "0"}, 1732874410.0, 2.0),
    ...     Sample("vllm:num_preemptions_total", {"engine": "0"}, 1732874420.0, 5.0)], "prometheus")
    >>> [(row["preemptions"], row["preemptions_total"]) for row in reading.records()]
    [(None, 2), (3, 5)]
    """
    by_time: dict[float | None, Scrape] = {}
    notes: list[str] = []
    for position, (name, labels, timestamp, value) in enumerate(samples, 1):
        scrape = by_time.get(timestamp)
        if scrape is None:
            time = None if timestamp is None else unix_time(timestamp)
            scrape = by_time[timestamp] = Scrape(source, position, time)
        problem = take_sample(scrape, name, labels, value)
        if problem == REFUSED:
            raise refused_sample_error(source, position, name, value)
        if problem is not None:
            notes.append(sample_note(source, position, name, value))
    for scrape in by_time.values():
        for engine, values in scrape.values.items():
            scrape.values[engine] = {name: v for name, v in values.items() if not math.isnan(v)}
    return scrapes_reading(list(by_time.values()), [source], notes)
