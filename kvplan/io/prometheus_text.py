"""Read saved snapshots of vLLM's Prometheus ``/metrics`` endpoint: one scrape per file or many per file.

The exposition itself is parsed by ``prometheus_client.parser.text_string_to_metric_families``. Scrapes are
told apart by (a) sample timestamps (``name{…} value 1732874410000``: one scrape per distinct time),
(b) a comment line holding a time, e.g. ``# 2026-11-29T10:00:10Z`` or ``# 1732874410`` (what
``echo "# $(date -u +%FT%TZ)"; curl -s …/metrics`` writes before each scrape), or (c) a family's ``# HELP``
seen again, or (d) a series (name and labels) seen again: scrapes concatenated without any separator, e.g.
``curl -s …/metrics | grep ^vllm: >> dump.prom``; those have no time, so no rates. Times are naive UTC.
``*_created`` samples (Unix start times, V1) are never read as counts; a counter whose ``_created`` time
changed between scrapes was created anew (a server restart) and counts from zero. ``NaN`` and ``±Inf``
samples (legal Prometheus values) are read as unknown, with a warning.

Names read (``vllm-load-formats.md`` §6), V0 and V1 alike: ``vllm:kv_cache_usage_perc`` (else
``vllm:gpu_cache_usage_perc``) as 0–100 %, ``vllm:num_requests_running`` / ``_waiting`` / ``_swapped``,
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` as rates between scrapes (else V0's
``vllm:avg_*_throughput_toks_per_s`` gauges), ``vllm:prefix_cache_hits_total`` / ``_queries_total`` (else
the ``gpu_`` names, else V0's ``vllm:gpu_prefix_cache_hit_rate``), ``vllm:num_preemptions_total``, and
``vllm:cache_config_info`` (``num_gpu_blocks`` × ``block_size`` = capacity in tokens). V1's ``engine``
label gives the engine; counters that go down (a server restart) count from zero, never negative.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kvplan.load_rows import LoadFormatError, LoadReading, LoadRow, LoadSource, counter_increase, percent

_TIME_COMMENT = re.compile(
    r"^#\s*(?!HELP\b|TYPE\b)(?:.*?\b)?"
    r"(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<epoch>\d{10}(?:\.\d+)?))\s*$"
)
_DECLARATION = re.compile(r"^#\s*(HELP|TYPE)\s+(\S+)")
_SAMPLE = re.compile(r"^[A-Za-z_:][\w:]*(?:\{.*\})?\s+\S+")
_LABELS = r'\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\}'
_SERIES = re.compile(
    rf"^\s*(?P<name>[A-Za-z_:][\w:]*)\s*(?P<labels>{_LABELS})?\s+(?P<value>\S+)(?:\s+(?P<time>\S+))?"
)
_LABEL = re.compile(r'([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_NUMBER = r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)"
_STRICT_SAMPLE = re.compile(rf"^[A-Za-z_:][\w:]*\s*(?:{_LABELS})?\s+{_NUMBER}(?:\s+-?\d+(?:\.\d+)?)?$")

FRACTIONS = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hit_rate"}
COUNTERS = {
    "prompt": "vllm:prompt_tokens_total",
    "generation": "vllm:generation_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
}
PREFIX_COUNTERS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
)
GAUGES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_swapped",
    "vllm:avg_prompt_throughput_toks_per_s",
    "vllm:avg_generation_throughput_toks_per_s",
}
READ_COUNTERS = {*COUNTERS.values(), *(name for pair in PREFIX_COUNTERS for name in pair)}
READ = FRACTIONS | GAUGES | READ_COUNTERS  # the names a row's fields come from; other series make no row
CREATED = {name.removesuffix("_total") + "_created": name for name in READ_COUNTERS}  # V1's start times


@dataclass(frozen=True)
class Scrape:
    """One scrape: sample values per engine (``None`` = no engine label), summed over other labels.

    Only the names in :data:`READ` are kept; a ``NaN`` or ``±Inf`` sample leaves its name out (unknown).
    ``cache_config`` holds the labels of ``vllm:cache_config_info`` per engine; ``created`` the latest
    ``_created`` time (Unix seconds) of each counter read, per engine (V1 only).
    """

    source: str
    line: int
    time: datetime | None
    values: dict[int | None, dict[str, float]] = field(default_factory=dict)
    cache_config: dict[int | None, dict[str, str]] = field(default_factory=dict)
    created: dict[int | None, dict[str, float]] = field(default_factory=dict)


def is_metrics_text(text: str) -> bool:
    """True when ``text`` looks like Prometheus text exposition rather than a log.

    A ``# HELP`` / ``# TYPE`` line or a ``vllm:`` sample says so; other samples before the first ``vllm:``
    one (``python_gc_…`` in a dump whose comment lines were stripped) must be well-formed sample lines.

    >>> is_metrics_text("# 2026-11-29T10:00:10Z\\n# HELP vllm:num_requests_running x\\n")
    True
    >>> is_metrics_text('python_gc_objects_collected_total{generation="0"} 1.0\\nvllm:num_requests_running 3')
    True
    >>> is_metrics_text("INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Running: 1 reqs")
    False
    """
    for line in text.splitlines():
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
        return datetime.fromtimestamp(float(match.group("epoch")), tz=timezone.utc).replace(tzinfo=None)
    stamp = datetime.fromisoformat(match.group("iso").replace("Z", "+00:00").replace(" ", "T"))
    return stamp.astimezone(timezone.utc).replace(tzinfo=None) if stamp.tzinfo else stamp


def _series(line: str) -> tuple[tuple, str] | None:
    """(identity, text) of a sample line's series: name, sorted labels and sample timestamp; ``None`` if
    the line is no sample. Equal identities in one scrape mean two scrapes were concatenated."""
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


def _chunks(text: str) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stamp = _comment_time(line)
        stripped = line.strip()
        current = chunks[-1] if chunks else None
        if stamp is not None:
            if current is not None and not current.has_samples and current.time is None:
                current.time = stamp
            else:
                chunks.append(_Chunk(number, stamp))
            continue
        declaration = _DECLARATION.match(stripped)
        series = _series(stripped) if stripped and not stripped.startswith("#") else None
        if current is None or (declaration and declaration.groups() in current.declared):
            current = _Chunk(number, None)
            chunks.append(current)
        elif series is not None and series[0] in current.series:
            current = _Chunk(number, None, repeated=series[1])
            chunks.append(current)
        if declaration:
            current.declared.add(declaration.groups())
        elif stripped and not stripped.startswith("#"):
            current.has_samples = True
            if series is not None:
                current.series.add(series[0])
        current.lines.append(line)
        current.numbers.append(number)
    return [chunk for chunk in chunks if chunk.has_samples]


def split_scrapes(text: str) -> list[tuple[int, datetime | None, str]]:
    """(first line number, time from a time comment or ``None``, text) for each scrape in a file.

    >>> [(line, time.minute) for line, time, _ in split_scrapes(
    ...     "# 2026-11-29T10:00:10Z\\n# HELP a x\\na 1\\n# 2026-11-29T10:01:10Z\\n# HELP a x\\na 2\\n")]
    [(1, 0), (4, 1)]
    >>> [(line, time) for line, time, _ in split_scrapes('a{e="0"} 1\\nb 5\\na{e="0"} 2\\n')]  # a repeats
    [(1, None), (3, None)]
    """
    return [(chunk.line, chunk.time, "\n".join(chunk.lines) + "\n") for chunk in _chunks(text)]


def _families(chunk: _Chunk, source: str) -> list:
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


def _engine(labels: dict[str, str]) -> int | None:
    engine = labels.get("engine")
    return int(engine) if engine is not None and engine.isdigit() else None


def _non_finite_lines(chunk: _Chunk) -> list[tuple[int, str]]:
    """(line number, metric name) of the chunk's samples whose value is ``NaN`` or ``±Inf``."""
    found = []
    for number, line in zip(chunk.numbers, chunk.lines):
        match = _SERIES.match(line) if line.strip() and not line.lstrip().startswith("#") else None
        try:
            finite = match is None or math.isfinite(float(match.group("value")))
        except ValueError:
            finite = True
        if not finite:
            found.append((number, match.group("name")))
    return found


