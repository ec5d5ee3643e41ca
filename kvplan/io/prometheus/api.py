"""Prometheus' HTTP API read a page of time at a time (about :data:`PAGE_POINTS` points): raw samples or steps."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

import requests

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
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PrometheusError(
            f"time {text!r}: expected Unix seconds or an ISO 8601 time (2026-11-24T09:17:30Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


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
    series = []
    for item in result:
        points = [(float(t), float(v)) for t, v in item.get("values", ()) if low < float(t) <= high]
        if points:
            series.append(Series(item.get("metric", {}), points))
    return series


def series_pages(
    url: str, selector: str, start: float, end: float, step: float | None = None
) -> Iterator[list[Series]]:
    """The series of ``selector`` from ``start`` to ``end`` [Unix s] a page at a time: raw samples, or every
    ``step`` [s]."""
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
                params = {
                    "query": selector,
                    "start": f"{first:.3f}",
                    "end": f"{high:.3f}",
                    "step": f"{step:g}",
                }
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
