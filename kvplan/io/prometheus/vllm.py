"""vLLM's series from Prometheus and /metrics: load evidence over time, the running KV value at a time.

:func:`read_prometheus_load` asks for every name the /metrics file reader reads (:data:`QUERIED`: V0 and
V1 names alike, the counters' ``_created`` times and ``vllm:cache_config_info``), a page of time at a time
(:func:`~kvplan.io.prometheus.api.series_pages`), and hands the samples in time order to
:func:`kvplan.io.load.samples_reading`: the same rows, counter resets and warnings as the same samples in
scrape files. Series of more than one scrape target (``job``/``instance``/``pod``/``namespace``) would be
summed into one server: refused, narrow them with ``--match``.

The running value (:class:`RunningValue`, one per engine) is what ``vllm:cache_config_info`` shows —
``kv_cache_memory_bytes`` and ``num_gpu_blocks`` — from Prometheus at a time (:func:`running_values_at`), the
last scrape of /metrics files (:func:`running_values_of_metrics`), or vLLM's log line "Engine 000: vllm
cache_config_info with initialization after num_gpu_blocks is: N" (:func:`running_values_of_logs`: blocks
only).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvplan.io.load import LoadReading, Sample, parse_metrics_text, read_load_evidence, samples_reading
from kvplan.io.load.scrapes import CACHE_CONFIG, CREATED, READ
from kvplan.io.prometheus.api import (
    PrometheusError,
    Series,
    instant_series,
    parse_duration,
    parse_time,
    series_pages,
)

QUERIED = tuple(sorted({*READ, *CREATED, CACHE_CONFIG}))  # the metric names the file reader reads
TARGET_LABELS = ("job", "instance", "pod", "namespace")  # labels telling one scrape target from another
_MATCHERS = re.compile(r"^\s*\{(?P<inner>.*)\}\s*$", re.DOTALL)
_INITIALIZED = re.compile(
    r"Engine (?P<engine>\d+): vllm cache_config_info with initialization after num_gpu_blocks is:\s*(?P<blocks>\d+)"
)
ABSENT = "absent"  # a cache_config_info without the label (a vLLM release before the field)


@dataclass(frozen=True)
class RunningValue:
    """What one engine's ``vllm:cache_config_info`` shows: ``kv_cache_memory_bytes`` (an ``int``; ``None``:
    the label says None, a run without ``--kv-cache-memory-bytes``; :data:`ABSENT`: no such label or no
    such line) and ``num_gpu_blocks`` (``None``: not shown). ``where`` names the file and line or the
    Prometheus series."""

    where: str
    engine: str
    kv_cache_memory_bytes: int | str | None
    num_gpu_blocks: int | None
    shows_bytes: bool = True  # False: a source that never shows the bytes (the log line)


def _label_int(labels: Mapping[str, str], name: str) -> int | str | None:
    """A whole-number label as ``int``; "None" as ``None``; missing as :data:`ABSENT`; anything else as
    :data:`ABSENT` too (kvplan cannot read it)."""
    value = labels.get(name)
    if value is None:
        return ABSENT
    if value.strip() == "None":
        return None
    return int(value) if value.strip().isdigit() else ABSENT


def _running(where: str, labels: Mapping[str, str]) -> RunningValue:
    blocks = _label_int(labels, "num_gpu_blocks")
    return RunningValue(
        where, labels.get("engine", "0"), _label_int(labels, "kv_cache_memory_bytes"),
        blocks if isinstance(blocks, int) else None,
    )  # fmt: skip


def running_values_at(url: str, at: float, match: str | None = None) -> list[RunningValue]:
    """Every engine's running value in Prometheus at ``at`` [Unix s]: one per series of
    ``vllm:cache_config_info`` (each target and engine), named by its target labels."""
    values = []
    for series in instant_series(url, _matchers("vllm:cache_config_info", match), at):
        labels = series.labels
        target = ",".join(f'{k}="{labels[k]}"' for k in TARGET_LABELS if labels.get(k))
        values.append(_running(f"prometheus {url} {{{target}}}", labels))
    return values


def running_values_of_metrics(paths: Sequence[str | Path]) -> list[RunningValue]:
    """Each engine's running values in each /metrics file: every value its scrapes show, each at its last
    scrape (scrapes that disagree are each judged: the safe side)."""
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
    """The engines' KV blocks from vLLM's "vllm cache_config_info with initialization" log line (the last
    per engine and file); the bytes are not in that line (:data:`ABSENT`).

    >>> import tempfile, os
    >>> line = "(APIServer pid=1624) INFO 09-24 20:54:37 [loggers.py:142] Engine 000: vllm cache_config_info "
    >>> with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
    ...     _ = log.write(line + "with initialization after num_gpu_blocks is: 14834\\n")
    >>> [(v.engine, v.num_gpu_blocks, v.kv_cache_memory_bytes) for v in running_values_of_logs([log.name])]
    [('0', 14834, 'absent')]
    >>> os.unlink(log.name)
    """
    values: list[RunningValue] = []
    for path in paths:
        found: dict[str, RunningValue] = {}
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if "cache_config_info with initialization" in line and (hit := _INITIALIZED.search(line)):
                    engine = str(int(hit["engine"]))
                    found[engine] = RunningValue(
                        f"{path}:{number}", engine, ABSENT, int(hit["blocks"]), False
                    )
        values += found.values()
    return values


def _matchers(name: str, match: str | None) -> str:
    """``name{MATCHERS}`` of ``--match`` (label matchers in braces, without ``__name__``)."""
    if not match:
        return name
    found = _MATCHERS.match(match)
    if not found or "__name__" in found["inner"]:
        raise PrometheusError(
            f"--match {match!r}: expected label matchers in braces without __name__, "
            'e.g. {job="vllm",instance="canary-0:8000"}'
        )
    return f"{name}{{{found['inner'].strip()}}}"


def load_selector(match: str | None = None) -> str:
    """The PromQL selector of the names read, narrowed by ``match`` (label matchers in braces).

    >>> load_selector('{job="vllm"}').endswith('_total)$",job="vllm"}')
    True
    """
    names = "|".join(re.escape(name) for name in QUERIED)
    narrowed = _matchers("", match)
    inner = f",{narrowed[1:-1]}" if narrowed.strip("{}").strip() else ""
    return f'{{__name__=~"^({names})$"{inner}}}'


def _samples(pages: Iterable[list[Series]], source: str) -> Iterator[Sample]:
    """Each page's samples in time order (series order within a time), checking one target only."""
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
            labels = page[i].labels
            yield Sample(labels["__name__"], labels, t, v)
        del page, points  # not held while the next page is read