def _value_text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _add(values: dict[str, float], name: str, value: float) -> None:
    """Sum a read sample into its engine's values (the highest for fractions); ``NaN`` marks unknown."""
    old, value = values.get(name), float(value)  # prometheus_client reads "120" as the int 120
    if not math.isfinite(value) or (old is not None and math.isnan(old)):
        values[name] = math.nan
    elif old is None:
        values[name] = value
    else:
        values[name] = max(old, value) if name in FRACTIONS else old + value


def _read_metrics_text(text: str, source: str) -> tuple[list[Scrape], list[str]]:
    """The scrapes of one saved /metrics file and what the reader noticed (file and line in each)."""
    scrapes: list[Scrape] = []
    warnings: list[str] = []
    found = False
    chunks = _chunks(text)
    for chunk in chunks:
        non_finite = _non_finite_lines(chunk)
        by_time: dict[float | None, Scrape] = {}
        for family in _families(chunk, source):
            for sample in family.samples:
                name = sample.name
                if not name.startswith("vllm:"):
                    continue
                found = found or name not in CREATED
                if name not in READ and name not in CREATED and name != "vllm:cache_config_info":
                    continue
                when = sample.timestamp
                if when is not None and not isinstance(when, (int, float)):
                    when = float(when.sec) + when.nsec / 1e9
                scrape = by_time.get(when)
                if scrape is None:
                    time = (
                        chunk.time
                        if when is None
                        else datetime.fromtimestamp(when, tz=timezone.utc).replace(tzinfo=None)
                    )
                    scrape = by_time[when] = Scrape(source, chunk.line, time)
                engine = _engine(sample.labels)
                if name == "vllm:cache_config_info":
                    scrape.cache_config[engine] = dict(sample.labels)
                elif name in CREATED:
                    if math.isfinite(sample.value):
                        created = scrape.created.setdefault(engine, {})
                        counter = CREATED[name]
                        created[counter] = max(created.get(counter, sample.value), sample.value)
                else:
                    if not math.isfinite(sample.value):
                        where = next((entry for entry in non_finite if entry[1] == name), None)
                        if where is not None:
                            non_finite.remove(where)
                        line = where[0] if where else chunk.line
                        warnings.append(
                            f"{source}:{line}: {name} is {_value_text(sample.value)} (not a finite number): "
                            "read as unknown"
                        )
                    _add(scrape.values.setdefault(engine, {}), name, sample.value)
        for scrape in by_time.values():
            for engine, values in scrape.values.items():
                scrape.values[engine] = {name: v for name, v in values.items() if not math.isnan(v)}
        scrapes.extend(by_time.values())
    if not found:
        raise LoadFormatError(f"{source}: no vllm: metric found; expected a saved vLLM /metrics snapshot")
    repeats = [chunk for chunk in chunks if chunk.repeated is not None]
    if repeats:
        warnings.append(
            f"{source}:{repeats[0].line}: the scrapes had no timestamps and were split where a series "
            f"repeated ({repeats[0].repeated} again; {len(repeats)} split(s) in this file): scrapes "
            "concatenated without a time comment or # HELP between them have no time, so no rates"
        )
    return scrapes, warnings


