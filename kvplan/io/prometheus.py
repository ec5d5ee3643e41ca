"""Prometheus' HTTP API read a page of time at a time, and vLLM's series in it and in /metrics: load evidence
(:func:`read_prometheus_load`), each engine's running KV value (:class:`RunningValue`), a launch's alert rules."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import requests

from kvplan.io.load import LoadReading, Sample, parse_metrics_text, read_load_evidence, samples_reading
from kvplan.io.load.scrapes import CACHE_CONFIG, CREATED, READ
from kvplan.units import MiB

PAGE_POINTS = 50_000  # points (series × timestamps) per request once the series count is known
MIN_INTERVAL_SECONDS = 1.0  # raw samples: the scrape interval assumed until a page shows it
MAX_STEPS = 10_000  # query_range: Prometheus refuses more than 11,000 points per series
TIMEOUT_SECONDS = 60.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class PrometheusError(ValueError):
    """Prometheus could not be read or answered with an error; the message names the URL and the query."""


@dataclass(frozen=True)
class Series:
    """One series of a page: its labels (``__name__`` included) and its ``(unix_seconds, value)`` points."""

    labels: Mapping[str, str]
    points: list[tuple[float, float]]


def parse_time(text: str) -> float:
    """A Unix time [s] from Unix seconds or ISO 8601 (without an offset: UTC).

    >>> parse_time("1795511850"), parse_time("2026-11-24T09:17:30Z"), parse_time("2026-11-24 09:17:30")
    (1795511850.0, 1795511850.0, 1795511850.0)
    """
    with contextlib.suppress(ValueError):
        return float(text)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PrometheusError(
            f"time {text!r}: expected Unix seconds or an ISO 8601 time (2026-11-24T09:17:30Z)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def parse_duration(text: str) -> float:
    """A Prometheus duration [s]: ``15s``, ``1m``, ``500ms`` or plain seconds.

    >>> parse_duration("15s"), parse_duration("1m"), parse_duration("30")
    (15.0, 60.0, 30.0)
    """
    match = _DURATION.match(text.strip())
    if not match or float(match[1]) <= 0:
        raise PrometheusError(f"duration {text!r}: expected a positive number with ms, s, m, h or d (15s)")
    return float(match[1]) * _UNIT_SECONDS[match[2]]


def _get(session: requests.Session, url: str, path: str, params: dict, kind: str = "matrix") -> list[dict]:
    """The ``data.result`` of one API request; a refused request or an error answer is a PrometheusError."""
    where = f"{url.rstrip('/')}{path}"
    try:
        response = session.get(where, params=params, timeout=TIMEOUT_SECONDS)
        body = response.json()
    except requests.RequestException as exc:
        reason = "no answer" if isinstance(exc, requests.ConnectionError) else type(exc).__name__
        raise PrometheusError(f"{where}: cannot read Prometheus ({reason})") from None
    except ValueError:
        raise PrometheusError(
            f"{where}: HTTP {response.status_code}, expected Prometheus' JSON answer"
        ) from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", body) if isinstance(body, dict) else body
        raise PrometheusError(f"{where}: query {params.get('query')!r} failed: {error}")
    data = body.get("data") or {}
    if data.get("resultType") != kind:
        raise PrometheusError(f"{where}: expected a {kind} answer, got {data.get('resultType')!r}")
    return data.get("result") or []


def instant_series(url: str, selector: str, at: float) -> list[Series]:
    """Each series of ``selector`` at ``at`` [Unix s] with its one point (an instant query)."""
    with requests.Session() as session:
        result = _get(session, url, "/api/v1/query", {"query": selector, "time": f"{at:.3f}"}, "vector")
    points = [(float(item["value"][0]), float(item["value"][1])) for item in result]
    return [Series(item.get("metric", {}), [point]) for item, point in zip(result, points)]


def _series(result: list[dict], low: float, high: float) -> list[Series]:
    """The series of one answer with the points in ``(low, high]`` (pages share no point)."""
    kept = (
        [(float(t), float(v)) for t, v in item.get("values", ()) if low < float(t) <= high] for item in result
    )
    return [Series(item.get("metric", {}), points) for item, points in zip(result, kept) if points]


def series_pages(
    url: str, selector: str, start: float, end: float, step: float | None = None
) -> Iterator[list[Series]]:
    """The series of ``selector`` from ``start`` to ``end`` [Unix s] a page at a time (or every ``step`` [s])."""
    if not end >= start:
        raise PrometheusError(f"--end {end:g} is before --start {start:g}")
    low = math.nextafter(start, -math.inf)  # the first page includes start
    with requests.Session() as session:
        count = _series_count(session, url, selector, start, end)
        interval = step or MIN_INTERVAL_SECONDS  # until the pages show the scrape interval
        last: float | None = None  # the latest sample time seen
        while low < end:
            width = interval * max(1.0, PAGE_POINTS / count)
            if step is not None:
                width = min(width, step * MAX_STEPS)
            high = min(end, low + width)
            if step is None:
                seconds = max(1, math.ceil(high - low))
                params = {"query": f"{selector}[{seconds}s]", "time": f"{high:.3f}"}
                result = _get(session, url, "/api/v1/query", params)
            else:
                first = start + math.floor((low - start) / step + 1) * step  # the first step after low
                params = dict(query=selector, start=f"{first:.3f}", end=f"{high:.3f}", step=f"{step:g}")
                result = _get(session, url, "/api/v1/query_range", params) if first <= high else []
            page = _series(result, low, high)
            del result
            yield page
            if step is None:
                interval, last = _interval(page, last, interval)
            del page  # one page alive at a time
            low = high


def _series_count(session: requests.Session, url: str, selector: str, start: float, end: float) -> int:
    """How many series ``selector`` has between ``start`` and ``end`` (Prometheus counts; at least 1)."""
    seconds = max(1, math.ceil(end - start) + 1)
    params = {"query": f"count(last_over_time({selector}[{seconds}s]))", "time": f"{end:.3f}"}
    result = _get(session, url, "/api/v1/query", params, "vector")
    return max(1, int(float(result[0]["value"][1]))) if result else 1


def _interval(page: list[Series], last: float | None, interval: float) -> tuple[float, float | None]:
    """The scrape interval [s] seen so far (the shortest gap, with the previous ``last``) and the latest time."""
    times = sorted({t for series in page for t, _ in series.points} | ({last} if last is not None else set()))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if not gaps:
        return interval, times[-1] if times else last
    return (min(gaps) if interval == MIN_INTERVAL_SECONDS else min(interval, *gaps)), times[-1]


QUERIED = tuple(sorted({*READ, *CREATED, CACHE_CONFIG}))  # the metric names the file reader reads
TARGET_LABELS = ("job", "instance", "pod", "namespace")  # labels telling one scrape target from another
_MATCHERS = re.compile(r"^\s*\{(?P<inner>.*)\}\s*$", re.DOTALL)
_INITIALIZED = re.compile(
    r"Engine (?P<engine>\d+): vllm cache_config_info with initialization after num_gpu_blocks is:\s*(?P<blocks>\d+)"
)
ABSENT = "absent"  # a cache_config_info without the label (a vLLM release before the field)


@dataclass(frozen=True)
class RunningValue:
    """One engine's ``vllm:cache_config_info``: ``kv_cache_memory_bytes`` (``None``: run without the flag;
    :data:`ABSENT`: not shown) and ``num_gpu_blocks`` (``None``: not shown), ``where`` it was read."""

    where: str
    engine: str
    kv_cache_memory_bytes: int | str | None
    num_gpu_blocks: int | None
    shows_bytes: bool = True  # False: a source that never shows the bytes (the log line)


def _label_int(labels: Mapping[str, str], name: str) -> int | str | None:
    """A whole-number label as ``int``, "None" as ``None``, anything else (or none) as :data:`ABSENT`."""
    value = labels.get(name, "").strip()
    if value == "None":
        return None
    return int(value) if value.isdigit() else ABSENT


def _running(where: str, labels: Mapping[str, str]) -> RunningValue:
    value, blocks = (_label_int(labels, name) for name in ("kv_cache_memory_bytes", "num_gpu_blocks"))
    return RunningValue(where, labels.get("engine", "0"), value, blocks if isinstance(blocks, int) else None)


def running_values_at(url: str, at: float, match: str | None = None) -> list[RunningValue]:
    """Every engine's running value in Prometheus at ``at`` [Unix s], one per ``vllm:cache_config_info`` series."""
    values = []
    for series in instant_series(url, _selector("vllm:cache_config_info", _matchers(match)), at):
        labels = series.labels
        target = ",".join(f'{k}="{labels[k]}"' for k in TARGET_LABELS if labels.get(k))
        values.append(_running(f"prometheus {url} {{{target}}}", labels))
    return values


