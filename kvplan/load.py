"""A budget under load: timeline, summary and gate checks from vLLM stats lines and /metrics scrapes.

A budget that boots is necessary, not sufficient. During a load test vLLM reports KV cache usage, running and
waiting requests, throughput and preemptions (periodic stats lines in the server log, and the Prometheus
``/metrics`` endpoint); OOMs show up as error lines. The readers in :mod:`kvplan.io.vllm_stats` and
:mod:`kvplan.io.prometheus_text` turn that evidence into :class:`LoadRow` s; this module turns rows into a
timeline (:func:`load_timeline`), a JSON-ready summary (:func:`load_summary`) and gate checks
(:func:`load_checks`). Everything here is pure: no file is read.

Units: usage and hit rates in percent (0–100), throughput in tokens per second, capacity in tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.verdict import Check

ROW_KEYS = (
    "source",
    "line",
    "time",
    "engine",
    "kv_cache_usage_pct",
    "running",
    "waiting",
    "swapped",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_cache_hit_pct",
    "preemptions",
    "preemptions_total",
    "event",
)
EVENTS = ("preemption", "oom", "error")
KINDS = ("log", "metrics")
YEARLESS_TIME_FORMAT = "%m-%d %H:%M:%S"  # vLLM's own `_DATE_FORMAT`
OOM_CHECK = "no OOM under load"
PREEMPTION_CHECK = "preemptions ≤ {max_preemptions}"
PEAK_CHECK = "peak KV cache usage reported"
CAPACITY_CHECK = "capacity vs profiled canary"


class LoadFormatError(ValueError):
    """A load-test file kvplan cannot read; the message names the file, the line and what was expected."""


@dataclass(frozen=True)
class LoadRow:
    """One stats line, one /metrics scrape of one engine, or one event (preemption warning, OOM, error).

    Unknown values are ``None``. ``engine`` is vLLM's engine index (``Engine 001`` → 1, ``engine="1"`` → 1);
    ``None`` when the evidence names no engine (V0, or ``N Engines Aggregated``). ``kind`` says which
    family of evidence the row came from (``log`` or ``metrics``); ``year_known`` is False when the time
    comes from vLLM's yearless ``%m-%d %H:%M:%S`` stamp with no year given; ``restarts`` counts the server
    restarts the file showed before this row (a log's counters, e.g. V0's ``total_num_cumulative_preemption``,
    start again from zero after each); ``raw`` is the text the row was read from (provenance). Only
    :data:`ROW_KEYS` go into :meth:`to_dict`.

    Times are naive: /metrics times are UTC, log times the server's local time unless the reader was given
    the server's UTC offset (see :func:`kvplan.io.vllm_stats.read_load_evidence`).

    >>> LoadRow("server.log", 7, None, 0, kv_cache_usage_pct=41.5, event=None).to_dict()["kv_cache_usage_pct"]
    41.5
    """

    source: str
    line: int
    time: datetime | None
    engine: int | None
    kv_cache_usage_pct: float | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prefix_cache_hit_pct: float | None = None
    preemptions: int | None = None
    preemptions_total: int | None = None
    event: str | None = None
    kind: str = "log"
    year_known: bool = True
    restarts: int = 0
    raw: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.event is not None and self.event not in EVENTS:
            raise ValueError(f"unknown load event {self.event!r} (expected one of {EVENTS})")
        if self.kind not in KINDS:
            raise ValueError(f"unknown evidence kind {self.kind!r} (expected one of {KINDS})")

    @property
    def time_text(self) -> str | None:
        """ISO 8601 time, or vLLM's ``MM-DD HH:MM:SS`` when the year is unknown.

        >>> LoadRow("a.log", 1, datetime(2000, 11, 29, 10, 0, 10), None, year_known=False).time_text
        '11-29 10:00:10'
        """
        if self.time is None:
            return None
        return self.time.isoformat() if self.year_known else self.time.strftime(YEARLESS_TIME_FORMAT)

    def to_dict(self) -> dict:
        """JSON-ready dict with exactly the keys of :data:`ROW_KEYS`; a ``NaN`` or ``±Inf`` value is unknown.

        >>> LoadRow("m.prom", 1, None, 0, kv_cache_usage_pct=float("nan")).to_dict()["kv_cache_usage_pct"]
        """
        data = {key: finite(getattr(self, key)) for key in ROW_KEYS}
        data["time"] = self.time_text
        return data


@dataclass(frozen=True)
class LoadSource:
    """What one file says about the server it came from, besides its rows.

    ``kv_cache_tokens`` is the KV capacity in tokens (vLLM's "GPU KV cache size: N tokens" line, or
    ``num_gpu_blocks × block_size`` from ``vllm:cache_config_info``); ``kv_cache_memory_bytes`` the manual
    ``--kv-cache-memory-bytes`` value when the log shows one (a manual-value canary);
    ``reports_preemptions`` whether the format can show a preemption at all (V1 logs before 0.11.1
    cannot); ``utc_offset_hours`` a log's offset from UTC when known (given, or read from docker
    stamps), in which case its row times are UTC.
    """

    source: str
    kind: str
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    reports_preemptions: bool = True
    utc_offset_hours: float | None = None


@dataclass(frozen=True)
class LoadReading:
    """Rows, warnings and per-file facts read from the files of one load-test run."""

    rows: tuple[LoadRow, ...]
    warnings: tuple[str, ...] = ()
    sources: tuple[LoadSource, ...] = ()

    def to_dict(self) -> dict:
        """``{"rows": [...], "warnings": [...]}``, the JSON of ``kvplan load --json``."""
        return {"rows": [row.to_dict() for row in self.rows], "warnings": list(self.warnings)}

    @property
    def kv_cache_tokens(self) -> int | None:
        """The run's KV capacity in tokens when its files state one value; ``None`` otherwise."""
        values = {s.kv_cache_tokens for s in self.sources if s.kv_cache_tokens is not None}
        return values.pop() if len(values) == 1 else None


