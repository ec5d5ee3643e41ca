"""Evidence read from a Prometheus server's HTTP API and from vLLM's /metrics.

:mod:`.api` pages ``/api/v1/query`` (raw samples) and ``/api/v1/query_range`` through time; :mod:`.vllm`
reads one vLLM server's load evidence into the load frame (:func:`read_prometheus_load`) and each engine's
running KV value (:class:`RunningValue`) from Prometheus, /metrics files or the log.
"""

from kvplan.io.prometheus.api import (
    PrometheusError,
    Series,
    instant_series,
    parse_duration,
    parse_time,
    series_pages,
)
from kvplan.io.prometheus.vllm import (
    ABSENT,
    RunningValue,
    load_selector,
    read_load_run,
    read_prometheus_load,
    running_values_at,
    running_values_of_logs,
    running_values_of_metrics,
    sample_line,
    save_prometheus_load,
)

__all__ = [
    "ABSENT",
    "PrometheusError",
    "RunningValue",
    "Series",
    "instant_series",
    "load_selector",
    "parse_duration",
    "parse_time",
    "read_load_run",
    "read_prometheus_load",
    "running_values_at",
    "running_values_of_logs",
    "running_values_of_metrics",
    "sample_line",
    "save_prometheus_load",
    "series_pages",
]