def running_values_of_metrics(paths: Sequence[str | Path]) -> list[RunningValue]:
    """Every running value each /metrics file's scrapes show, each at its last scrape (all are judged)."""
    values: list[RunningValue] = []
    for path in paths:
        seen: dict[tuple, RunningValue] = {}
        for scrape in parse_metrics_text(Path(path).read_text(), str(path)):
            for config in scrape.cache_config.values():
                value = _running(f"{path}:{scrape.line}", config)
                seen.pop(key := (value.engine, value.kv_cache_memory_bytes, value.num_gpu_blocks), None)
                seen[key] = value  # the latest scrape last
        values += seen.values()
    return values


def running_values_of_logs(paths: Sequence[str | Path]) -> list[RunningValue]:
    """The engines' KV blocks from the "cache_config_info with initialization" log line (last per engine)."""
    values: list[RunningValue] = []
    for path in paths:
        found: dict[str, tuple[int, int]] = {}  # engine: its last line and blocks
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if "cache_config_info with initialization" in line and (hit := _INITIALIZED.search(line)):
                    found[str(int(hit["engine"]))] = (number, int(hit["blocks"]))
        values += [
            RunningValue(f"{path}:{n}", engine, ABSENT, blocks, False)
            for engine, (n, blocks) in found.items()
        ]
    return values