def combine_readings(readings: Iterable[LoadReading], order: Sequence[str] = ()) -> LoadReading:
    """One reading from several, rows ordered by file (``order`` = paths as given), then by line.

    >>> a = LoadReading((LoadRow("b.log", 2, None, None),), ("w",))
    >>> b = LoadReading((LoadRow("a.log", 9, None, None),))
    >>> [row.source for row in combine_readings([a, b], order=["a.log", "b.log"]).rows]
    ['a.log', 'b.log']
    """
    readings = list(readings)
    rank = {source: position for position, source in enumerate(order)}
    rows = [row for reading in readings for row in reading.rows]
    rows.sort(key=lambda row: rank.get(row.source, len(rank)))
    return LoadReading(
        rows=tuple(rows),
        warnings=tuple(w for reading in readings for w in reading.warnings),
        sources=tuple(s for reading in readings for s in reading.sources),
    )


def counter_increase(previous: float | None, current: float | None) -> float | None:
    """Increase of a Prometheus counter between two scrapes, reset-safe (never negative).

    A counter that went down was reset by a server restart; as Prometheus' ``rate()`` does, the increase
    is then the new value (everything counted since the restart).

    >>> counter_increase(40, 52), counter_increase(52, 3), counter_increase(None, 3)
    (12, 3, None)
    """
    if previous is None or current is None:
        return None
    return current - previous if current >= previous else current


def finite(value):
    """``value`` unless it is a float ``NaN`` or ``±Inf`` (unknown: ``None``; JSON has no such numbers).

    >>> finite(41.5), finite(float("nan")), finite(float("-inf")), finite("a.log")
    (41.5, None, None, 'a.log')
    """
    return None if isinstance(value, float) and not math.isfinite(value) else value