def parse_metrics_text(text: str, source: str) -> list[Scrape]:
    """The scrapes in the text of one saved /metrics file (pure; no rates yet).

    >>> text = ('vllm:num_preemptions_total{engine="0"} 3.0 1732874410000\\n'
    ...         'vllm:num_preemptions_created{engine="0"} 1.7328744e+09 1732874410000\\n')
    >>> s = parse_metrics_text(text, "m.prom")
    >>> s[0].values, s[0].time.isoformat()
    ({0: {'vllm:num_preemptions_total': 3.0}}, '2024-11-29T10:00:10')
    """
    return _read_metrics_text(text, source)[0]


def _rate(previous: dict | None, current: dict, name: str, seconds: float | None) -> float | None:
    increase = counter_increase(previous.get(name) if previous else None, current.get(name))
    return round(increase / seconds, 3) if increase is not None and seconds else None


def _hit_pct(previous: dict | None, current: dict) -> float | None:
    rate = current.get("vllm:gpu_prefix_cache_hit_rate")
    if rate is not None:
        return percent(rate) if rate >= 0 else None  # V0 exports -1 when prefix caching is off
    for hits_name, queries_name in PREFIX_COUNTERS:
        if queries_name in current and previous is not None:
            queries = counter_increase(previous.get(queries_name), current[queries_name])
            hits = counter_increase(previous.get(hits_name), current.get(hits_name, 0.0))
            return percent(hits / queries) if queries and hits is not None else None
    return None


def _optional_int(value: float | None) -> int | None:
    return None if value is None else round(value)