def _matchers(match: str | None) -> str:
    """The label matchers of ``--match`` (in braces, without ``__name__``) without their braces; "" without."""
    found = _MATCHERS.match(match or "{}")
    if not found or "__name__" in found["inner"]:
        raise PrometheusError(
            f"--match {match!r}: expected label matchers in braces without __name__, "
            'e.g. {job="vllm",instance="canary-0:8000"}'
        )
    return found["inner"].strip()


def _selector(name: str, *matchers: str) -> str:
    """``name{MATCHERS}`` of the non-empty ``matchers``."""
    inner = ",".join(m for m in matchers if m)
    return f"{name}{{{inner}}}" if inner else name


def load_selector(match: str | None = None) -> str:
    """The PromQL selector of the names read, narrowed by ``match`` (label matchers in braces)."""
    return _selector("", f'__name__=~"^({"|".join(re.escape(name) for name in QUERIED)})$"', _matchers(match))


def _samples(pages: Iterable[list[Series]], source: str) -> Iterator[Sample]:
    """Each page's samples in time order, refusing series of several scrape targets."""
    targets: set[tuple[str, ...]] = set()
    for page in pages:
        targets |= {tuple(s.labels.get(k, "") for k in TARGET_LABELS) for s in page}
        if len(targets) > 1:
            shown = ", ".join(
                "{" + ",".join(f'{k}="{v}"' for k, v in zip(TARGET_LABELS, t) if v) + "}"
                for t in sorted(targets)[:3]
            )
            raise PrometheusError(
                f"{source}: the series come from {len(targets)} scrape targets ({shown}…); one run is one "
                "server: choose it with --match"
            )
        points = sorted(
            ((t, i, v) for i, s in enumerate(page) for t, v in s.points), key=lambda p: (p[0], p[1])
        )
        for t, i, v in points:
            yield Sample(page[i].labels["__name__"], page[i].labels, t, v)
        del page, points  # not held while the next page is read


def read_prometheus_load(
    url: str, start: float, end: float, step: float | None = None, match: str | None = None
) -> LoadReading:
    """One server's load evidence in Prometheus from ``start`` to ``end`` [Unix s] (or every ``step`` [s])."""
    source = f"prometheus {url}"
    pages = series_pages(url, load_selector(match), start, end, step)
    return samples_reading(_samples(pages, source), source)


def read_load_run(
    files: Sequence[str | Path],
    year: int | None = None,
    prometheus: str | None = None,
    window: Sequence[str | float | None] = (),
    step: str | float | None = None,
) -> LoadReading:
    """One run's load evidence (notebook 06): its ``files``, with its /metrics series from ``prometheus``
    over ``window`` = ``(start, end[, match])`` at ``step`` (``"15s"``) in place of /metrics files."""
    if prometheus is None:
        return read_load_evidence(files, year=year)
    if len(window) not in (2, 3) or window[0] is None or window[1] is None:
        raise PrometheusError(
            f"prometheus {prometheus}: a run's window is (start, end[, match]), got {window!r}"
        )
    start, end = (parse_time(str(moment)) for moment in window[:2])
    match = str(window[2]) if len(window) == 3 and window[2] else None
    seconds = None if step is None else parse_duration(str(step))
    scrapes = read_prometheus_load(prometheus, start, end, step=seconds, match=match)
    return read_load_evidence(files, year=year, scrapes=scrapes)