def percent(fraction: float) -> float:
    """A 0–1 fraction as a 0–100 percentage, without float noise.

    >>> percent(0.07), percent(0.153846)
    (7.0, 15.3846)
    """
    return round(fraction * 100, 6)


# --- timeline ---------------------------------------------------------------------------------

TIMELINE_COLUMNS = [key for key in ROW_KEYS if key != "time"] + ["kind", "preemptions_cum", "elapsed_s"]


def _cumulative_preemptions(rows: Sequence[LoadRow]) -> list[int | None]:
    """Preemptions so far in the run, per row, for rows of one evidence kind and one engine.

    Metrics: the first counter value plus the reset-safe increases after it. Logs: the running sum of the
    interval counts (V1 ``Preemptions: N``) plus the reset-safe increases of V0's counter
    ``total_num_cumulative_preemption`` (which starts again from zero when the server restarts: a row
    with more ``restarts`` than the one before counts its value from zero). ``None`` until some count is
    known.

    >>> rows = [LoadRow("s.log", 1, None, None, preemptions_total=51, event="preemption"),
    ...         LoadRow("s.log", 9, None, None, preemptions_total=1, event="preemption", restarts=1)]
    >>> _cumulative_preemptions(rows)  # 51 before the restart + 1 after
    [51, 52]
    """
    total: int | None = None
    counter: int | None = None  # the last V0 counter value seen in this server's life
    restarts = rows[0].restarts if rows else 0
    out: list[int | None] = []
    for position, row in enumerate(rows):
        if row.kind == "metrics":
            if position == 0 or total is None:
                total = row.preemptions_total
            elif row.preemptions is not None:
                total += row.preemptions
        else:
            if row.restarts != restarts:
                counter, restarts = 0, row.restarts
            if row.preemptions is not None:
                total = (total or 0) + row.preemptions
            if row.preemptions_total is not None:
                increase = counter_increase(counter, row.preemptions_total)
                total = (total or 0) + (row.preemptions_total if increase is None else int(increase))
                counter = row.preemptions_total
        out.append(total)
    return out


