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

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvplan.io.load import LoadReading, Sample, parse_metrics_text, samples_reading
from kvplan.io.load.scrapes import CACHE_CONFIG, CREATED, READ
from kvplan.io.prometheus.api import PrometheusError, Series, instant_series, series_pages

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
    for labels in instant_series(url, _matchers("vllm:cache_config_info", match), at):
        target = ",".join(f'{k}="{labels[k]}"' for k in TARGET_LABELS if labels.get(k))
        values.append(_running(f"prometheus {url} {{{target}}}", labels))
    return values


def running_values_of_metrics(paths: Sequence[str | Path]) -> list[RunningValue]:
    """Each engine's running value in the last scrape of each /metrics file that shows one."""
    values = []
    for path in paths:
        scrapes = [s for s in parse_metrics_text(Path(path).read_text(), str(path)) if s.cache_config]
        if scrapes:
            last = scrapes[-1]
            values += [_running(f"{path}:{last.line}", c) for c in last.cache_config.values()]
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
