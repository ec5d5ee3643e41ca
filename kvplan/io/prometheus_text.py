"""Read saved snapshots of vLLM's Prometheus ``/metrics`` endpoint: one scrape per file or many per file.

The exposition itself is parsed by ``prometheus_client.parser.text_string_to_metric_families``. Scrapes are
told apart by (a) sample timestamps (``name{…} value 1732874410000``: one scrape per distinct time),
(b) a comment line holding a time, e.g. ``# 2026-11-29T10:00:10Z`` or ``# 1732874410`` (what
``echo "# $(date -u +%FT%TZ)"; curl -s …/metrics`` writes before each scrape), or (c) a family's ``# HELP``
seen again. Times are naive UTC. ``*_created`` samples (Unix start times, V1) are never read as counts.

Names read (``vllm-load-formats.md`` §6), V0 and V1 alike: ``vllm:kv_cache_usage_perc`` (else
``vllm:gpu_cache_usage_perc``) as 0–100 %, ``vllm:num_requests_running`` / ``_waiting`` / ``_swapped``,
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` as rates between scrapes (else V0's
``vllm:avg_*_throughput_toks_per_s`` gauges), ``vllm:prefix_cache_hits_total`` / ``_queries_total`` (else
the ``gpu_`` names, else V0's ``vllm:gpu_prefix_cache_hit_rate``), ``vllm:num_preemptions_total``, and
``vllm:cache_config_info`` (``num_gpu_blocks`` × ``block_size`` = capacity in tokens). V1's ``engine``
label gives the engine; counters that go down (a server restart) count from zero, never negative.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kvplan.load import LoadFormatError, LoadReading, LoadRow, LoadSource, counter_increase, percent

_TIME_COMMENT = re.compile(
    r"^#\s*(?!HELP\b|TYPE\b)(?:.*?\b)?"
    r"(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<epoch>\d{10}(?:\.\d+)?))\s*$"
)
_DECLARATION = re.compile(r"^#\s*(HELP|TYPE)\s+(\S+)")
_SAMPLE = re.compile(r"^[A-Za-z_:][\w:]*(?:\{.*\})?\s+\S+")

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


@dataclass(frozen=True)
class Scrape:
    """One scrape: sample values per engine (``None`` = no engine label), summed over other labels.

    ``cache_config`` holds the labels of ``vllm:cache_config_info`` per engine.
    """

    source: str
    line: int
    time: datetime | None
    values: dict[int | None, dict[str, float]] = field(default_factory=dict)
    cache_config: dict[int | None, dict[str, str]] = field(default_factory=dict)


def is_metrics_text(text: str) -> bool:
    """True when ``text`` looks like Prometheus text exposition rather than a log.

    >>> is_metrics_text("# 2026-11-29T10:00:10Z\\n# HELP vllm:num_requests_running x\\n")
    True
    >>> is_metrics_text("INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Running: 1 reqs")
    False
    """
    for line in text.splitlines():
        line = line.strip()
        if not line or (line.startswith("#") and not _DECLARATION.match(line)):
            continue
        return bool(_DECLARATION.match(line)) or bool(_SAMPLE.match(line) and line.startswith("vllm:"))
    return False


def _comment_time(line: str) -> datetime | None:
    match = _TIME_COMMENT.match(line.strip())
    if not match:
        return None
    if match.group("epoch"):
        return datetime.fromtimestamp(float(match.group("epoch")), tz=timezone.utc).replace(tzinfo=None)
    stamp = datetime.fromisoformat(match.group("iso").replace("Z", "+00:00").replace(" ", "T"))
    return stamp.astimezone(timezone.utc).replace(tzinfo=None) if stamp.tzinfo else stamp


def split_scrapes(text: str) -> list[tuple[int, datetime | None, str]]:
    """(first line number, time from a time comment or ``None``, text) for each scrape in a file.

    >>> [(line, time.minute) for line, time, _ in split_scrapes(
    ...     "# 2026-11-29T10:00:10Z\\n# HELP a x\\na 1\\n# 2026-11-29T10:01:10Z\\n# HELP a x\\na 2\\n")]
    [(1, 0), (4, 1)]
    """
    chunks: list[list] = []  # [line, time, lines, declared, has_samples]
    for number, line in enumerate(text.splitlines(), start=1):
        stamp = _comment_time(line)
        declaration = _DECLARATION.match(line.strip())
        current = chunks[-1] if chunks else None
        if stamp is not None:
            if current is not None and not current[4] and current[1] is None:
                current[1] = stamp
            else:
                chunks.append([number, stamp, [], set(), False])
            continue
        if current is None or (declaration and declaration.groups() in current[3]):
            current = [number, None, [], set(), False]
            chunks.append(current)
        if declaration:
            current[3].add(declaration.groups())
        elif line.strip() and not line.lstrip().startswith("#"):
            current[4] = True
        current[2].append(line)
    return [(line, stamp, "\n".join(lines) + "\n") for line, stamp, lines, _, has in chunks if has]


def _families(chunk: str, source: str, first_line: int) -> list:
    try:
        return list(text_string_to_metric_families(chunk))
    except (ValueError, IndexError, TypeError) as exc:
        for offset, line in enumerate(chunk.splitlines()):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except (ValueError, IndexError, TypeError):
                raise LoadFormatError(
                    f"{source}:{first_line + offset}: not Prometheus text exposition: {line.strip()[:120]!r}"
                ) from None
        raise LoadFormatError(
            f"{source}: lines from {first_line}: not Prometheus text exposition ({exc})"
        ) from None


def _engine(labels: dict[str, str]) -> int | None:
    engine = labels.get("engine")
    return int(engine) if engine is not None and engine.isdigit() else None


def parse_metrics_text(text: str, source: str) -> list[Scrape]:
    """The scrapes in the text of one saved /metrics file (pure; no rates yet).

    >>> text = ('vllm:num_preemptions_total{engine="0"} 3.0 1732874410000\\n'
    ...         'vllm:num_preemptions_created{engine="0"} 1.7328744e+09 1732874410000\\n')
    >>> s = parse_metrics_text(text, "m.prom")
    >>> s[0].values, s[0].time.isoformat()
    ({0: {'vllm:num_preemptions_total': 3.0}}, '2024-11-29T10:00:10')
    """
    scrapes: list[Scrape] = []
    for first_line, stamp, chunk in split_scrapes(text):
        by_time: dict[float | None, Scrape] = {}
        for family in _families(chunk, source, first_line):
            for sample in family.samples:
                if sample.name.endswith("_created") or not sample.name.startswith("vllm:"):
                    continue
                when = sample.timestamp
                if when is not None and not isinstance(when, (int, float)):
                    when = float(when.sec) + when.nsec / 1e9
                scrape = by_time.get(when)
                if scrape is None:
                    time = (
                        stamp
                        if when is None
                        else datetime.fromtimestamp(when, tz=timezone.utc).replace(tzinfo=None)
                    )
                    scrape = by_time[when] = Scrape(source, first_line, time)
                engine = _engine(sample.labels)
                if sample.name == "vllm:cache_config_info":
                    scrape.cache_config[engine] = dict(sample.labels)
                    continue
                values = scrape.values.setdefault(engine, {})
                if sample.name in FRACTIONS:
                    values[sample.name] = max(values.get(sample.name, sample.value), sample.value)
                else:
                    values[sample.name] = values.get(sample.name, 0.0) + sample.value
        scrapes.extend(by_time.values())
    if not any(scrape.values or scrape.cache_config for scrape in scrapes):
        raise LoadFormatError(f"{source}: no vllm: metric found; expected a saved vLLM /metrics snapshot")
    return scrapes


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
    given. A counter that went down (server restart) counts from zero and is reported in the warnings.
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
            reset = [
                name
                for name in values
                if name.endswith("_total") and last and values[name] < last.get(name, 0)
            ]
            if reset:
                warnings.append(
                    f"{scrape.source}:{scrape.line}: counters went down since the previous scrape "
                    f"({', '.join(sorted(reset))}): the server restarted; increases count from zero"
                )
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
    scrapes = [scrape for source, text in files for scrape in parse_metrics_text(text, source)]
    rows, warnings = metrics_rows(scrapes)
    return LoadReading(
        tuple(rows), tuple(warnings), tuple(_source_facts(source, scrapes) for source, _ in files)
    )


def read_metrics_snapshots(paths: Sequence[str | Path]) -> LoadReading:
    """Rows from saved /metrics files of one run, in the order given (``source`` = the path as given)."""
    return parse_metrics_snapshots(
        [(str(path), Path(path).read_text(encoding="utf-8", errors="replace")) for path in paths]
    )