def read_prometheus_load(
    url: str, start: float, end: float, step: float | None = None, match: str | None = None
) -> LoadReading:
    """One server's load evidence from Prometheus at ``url`` between ``start`` and ``end`` [Unix s].

    Without ``step`` the samples as scraped; with it Prometheus' value every ``step`` seconds. Rows and
    warnings name the source ``prometheus URL``; a row's line is its scrape's first sample, counted from 1.
    """
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
    """One run's load evidence: its ``files`` (server logs, /metrics files), or with ``prometheus`` (a
    server's URL) its logs among them and its /metrics series from the server, in place of its /metrics files.

    ``window`` is ``(start, end)`` or ``(start, end, match)``: Unix s or ISO 8601 times (UTC) and label
    matchers choosing the run's server; ``step`` a duration (``"15s"``; None: every sample as scraped).
    Notebook 06 reads its runs here: the same rows as from the files the server was scraped into.
    """
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


def _escape(value: str) -> str:
    """A label value as Prometheus text writes it (backslash, newline and quote escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    """A sample value as Prometheus text writes it (``NaN``, ``+Inf``, ``-Inf``)."""
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if math.isfinite(value) else ("+Inf" if value > 0 else "-Inf")


def sample_line(sample: Sample) -> str:
    """One sample as a /metrics line with its timestamp [ms], which the file reader reads back.

    >>> sample_line(Sample("vllm:num_requests_running", {"__name__": "x", "engine": "0"}, 1795511850.0, 32.0))
    'vllm:num_requests_running{engine="0"} 32.0 1795511850000\\n'
    """
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels.items() if k != "__name__")
    stamp = round((sample.timestamp or 0.0) * 1000)
    return f"{sample.name}{{{labels}}} {_number(sample.value)} {stamp}\n"


def save_prometheus_load(
    url: str, start: float, end: float, step: float | None, match: str | None, path: str | Path
) -> Path:
    """Write what :func:`read_prometheus_load` reads as a /metrics file (each sample with its timestamp), so
    an evidence bundle keeps the samples and the file reader gives back the same rows; written atomically."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    pages = series_pages(url, load_selector(match), start, end, step)
    with open(partial, "w", encoding="utf-8") as out:
        out.writelines(sample_line(sample) for sample in _samples(pages, f"prometheus {url}"))
    os.replace(partial, path)
    return path
