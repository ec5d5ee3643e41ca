"""From /metrics scrapes to load rows, one per scrape and engine, with rates and preemptions between scrapes;
counters that went down or got a new ``_created`` time were reset by a restart."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import NamedTuple

from kvplan.io.load.frame import LoadReading, LoadSource, counter_increase, frame_of, percent, reading_of
from kvplan.notes import Note

KV_USAGE = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}  # fractions of the KV blocks, 0–1
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
CACHE_CONFIG = "vllm:cache_config_info"  # labels num_gpu_blocks, block_size (capacity)
NON_FINITE, OUT_OF_RANGE = "non-finite", "out-of-range"  # what :func:`take_sample` may find wrong
REFUSED = "refused"  # and refuses (:func:`kvplan.io.load.metrics.refused_sample_error`)
CONFIG_LABELS = ("kv_cache_memory_bytes", "num_gpu_blocks", "block_size")  # what a load check is judged on
CONFIG_DISAGREES, COUNTER_DOWN = "cache-config-disagrees", "counter-down-without-restart"  # warning codes


class Sample(NamedTuple):
    """One Prometheus sample: metric name, labels, timestamp [Unix s] (``None``: the scrape's) and value."""

    name: str
    labels: Mapping[str, str]
    timestamp: float | None
    value: float


@dataclass(frozen=True)
class Scrape:
    """A scrape by engine: :data:`READ` values summed over labels, cache config, ``_created`` [Unix s]."""

    source: str
    line: int
    time: datetime | None
    values: dict[int | None, dict[str, float]] = field(default_factory=dict)
    cache_config: dict[int | None, dict[str, str]] = field(default_factory=dict)
    created: dict[int | None, dict[str, float]] = field(default_factory=dict)


def unix_time(seconds: float) -> datetime:
    """A Unix time [s] as a naive UTC ``datetime``."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(tzinfo=None)


def take_sample(scrape: Scrape, name: str, labels: Mapping[str, str], value: float) -> str | None:
    """Take one sample; returns :data:`NON_FINITE`, :data:`OUT_OF_RANGE` (unknown) or :data:`REFUSED`."""
    engine = labels.get("engine")
    engine = int(engine) if engine is not None and engine.isdigit() else None
    value = float(value)  # prometheus_client reads "120" as the int 120
    if name == CACHE_CONFIG:
        earlier = scrape.cache_config.setdefault(engine, dict(labels))
        return None if [earlier.get(k) for k in SIZED] == [labels.get(k) for k in SIZED] else REFUSED
    if name in CREATED:
        if math.isfinite(value):
            created = scrape.created.setdefault(engine, {})
            created[CREATED[name]] = max(created.get(CREATED[name], value), value)
        return None
    if name not in READ:
        return None
    if impossible_value(name, value) is not None:  # issue 28: -1 preemptions would pass "preemptions ≤ 0"
        return REFUSED
    problem = None
    if not math.isfinite(value):
        problem = NON_FINITE
    elif name in KV_USAGE and not 0 <= value <= 1:
        problem, value = OUT_OF_RANGE, math.nan
    values = scrape.values.setdefault(engine, {})
    old = values.get(name)
    if math.isnan(value) or not math.isfinite(value) or (old is not None and math.isnan(old)):
        values[name] = math.nan  # unknown for the whole scrape
    elif old is None:
        values[name] = value
    else:
        values[name] = max(old, value) if name in FRACTIONS else old + value
    return problem


#: The ``vllm:cache_config_info`` labels that size the KV cache: one engine shows one of each per scrape.
SIZED = ("kv_cache_memory_bytes", "num_gpu_blocks")


def impossible_value(name: str, value: float) -> str | None:
    """Why no vLLM exports this finite ``value`` of ``name``; None when one may (issue 28)."""
    if name == CACHE_CONFIG:  # take_sample refuses only a second series of one engine that sizes it otherwise
        return (
            "a second series of one engine in one scrape with another kv_cache_memory_bytes or num_gpu_blocks"
        )
    counter = name in READ_COUNTERS and math.isfinite(value)
    if counter and value < 0:
        return "below zero: a counter starts at 0 and only rises"
    if counter and not value.is_integer():
        return "not a whole number: vLLM's counters count whole tokens and preemptions"
    if math.isfinite(value) and name not in FRACTIONS and abs(value) >= 2**63:  # a row's int64 holds < 2^63
        return f"beyond {2**63 - 1:,}: a number too large to hold"
    return None


def sample_note(source: str, line: int | None, name: str, value: float) -> Note:
    """The warning for a sample :func:`take_sample` read as unknown (``line`` ``None``: no file line)."""
    where = source if line is None else f"{source}:{line}"
    if math.isfinite(value):
        text = (
            f"{where}: {name} is {value:g}, outside 0–1 (vLLM exports KV cache usage as a fraction of its "
            "blocks): read as unknown"
        )
        return Note(text, code="kv-usage-out-of-range", file=source, line=line)
    shown = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    text = f"{where}: {name} is {shown} (not a finite number): read as unknown"
    return Note(text, code="metrics-non-finite", file=source, line=line)


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


def metrics_rows(scrapes: Sequence[Scrape]) -> tuple[list[dict], list[str]]:
    """One row per scrape and engine, and the warnings; intervals in time order when all are timed."""
    order = list(range(len(scrapes)))
    if all(scrape.time is not None for scrape in scrapes):
        order.sort(key=lambda i: scrapes[i].time)
    previous: dict[int | None, tuple[Scrape, dict]] = {}
    rows: dict[tuple[int, int | None], dict] = {}
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
            disagree = _down_without_restart(before, scrape, engine, last, values)
            if disagree is not None:  # the scrapes disagree: the interval's increase is unknown
                warnings.append(disagree[1])
                last = {name: v for name, v in last.items() if name not in disagree[0]}
            anew = _created_anew(scrape, engine, before, last, warnings)
            if last is not None and anew:
                last = {**last, **{name: 0.0 for name in anew}}  # counted from zero since the restart
            rows[(index, engine)] = _metrics_row(scrape, engine, values, last, seconds)
            previous[engine] = (scrape, values)
    untimed = sorted({scrape.source for scrape in scrapes if scrape.time is None})
    warnings += [
        f"{source}: scrape(s) without a time (no sample timestamps, no '# <ISO time>' comment): "
        "no rates for them"
        for source in untimed
    ]
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0], -1 if k[1] is None else k[1]))], warnings


def _went_down(values: dict, last: dict | None) -> list[str]:
    """The counters (``…_total``) in ``values`` below their ``last`` value, in ``values``' order."""
    return [n for n in values if n.endswith("_total") and last and values[n] < last.get(n, 0)]


def _down_without_restart(before, scrape: Scrape, engine, last, values: dict) -> tuple | None:
    """The counters that went down but kept their ``_created`` time, and the warning; None if none."""
    went_down = _went_down(values, last)
    created_before = before.created.get(engine, {}) if before is not None else {}
    created_now = scrape.created.get(engine, {})
    names = [n for n in went_down if n in created_before and created_now.get(n) == created_before[n]]
    if not names:
        return None
    shown = ", ".join(f"{n} {last[n]:g} → {values[n]:g}" for n in names)
    note = Note(
        f"{scrape.source}:{scrape.line}: counters went down since {before.source}:{before.line} ({shown}) "
        "though their _created time did not change (no restart): the scrapes disagree, the increase over "
        "this interval is unknown",
        code=COUNTER_DOWN,
        file=scrape.source,
        line=scrape.line,
    )
    return names, note


def cache_config_disagreements(scrapes: Sequence[Scrape]) -> list[Note]:
    """A warning per file, engine and :data:`CONFIG_LABELS` label whose scrapes show two values."""
    seen: dict[tuple, tuple[str, Scrape]] = {}
    notes = []
    for scrape in scrapes:
        for engine, labels in scrape.cache_config.items():
            for label in CONFIG_LABELS:
                value = labels.get(label)
                key = (scrape.source, engine, label)
                first = seen.setdefault(key, (value, scrape)) if value is not None else None
                if first is None or first[0] == value or first[0] is None:
                    continue
                seen[key] = (None, scrape)  # one warning per file, engine and label
                notes.append(
                    Note(
                        f"{scrape.source}:{scrape.line}: vllm:cache_config_info of engine {engine} shows {label}="
                        f"{value}, but {first[0]} at {first[1].source}:{first[1].line}: the file's scrapes "
                        f"disagree, so the run is evidence for no one {label}",
                        code=CONFIG_DISAGREES,
                        file=scrape.source,
                        line=scrape.line,
                    )
                )
    return notes


def _created_anew(
    scrape: Scrape, engine: int | None, before: Scrape | None, last: dict | None, warnings: list[str]
) -> list[str]:
    """The counters of ``engine`` with a new ``_created`` time; a restart is said in ``warnings``."""
    values = scrape.values[engine]
    went_down = sorted(_went_down(values, last))
    created_before = before.created.get(engine, {}) if before is not None else {}
    anew = sorted(
        name
        for name, created in scrape.created.get(engine, {}).items()
        if name in created_before and created != created_before[name] and name not in went_down
    )
    reason = (
        f"counters went down since the previous scrape ({', '.join(went_down)})"
        if went_down
        else f"counters were created anew since the previous scrape ({', '.join(anew)}: their "
        "_created time changed)"
    )
    if went_down or anew:
        warnings.append(
            f"{scrape.source}:{scrape.line}: {reason}: the server restarted; increases count from zero"
        )
    return anew


def _metrics_row(
    scrape: Scrape, engine: int | None, values: dict, last: dict | None, seconds: float | None
) -> dict:
    """The load row of one scrape and engine; rates over the ``seconds`` since the ``last`` values."""
    usage = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc"))
    preemptions = COUNTERS["preemptions"]
    return {
        "source": scrape.source,
        "line": scrape.line,
        "time": scrape.time,
        "engine": engine,
        "kv_cache_usage_pct": None if usage is None else percent(usage),
        "running": _optional_int(values.get("vllm:num_requests_running")),
        "waiting": _optional_int(values.get("vllm:num_requests_waiting")),
        "swapped": _optional_int(values.get("vllm:num_requests_swapped")),
        "prompt_tokens_per_s": values.get(
            "vllm:avg_prompt_throughput_toks_per_s", _rate(last, values, COUNTERS["prompt"], seconds)
        ),
        "generation_tokens_per_s": values.get(
            "vllm:avg_generation_throughput_toks_per_s", _rate(last, values, COUNTERS["generation"], seconds)
        ),
        "prefix_cache_hit_pct": _hit_pct(last, values),
        "preemptions": _optional_int(
            counter_increase(last.get(preemptions) if last else None, values.get(preemptions))
        ),
        "preemptions_total": _optional_int(values.get(preemptions)),
        "kind": "metrics",
    }


def _only_int_label(configs: Sequence[dict[str, str]], name: str) -> int | None:
    """A whole-number ``vllm:cache_config_info`` label when every scrape agrees, else ``None``."""
    values = {int(c[name]) for c in configs if c.get(name, "").isdigit()}
    return values.pop() if len(values) == 1 else None


def source_facts(source: str, scrapes: Sequence[Scrape]) -> LoadSource:
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


def scrapes_reading(
    scrapes: Sequence[Scrape], sources: Sequence[str], notes: Sequence[str] = ()
) -> LoadReading:
    """The reading of one run's scrapes: rows, the reader's ``notes`` then the rows' warnings, facts."""
    rows, warnings = metrics_rows(scrapes)
    facts = [source_facts(source, scrapes) for source in sources]
    disagree = cache_config_disagreements(scrapes)
    return reading_of([frame_of(rows)], [*notes, *disagree, *warnings], facts)