def metrics_rows(scrapes: Sequence[Scrape]) -> tuple[list[LoadRow], list[str]]:
    """One row per scrape and engine, with rates and preemptions per interval between scrapes.

    Intervals follow time order when every scrape has a time, else the order given; rows keep the order
    given. A counter that went down, or whose ``_created`` time changed (a server restart), counts from
    zero and is reported in the warnings.
    """
    order = list(range(len(scrapes)))
    if all(scrape.time is not None for scrape in scrapes):
        order.sort(key=lambda i: scrapes[i].time)
    previous: dict[int | None, tuple[Scrape, dict]] = {}
    rows: dict[tuple[int, int | None], LoadRow] = {}
    warnings: list[str] = []
    for index in order:
        scrape = scrapes[index]
        for engine, values in scrape.values.items():
            before, last = previous.get(engine, (None, None))
            seconds = (
                (scrape.time - before.time).total_seconds()
                if before is not None and before.time is not None and scrape.time is not None
                else None
            )
            went_down = sorted(
                name
                for name in values
                if name.endswith("_total") and last and values[name] < last.get(name, 0)
            )
            # V1: a counter whose _created time changed was created anew (a restart), even if it grew
            created_before = before.created.get(engine, {}) if before is not None else {}
            anew = sorted(
                name
                for name, created in scrape.created.get(engine, {}).items()
                if name in created_before and created != created_before[name] and name not in went_down
            )
            # one restart, one warning: counters that went down say it already; else the _created times do
            reason = (
                f"counters went down since the previous scrape ({', '.join(went_down)})"
                if went_down
                else f"counters were created anew since the previous scrape ({', '.join(anew)}: their "
                "_created time changed)"
            )
            if went_down or anew:
                warnings.append(
                    f"{scrape.source}:{scrape.line}: {reason}: the server restarted; increases count "
                    "from zero"
                )
            if last is not None and anew:
                last = {**last, **{name: 0.0 for name in anew}}  # counted from zero since the restart
            usage = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc"))
            rows[(index, engine)] = LoadRow(
                source=scrape.source,
                line=scrape.line,
                time=scrape.time,
                engine=engine,
                kv_cache_usage_pct=None if usage is None else percent(usage),
                running=_optional_int(values.get("vllm:num_requests_running")),
                waiting=_optional_int(values.get("vllm:num_requests_waiting")),
                swapped=_optional_int(values.get("vllm:num_requests_swapped")),
                prompt_tokens_per_s=values.get(
                    "vllm:avg_prompt_throughput_toks_per_s", _rate(last, values, COUNTERS["prompt"], seconds)
                ),
                generation_tokens_per_s=values.get(
                    "vllm:avg_generation_throughput_toks_per_s",
                    _rate(last, values, COUNTERS["generation"], seconds),
                ),
                prefix_cache_hit_pct=_hit_pct(last, values),
                preemptions=_optional_int(
                    counter_increase(
                        last.get(COUNTERS["preemptions"]) if last else None,
                        values.get(COUNTERS["preemptions"]),
                    )
                ),
                preemptions_total=_optional_int(values.get(COUNTERS["preemptions"])),
                kind="metrics",
                raw=f"scrape at line {scrape.line}",
            )
            previous[engine] = (scrape, values)
    untimed = sorted({scrape.source for scrape in scrapes if scrape.time is None})
    warnings += [
        f"{source}: scrape(s) without a time (no sample timestamps, no '# <ISO time>' comment): "
        "no rates for them"
        for source in untimed
    ]
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0], -1 if k[1] is None else k[1]))], warnings


def _only_int_label(configs: Sequence[dict[str, str]], name: str) -> int | None:
    """A whole-number ``vllm:cache_config_info`` label when every scrape agrees, else ``None``."""
    values = {int(c[name]) for c in configs if c.get(name, "").isdigit()}
    return values.pop() if len(values) == 1 else None


def _source_facts(source: str, scrapes: Sequence[Scrape]) -> LoadSource:
    configs = [c for s in scrapes if s.source == source for c in s.cache_config.values()]
    blocks, block_size = _only_int_label(configs, "num_gpu_blocks"), _only_int_label(configs, "block_size")
    return LoadSource(
        source,
        "metrics",
        kv_cache_tokens=blocks * block_size if blocks is not None and block_size is not None else None,
        num_gpu_blocks=blocks,
        block_size=block_size,
        kv_cache_memory_bytes=_only_int_label(configs, "kv_cache_memory_bytes"),
        reports_preemptions=any(
            COUNTERS["preemptions"] in v for s in scrapes if s.source == source for v in s.values.values()
        ),
    )


def parse_metrics_snapshots(files: Sequence[tuple[str, str]]) -> LoadReading:
    """Rows from the texts of one run's /metrics files, ``(source, text)`` in order (pure).

    >>> one = '# HELP vllm:num_requests_running x\\n# TYPE vllm:num_requests_running gauge\\n'
    >>> reading = parse_metrics_snapshots([("a.prom", one + 'vllm:num_requests_running{engine="0"} 7.0\\n')])
    >>> reading.rows[0].running, reading.rows[0].engine
    (7, 0)
    """
    scrapes: list[Scrape] = []
    notes: list[str] = []
    for source, text in files:
        file_scrapes, file_notes = _read_metrics_text(text, source)
        scrapes += file_scrapes
        notes += file_notes
    rows, warnings = metrics_rows(scrapes)
    return LoadReading(
        tuple(rows), (*notes, *warnings), tuple(_source_facts(source, scrapes) for source, _ in files)
    )


def read_metrics_snapshots(paths: Sequence[str | Path]) -> LoadReading:
    """Rows from saved /metrics files of one run, in the order given (``source`` = the path as given)."""
    return parse_metrics_snapshots(
        [(str(path), Path(path).read_text(encoding="utf-8", errors="replace")) for path in paths]
    )
