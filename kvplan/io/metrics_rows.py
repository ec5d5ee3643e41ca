"""From /metrics scrapes to load rows: rates, preemptions and restarts between scrapes, per engine.

A :class:`Scrape` holds the sample values of one scrape that a row reads (:data:`READ`), per engine;
:func:`metrics_rows` turns a run's scrapes into one :class:`~kvplan.load_rows.LoadRow` per scrape and engine:
``vllm:kv_cache_usage_perc`` (else ``vllm:gpu_cache_usage_perc``) as 0–100 %, ``vllm:num_requests_*``,
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` as rates between scrapes (else V0's
``vllm:avg_*_throughput_toks_per_s`` gauges), the prefix cache hit rate from its counters (else V0's
gauge), and ``vllm:num_preemptions_total``. Counters that go down, or whose ``_created`` time changed, were
reset by a restart and count from zero, never negative. A KV usage outside 0–1 (which vLLM cannot export) is
unknown, with a warning naming the file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kvplan.load_rows import LoadRow, LoadSource, counter_increase, percent

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
