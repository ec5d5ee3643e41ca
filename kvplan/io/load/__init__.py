"""Load-test evidence readers: vLLM server logs under load and Prometheus ``/metrics`` into one frame.

:func:`read_load_evidence` reads one run's files (logs and saved /metrics snapshots alike, sniffed) into a
:class:`LoadReading`: the :data:`~kvplan.columns.LOAD_COLUMNS` frame (nullable dtypes) and its
:class:`~kvplan.io.metadata.ReadMetadata`, plus what each file says about its server (:class:`LoadSource`).
The log reader is :mod:`.log` (records by :mod:`.records`, stats messages by :mod:`.message`, the sealed
whole-line engine :mod:`.engine`); /metrics text is :mod:`.metrics`; scrapes become rows in :mod:`.scrapes`,
which also takes Prometheus samples (:func:`samples_reading`, e.g. a ``query_range`` answer). Every reader
appends its rows to one :class:`RowBuilder` (:mod:`.frame`).
"""

from kvplan.io.load.frame import (
    EVENTS,
    KINDS,
    LoadFormatError,
    LoadReading,
    LoadSource,
    RowBuilder,
    counter_increase,
    frame_of,
    reading_of,
    time_texts,
)
from kvplan.io.load.log import parse_stats_lines, parse_stats_text, read_vllm_stats
from kvplan.io.load.message import parse_stats_message
from kvplan.io.load.metrics import parse_metrics_snapshots, parse_metrics_text, read_metrics_snapshots
from kvplan.io.load.read import read_load_evidence
from kvplan.io.load.scrapes import Sample, samples_reading

__all__ = [
    "EVENTS",
    "KINDS",
    "LoadFormatError",
    "LoadReading",
    "LoadSource",
    "RowBuilder",
    "Sample",
    "counter_increase",
    "frame_of",
    "parse_metrics_snapshots",
    "parse_metrics_text",
    "parse_stats_lines",
    "parse_stats_message",
    "parse_stats_text",
    "read_load_evidence",
    "read_metrics_snapshots",
    "read_vllm_stats",
    "reading_of",
    "samples_reading",
    "time_texts",
]
