"""vLLM's series in Prometheus and /metrics: load evidence (:func:`read_prometheus_load`, the same rows as the
samples in files), each engine's running KV value (:class:`RunningValue`) and the alert rules of a launch.
"""

from __future__ import annotations

import json
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
from kvplan.units import MiB

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
    """Every engine's running value in Prometheus at ``at`` [Unix s], one per ``vllm:cache_config_info`` series."""
    values = []
    for series in instant_series(url, _matchers("vllm:cache_config_info", match), at):
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
    """The PromQL selector of the names read, narrowed by ``match`` (label matchers in braces)."""
    names = "|".join(re.escape(name) for name in QUERIED)
    narrowed = _matchers("", match)
    inner = f",{narrowed[1:-1]}" if narrowed.strip("{}").strip() else ""
    return f'{{__name__=~"^({names})$"{inner}}}'


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
            labels = page[i].labels
            yield Sample(labels["__name__"], labels, t, v)
        del page, points  # not held while the next page is read


def read_prometheus_load(
    url: str, start: float, end: float, step: float | None = None, match: str | None = None
) -> LoadReading:
    """One server's load evidence from Prometheus between ``start`` and ``end`` [Unix s], as scraped or
    every ``step`` [s]."""
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


def _selector(name: str, matchers: str, *more: str) -> str:
    inner = ",".join(m for m in (matchers, *more) if m)
    return f"{name}{{{inner}}}" if inner else name


def _rule(alert: str, expr: str, duration: str | None, summary: str, digest: str) -> list[str]:
    lines = [f"      - alert: {alert}", f"        expr: {json.dumps(expr)}"]
    if duration:
        lines.append(f"        for: {duration}")
    lines += [
        "        labels:",
        "          severity: critical",
        "        annotations:",
        f"          summary: {json.dumps(summary)}",
        f"          kvplan_bundle_digest: {json.dumps('sha256:' + digest)}",
    ]
    return lines


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
    lines = ["groups:", f"  - name: {json.dumps('kvplan-' + digest[:12])}", "    rules:"]
    lines += _rule(
        "KvplanRunningValueDiffers", config, None,
        f"an engine runs another KV value than the approved --kv-cache-memory-bytes={approved_bytes}", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanGpuFreeBelowReserve", f"{free} * {MiB} < {reserve_bytes}", WARM_UP,
        f"a GPU has less free memory than the approved reserve of {reserve_bytes} bytes", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanPreemptions", f"increase({preemptions}[{WINDOW}]) > {max_preemptions}", None,
        f"more than {max_preemptions} preemption(s) in {WINDOW}, beyond the approved load policy", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanKvCacheUsageHigh", f"{usage} > {kv_usage_pct / 100:g}", WINDOW,
        f"KV cache usage above {kv_usage_pct:g}% for {WINDOW}", digest,
    )  # fmt: skip
    return "\n".join(lines) + "\n"