def load_timeline(reading: LoadReading) -> pd.DataFrame:
    """The run as a DataFrame indexed by time, one row per :class:`LoadRow`, in file order.

    Columns: every :data:`ROW_KEYS` key but ``time``, plus ``kind`` (``log``/``metrics``),
    ``preemptions_cum`` (preemptions so far in the run for that engine and evidence kind, counter
    resets included, never decreasing) and ``elapsed_s`` (seconds since the run's first timed row,
    for comparing runs made at different times). Group by ``engine`` for per-engine series.

    >>> rows = (LoadRow("m", 1, datetime(2026, 1, 1, 0, 0, 0), 0, preemptions_total=5, kind="metrics"),
    ...         LoadRow("m", 9, datetime(2026, 1, 1, 0, 0, 10), 0, preemptions=2, preemptions_total=2,
    ...                 kind="metrics"))
    >>> load_timeline(LoadReading(rows))[["preemptions_cum", "elapsed_s"]].to_dict("list")
    {'preemptions_cum': [5, 7], 'elapsed_s': [0.0, 10.0]}
    """
    rows = list(reading.rows)
    cumulative: dict[int, int | None] = {}
    groups: dict[tuple, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault((row.kind, row.engine), []).append(index)
    for indices in groups.values():
        for index, value in zip(indices, _cumulative_preemptions([rows[i] for i in indices])):
            cumulative[index] = value
    frame = pd.DataFrame(
        [{**{key: getattr(row, key) for key in TIMELINE_COLUMNS[:-2]}} for row in rows],
        columns=TIMELINE_COLUMNS[:-2],
    )
    frame["preemptions_cum"] = pd.array([cumulative[i] for i in range(len(rows))], dtype="Int64")
    for column in ("line", "engine", "running", "waiting", "swapped", "preemptions", "preemptions_total"):
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    times = pd.to_datetime(pd.Series([row.time for row in rows], dtype="object"))
    start = times.min()
    frame["elapsed_s"] = (times - start).dt.total_seconds().to_numpy() if len(rows) else []
    frame.index = pd.DatetimeIndex(times, name="time")
    return frame


# --- summary ----------------------------------------------------------------------------------


def _where(row: LoadRow) -> dict:
    return {"source": row.source, "line": row.line, "time": row.time_text, "engine": row.engine}


def _where_text(row: LoadRow) -> str:
    when = f" ({row.time_text})" if row.time_text else ""
    engine = f", engine {row.engine}" if row.engine is not None else ""
    return f"{row.source}:{row.line}{when}{engine}"


def _preemptions_by_kind(reading: LoadReading) -> dict[str, tuple[int, bool]]:
    """Per evidence kind that counts preemptions: (run total summed over engines, lower bound?).

    A log's total is a lower bound when it comes from V0 preemption warnings: vLLM logs one only at the
    1st, 51st, 101st … preemption, so up to 49 more may follow the last one printed.
    """
    timeline = load_timeline(reading)
    totals = {}
    for kind, frame in timeline.groupby("kind"):
        last = frame.groupby("engine", dropna=False)["preemptions_cum"].max()
        if last.notna().any():
            from_warnings = kind == "log" and frame["preemptions_total"].notna().any()
            totals[kind] = (int(last.fillna(0).sum()), bool(from_warnings))
    return totals


def run_preemptions(reading: LoadReading) -> int | None:
    """Preemptions in the run: summed over engines, the larger of what logs and metrics show.

    Logs and /metrics of one run count the same preemptions, so the two kinds are never added.
    ``None`` when no file can tell (e.g. a V1 log before 0.11.1 without a /metrics snapshot). When only
    V0 preemption warnings count them, the total is a lower bound (:func:`preemptions_lower_bound`).

    >>> run_preemptions(LoadReading((LoadRow("s.log", 3, None, 0, preemptions=4),
    ...                              LoadRow("s.log", 9, None, 0, preemptions=0))))
    4
    """
    totals = _preemptions_by_kind(reading)
    if totals:
        return max(total for total, _ in totals.values())
    if reading.rows and all(s.reports_preemptions for s in reading.sources) and reading.sources:
        return 0
    return None


def preemptions_lower_bound(reading: LoadReading) -> bool:
    """True when :func:`run_preemptions` is only a lower bound: no exact count (a /metrics counter, V1's
    ``Preemptions: N``) reaches the total that V0's every-50th preemption warning shows.

    >>> preemptions_lower_bound(LoadReading((LoadRow("s.log", 5, None, None, preemptions_total=51,
    ...                                              event="preemption"),)))
    True
    """
    totals = _preemptions_by_kind(reading)
    if not totals:
        return False
    top = max(total for total, _ in totals.values())
    return all(bound for total, bound in totals.values() if total == top)


def _interval_seconds(rows: Sequence[LoadRow]) -> list[float | None]:
    """Seconds since the previous timed row of the same engine and evidence kind (``None`` for the first)."""
    last: dict[tuple, datetime] = {}
    out: list[float | None] = []
    for row in rows:
        key = (row.kind, row.engine)
        before = last.get(key)
        out.append(None if before is None or row.time is None else (row.time - before).total_seconds())
        if row.time is not None:
            last[key] = row.time
    return out


def mean_throughput(reading: LoadReading) -> tuple[float | None, float | None, str | None]:
    """The run's mean prompt and generation throughput [tokens/s] and the evidence kind they come from.

    Logs and /metrics cover different intervals, so they are never averaged together. The log's own
    figures are preferred: each stats line is the average over its logging interval (all of one length),
    so their plain mean is the time-weighted mean over the logged intervals (idle intervals, which vLLM
    logs at DEBUG only, are left out). Without log figures, the /metrics rates are weighted by the seconds
    since the previous scrape of that engine (= tokens counted / seconds covered). Means are per engine,
    then summed over engines (the server's throughput).

    >>> def scrape(line, second, rate=None):
    ...     return LoadRow("m", line, datetime(2026, 1, 1, 0, 0, second), 0, generation_tokens_per_s=rate,
    ...                    kind="metrics")
    >>> rows = (scrape(1, 0), scrape(2, 10, 900.0), scrape(3, 40, 500.0))
    >>> mean_throughput(LoadReading(rows))  # (900 × 10 + 500 × 30) / 40 s = 600
    (None, 600.0, 'metrics')
    """
    rows = list(reading.rows)
    seconds = _interval_seconds(rows)
    reported = [
        (row, dt) for row, dt in zip(rows, seconds)
        if finite(row.prompt_tokens_per_s) is not None or finite(row.generation_tokens_per_s) is not None
    ]
    kind = "log" if any(row.kind == "log" for row, _ in reported) else ("metrics" if reported else None)
    means = []
    for column in ("prompt_tokens_per_s", "generation_tokens_per_s"):
        per_engine: dict[int | None, list[tuple[float, float]]] = {}
        for row, dt in reported:
            value = finite(getattr(row, column))  # means over finite values only
            if row.kind == kind and value is not None:
                weight = 1.0 if kind == "log" else dt
                per_engine.setdefault(row.engine, []).append((value, weight))
        engine_means = []
        for pairs in per_engine.values():
            weighted = [(v, w) for v, w in pairs if w]
            if not weighted:  # /metrics rates with no known interval (e.g. V0 gauges in one scrape)
                weighted = [(v, 1.0) for v, _ in pairs]
            engine_means.append(sum(v * w for v, w in weighted) / sum(w for _, w in weighted))
        means.append(round(sum(engine_means), 3) if engine_means else None)
    return means[0], means[1], kind


def _peak_row(rows: Sequence[LoadRow]) -> LoadRow | None:
    usage = [row for row in rows if finite(row.kv_cache_usage_pct) is not None]  # the peak of finite values
    return max(usage, key=lambda row: row.kv_cache_usage_pct) if usage else None


def load_summary(reading: LoadReading, kv_cache_tokens: int | None = None) -> dict:
    """JSON-ready summary of one run, for notebooks, the evidence bundle and the canary comparison.

    ``kv_cache_tokens`` overrides the capacity the files state. Keys: ``sources``, ``rows``,
    ``engines``, ``start``, ``end``, ``duration_s``, ``kv_cache_tokens``, ``kv_cache_memory_bytes`` (the
    manual ``--kv-cache-memory-bytes`` value when the log shows one), ``peak_kv_cache_usage_pct``,
    ``peak_kv_cache_tokens`` (peak usage × capacity, rounded down), ``peak_at``, ``max_running``,
    ``max_waiting``, ``mean_prompt_tokens_per_s``, ``mean_generation_tokens_per_s`` (from one evidence
    kind, ``throughput_from``: the log's interval figures when it has them, else the /metrics rates
    weighted by the seconds they cover; see :func:`mean_throughput`), ``preemptions``,
    ``preemptions_lower_bound`` (True when only V0's every-50th preemption warning counts them),
    ``oom_events``, ``error_events``, ``events``, ``warnings``.

    >>> rows = (LoadRow("s.log", 1, None, 0, kv_cache_usage_pct=50.0, generation_tokens_per_s=900.0),
    ...         LoadRow("s.log", 2, None, 0, kv_cache_usage_pct=80.0, generation_tokens_per_s=1100.0))
    >>> s = load_summary(LoadReading(rows), kv_cache_tokens=157280)
    >>> s["peak_kv_cache_usage_pct"], s["peak_kv_cache_tokens"], s["mean_generation_tokens_per_s"]
    (80.0, 125824, 1000.0)
    """
    rows = reading.rows
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    peak = _peak_row(rows)
    times = [row.time for row in rows if row.time is not None]
    timed = [row for row in rows if row.time is not None]
    events = [row for row in rows if row.event is not None]
    running = [row.running for row in rows if finite(row.running) is not None]
    waiting = [row.waiting for row in rows if finite(row.waiting) is not None]
    manual = {s.kv_cache_memory_bytes for s in reading.sources if s.kv_cache_memory_bytes is not None}
    prompt, generation, throughput_from = mean_throughput(reading)
    return {
        "sources": list(dict.fromkeys(row.source for row in rows)),
        "rows": len(rows),
        "engines": sorted({row.engine for row in rows if row.engine is not None}),
        "start": min(timed, key=lambda r: r.time).time_text if timed else None,
        "end": max(timed, key=lambda r: r.time).time_text if timed else None,
        "duration_s": (max(times) - min(times)).total_seconds() if times else None,
        "kv_cache_tokens": capacity,
        "kv_cache_memory_bytes": manual.pop() if len(manual) == 1 else None,
        "peak_kv_cache_usage_pct": peak.kv_cache_usage_pct if peak else None,
        "peak_kv_cache_tokens": (
            int(peak.kv_cache_usage_pct * capacity // 100) if peak and capacity is not None else None
        ),
        "peak_at": _where(peak) if peak else None,
        "max_running": max(running) if running else None,
        "max_waiting": max(waiting) if waiting else None,
        "mean_prompt_tokens_per_s": prompt,
        "mean_generation_tokens_per_s": generation,
        "throughput_from": throughput_from,
        "preemptions": run_preemptions(reading),
        "preemptions_lower_bound": preemptions_lower_bound(reading),
        "oom_events": sum(row.event == "oom" for row in rows),
        "error_events": sum(row.event == "error" for row in rows),
        "events": [{"event": row.event, **_where(row)} for row in events],
        "warnings": list(reading.warnings),
    }


# --- gate checks ------------------------------------------------------------------------------


def capacity_loss(kv_cache_tokens: int, profiled_kv_cache_tokens: int) -> tuple[int, float]:
    """Tokens and percent of KV capacity a manual-value canary gives up against the profiled canary.

    Negative values are a gain.

    >>> capacity_loss(157_280, 181_504)  # 181,504 − 157,280 = 24,224 tokens = 13.346%
    (24224, 13.346)
    """
    if profiled_kv_cache_tokens <= 0:
        raise ValueError(f"profiled KV capacity must be positive, got {profiled_kv_cache_tokens} tokens")
    loss = profiled_kv_cache_tokens - kv_cache_tokens
    return loss, round(100 * loss / profiled_kv_cache_tokens, 3)


def capacity_change_text(loss_tokens: int, loss_pct: float) -> str:
    """A :func:`capacity_loss` result in words: a loss, or a gain when it is negative.

    >>> capacity_change_text(24_224, 13.346), capacity_change_text(-1_424, -0.914)
    ('loss of 24,224 tokens (13.346%)', 'gain of 1,424 tokens (0.914%)')
    """
    return f"{'loss' if loss_tokens >= 0 else 'gain'} of {abs(loss_tokens):,} tokens ({abs(loss_pct):g}%)"


def load_checks(
    reading: LoadReading,
    *,
    max_preemptions: int = 0,
    profiled_kv_cache_tokens: int | None = None,
    max_capacity_loss_pct: float | None = None,
    kv_cache_tokens: int | None = None,
) -> list[Check]:
    """Gate checks for a canary's load test (``kvplan gate … --load``).

    Parameters
    ----------
    reading : the run, from :func:`kvplan.io.vllm_stats.read_load_evidence` (logs and /metrics alike).
    max_preemptions : policy threshold on preemptions in the whole run [count], default 0.
    profiled_kv_cache_tokens : KV capacity of the profiled canary [tokens]; when given (the canary is a
        manual-value canary), the capacity loss against it is checked.
    max_capacity_loss_pct : policy bound on that loss [%]; ``None`` reports the loss without a bound.
    kv_cache_tokens : the canary's KV capacity [tokens], when its load files do not state it.

    Returns the checks in order: no OOM; preemptions ≤ threshold; peak KV cache usage (reported, passes
    whenever it is known); and, with a profiled capacity, the capacity loss. ``passed`` is ``None`` when
    the evidence cannot tell.

    >>> rows = (LoadRow("s.log", 4, None, 0, kv_cache_usage_pct=88.0, preemptions=0),)
    >>> [c.passed for c in load_checks(LoadReading(rows))]
    [True, True, True]
    """
    rows = reading.rows
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    checks = [_oom_check(rows), _preemption_check(reading, max_preemptions), _peak_check(rows, capacity)]
    if profiled_kv_cache_tokens is not None:
        checks.append(_capacity_check(capacity, profiled_kv_cache_tokens, max_capacity_loss_pct))
    return checks


def _oom_check(rows: Sequence[LoadRow]) -> Check:
    name = OOM_CHECK
    if not rows:
        return Check(name, None, "no load evidence: no stats line, scrape or event was read")
    ooms = [row for row in rows if row.event == "oom"]
    errors = [row for row in rows if row.event == "error"]
    error_note = f"; {len(errors)} other error event(s), first at {_where_text(errors[0])}" if errors else ""
    if ooms:
        return Check(
            name,
            False,
            f"{len(ooms)} OOM event(s), first at {_where_text(ooms[0])}: "
            f"{ooms[0].raw.strip()[:160]}{error_note}",
        )
    return Check(
        name, True, f"no OOM line in {len({r.source for r in rows})} file(s), {len(rows)} rows{error_note}"
    )


def _preemption_check(reading: LoadReading, max_preemptions: int) -> Check:
    name = PREEMPTION_CHECK.format(max_preemptions=max_preemptions)
    total = run_preemptions(reading)
    if total is None:
        return Check(
            name,
            None,
            "these files cannot show preemptions (V1 stats lines before vLLM 0.11.1 "
            "omit them): add a /metrics snapshot with vllm:num_preemptions_total",
        )
    bound = preemptions_lower_bound(reading)
    counted = f"at least {total}" if bound else f"{total}"
    why = (
        " (vLLM V0 logs a preemption warning only at the 1st, 51st, 101st … preemption, so the "
        "log's total_num_cumulative_preemption is a lower bound)"
        if bound
        else ""
    )
    if total <= max_preemptions:
        if bound and total > 0:
            return Check(
                name,
                None,
                f"{counted} preemption(s) in the run{why}; policy allows {max_preemptions}: add a "
                "/metrics snapshot with vllm:num_preemptions_total for the exact count",
            )
        return Check(name, True, f"{total} preemption(s) in the run; policy allows {max_preemptions}")
    first = _first_preemption(reading)
    return Check(
        name,
        False,
        f"{counted} preemption(s) in the run, first seen at {_where_text(first)}; policy "
        f"allows {max_preemptions}: the KV cache ran out for this request mix (requests were "
        f"evicted and recomputed){why}",
    )


def _first_preemption(reading: LoadReading) -> LoadRow:
    """The earliest row (by time, then file order) at which some engine's preemption count is above 0."""
    timeline = load_timeline(reading).reset_index()
    firsts = [
        group.index[0]
        for _, group in timeline[timeline["preemptions_cum"].fillna(0) > 0].groupby(
            ["kind", "engine"], dropna=False
        )
    ]
    return min(
        (reading.rows[i] for i in firsts), key=lambda row: (row.time is None, row.time or datetime.min)
    )


def _peak_check(rows: Sequence[LoadRow], capacity: int | None) -> Check:
    name = PEAK_CHECK
    peak = _peak_row(rows)
    if peak is None:
        return Check(name, None, "no KV cache usage value in the load evidence")
    tokens = ""
    if capacity is not None:
        tokens = f" of {capacity:,} tokens (≈{int(peak.kv_cache_usage_pct * capacity // 100):,} tokens)"
    return Check(name, True, f"peak {peak.kv_cache_usage_pct:.1f}%{tokens} at {_where_text(peak)}")


def _capacity_check(capacity: int | None, profiled: int, bound_pct: float | None) -> Check:
    name = CAPACITY_CHECK + (f" (loss ≤ {bound_pct:g}%)" if bound_pct is not None else "")
    if capacity is None:
        return Check(
            name,
            None,
            "the canary's KV capacity is unknown: its load files state no "
            "'GPU KV cache size' line nor vllm:cache_config_info; pass it explicitly",
        )
    loss_tokens, loss_pct = capacity_loss(capacity, profiled)
    change = capacity_change_text(loss_tokens, loss_pct)
    detail = f"{capacity:,} tokens against {profiled:,} profiled: {change}"
    if bound_pct is None:
        return Check(name, True, detail + "; no policy bound set")
    return Check(name, loss_pct <= bound_pct, f"{detail}; policy bound {bound_pct:g}%")


COMPARISON_ROWS = (
    "kv_cache_tokens", "peak_kv_cache_usage_pct", "peak_kv_cache_tokens", "max_running", "max_waiting",
    "mean_generation_tokens_per_s", "preemptions", "oom_events",
)
"""The :func:`load_summary` keys that :func:`load_comparison_table` shows, in its row order."""


def load_comparison_table(summaries: Mapping[str, Mapping]) -> pd.DataFrame:
    """Runs side by side: one column per named :func:`load_summary`, one row per :data:`COMPARISON_ROWS` key.

    A key a summary lacks is left empty (NaN).

    >>> runs = {"a": {"kv_cache_tokens": 100, "preemptions": 0}, "b": {"kv_cache_tokens": 90}}
    >>> load_comparison_table(runs).loc[["kv_cache_tokens", "preemptions"]]
                       a    b
    kv_cache_tokens  100   90
    preemptions        0  NaN
    """
    columns = {name: pd.Series(dict(summary), dtype=object) for name, summary in summaries.items()}
    return pd.DataFrame(columns).reindex(list(COMPARISON_ROWS))


def canary_capacity_headline(profiled: Mapping, canary: Mapping) -> dict[str, str]:
    """Capacity of the profiled and the manual-value canary and the change between them, for a headline.

    ``profiled`` and ``canary`` are :func:`load_summary` dicts; the canary's line names the
    ``--kv-cache-memory-bytes`` value its log shows, and the change is :func:`capacity_loss` in words.

    >>> canary = {"kv_cache_tokens": 157_280, "kv_cache_memory_bytes": 12_884_377_600}
    >>> headline = canary_capacity_headline({"kv_cache_tokens": 155_856}, canary)
    >>> for label, text in headline.items():
    ...     print(f"{label}: {text}")
    profiled canary: 155,856 tokens
    manual-value canary: 157,280 tokens (--kv-cache-memory-bytes=12884377600)
    capacity change: gain of 1,424 tokens (0.914%)
    """
    for name, summary in (("profiled", profiled), ("manual-value", canary)):
        if summary.get("kv_cache_tokens") is None:
            raise ValueError(f"the {name} canary's files show no KV cache capacity (GPU KV cache size)")
    manual = canary.get("kv_cache_memory_bytes")
    flag = f" ({kv_cache_flag(manual)})" if manual is not None else ""
    return {
        "profiled canary": f"{profiled['kv_cache_tokens']:,} tokens",
        "manual-value canary": f"{canary['kv_cache_tokens']:,} tokens{flag}",
        "capacity change": capacity_change_text(*capacity_loss(canary["kv_cache_tokens"],
                                                               profiled["kv_cache_tokens"])),
    }