# a label value as Prometheus text writes it
_ESCAPED = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})


def sample_line(sample: Sample) -> str:
    """One sample as a /metrics line with its timestamp [ms], which the file reader reads back.

    >>> sample_line(Sample("vllm:num_requests_running", {"__name__": "x", "engine": "0"}, 1795511850.0, 32.0))
    'vllm:num_requests_running{engine="0"} 32.0 1795511850000\\n'
    """
    labels = ",".join(f'{k}="{v.translate(_ESCAPED)}"' for k, v in sample.labels.items() if k != "__name__")
    value, stamp = float(sample.value), round((sample.timestamp or 0.0) * 1000)
    number = repr(value) if math.isfinite(value) else {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, "NaN")
    return f"{sample.name}{{{labels}}} {number} {stamp}\n"


def save_prometheus_load(
    url: str, start: float, end: float, step: float | None, match: str | None, path: str | Path
) -> Path:
    """Write what :func:`read_prometheus_load` reads as a /metrics file (atomically) that reads back alike."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    pages = series_pages(url, load_selector(match), start, end, step)
    with open(partial, "w", encoding="utf-8") as out:
        out.writelines(sample_line(sample) for sample in _samples(pages, f"prometheus {url}"))
    os.replace(partial, path)
    return path


WARM_UP = "10m"  # the reserve rule waits this long: warm-up and a restart's profiling pass
WINDOW = "15m"  # the preemption and KV-usage windows


def alert_rules(
    digest: str,
    approved_bytes: int,
    reserve_bytes: int,
    max_preemptions: int = 0,
    kv_usage_pct: float = 95.0,
    matchers: str = "",
) -> str:
    """The rules file of an approved launch (``digest``: the bundle's hex SHA-256), each rule scoped by
    ``matchers``; YAML values written as JSON strings, so no label can change its structure.

    >>> text = alert_rules("ab" * 32, 12_884_377_600, 966_367_641)
    >>> [line.split(": ", 1)[1] for line in text.splitlines() if "alert:" in line]
    ['KvplanRunningValueDiffers', 'KvplanGpuFreeBelowReserve', 'KvplanPreemptions', 'KvplanKvCacheUsageHigh']
    >>> 'kv_cache_memory_bytes!=\\\\"12884377600\\\\"' in text
    True
    """
    config = _selector("vllm:cache_config_info", matchers, f'kv_cache_memory_bytes!="{approved_bytes}"')
    free = _selector("DCGM_FI_DEV_FB_FREE", matchers)
    preemptions = _selector("vllm:num_preemptions_total", matchers)
    usage = _selector("vllm:kv_cache_usage_perc", matchers)
    rules = [  # alert, expr, for, summary
        ("KvplanRunningValueDiffers", config, None,
         f"an engine runs another KV value than the approved --kv-cache-memory-bytes={approved_bytes}"),
        ("KvplanGpuFreeBelowReserve", f"{free} * {MiB} < {reserve_bytes}", WARM_UP,
         f"a GPU has less free memory than the approved reserve of {reserve_bytes} bytes"),
        ("KvplanPreemptions", f"increase({preemptions}[{WINDOW}]) > {max_preemptions}", None,
         f"more than {max_preemptions} preemption(s) in {WINDOW}, beyond the approved load policy"),
        ("KvplanKvCacheUsageHigh", f"{usage} > {kv_usage_pct / 100:g}", WINDOW,
         f"KV cache usage above {kv_usage_pct:g}% for {WINDOW}"),
    ]  # fmt: skip
    sealed = json.dumps("sha256:" + digest)
    lines = ["groups:", f"  - name: {json.dumps('kvplan-' + digest[:12])}", "    rules:"]
    for alert, expr, duration, summary in rules:
        lines += [f"      - alert: {alert}", f"        expr: {json.dumps(expr)}"]
        lines += [f"        for: {duration}"] if duration else []
        lines += ["        labels:", "          severity: critical", "        annotations:"]
        lines += [f"          summary: {json.dumps(summary)}", f"          kvplan_bundle_digest: {sealed}"]
    return "\n".join(lines) + "\n"
