"""A real Prometheus for tests: Debian's ``prometheus`` over a TSDB backfilled by ``promtool``.

:func:`openmetrics_of` turns saved /metrics files into OpenMetrics text with every sample's time (the
file reader's scrape times, from :func:`kvplan.io.load.metrics.split_scrapes`); :func:`running_prometheus`
backfills it (``promtool tsdb create-blocks-from openmetrics``), starts ``prometheus`` on 127.0.0.1 at a free
port, waits until it answers, and stops it by its pid. Tests skip only when the binaries are missing.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kvplan.io.load.metrics import split_scrapes

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="Debian's prometheus package is not installed"
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)).replace("inf", "Inf").replace("nan", "NaN")


Points = dict[str, dict[tuple, list[tuple[float, float]]]]


def samples_of(files: Iterable[Path], labels: dict[str, str], series: Points | None = None) -> Points:
    """The samples of /metrics files by name and labels (plus ``labels``), each at its scrape's time [Unix s]."""
    series = series if series is not None else defaultdict(lambda: defaultdict(list))
    for path in files:
        for _line, moment, text in split_scrapes(Path(path).read_text()):
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    stamp = sample.timestamp if sample.timestamp is not None else moment.timestamp()
                    key = tuple(sorted({**sample.labels, **labels}.items()))
                    series[sample.name][key].append((float(stamp), float(sample.value)))
    return series


def openmetrics_of(series: Points) -> str:
    """OpenMetrics text of samples by name and labels, for ``promtool tsdb create-blocks-from``."""
    lines = []
    for name in sorted(series):
        lines.append(f"# TYPE {name} unknown")
        for key, points in series[name].items():
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
            lines += [f"{name}{{{labels}}} {_number(v)} {t:.3f}" for t, v in sorted(points)]
    return "\n".join([*lines, "# EOF", ""])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_prometheus(openmetrics: str, folder: Path) -> Iterator[str]:
    """The URL of a Prometheus serving ``openmetrics`` (backfilled into ``folder``), stopped on exit."""
    source, data = folder / "samples.om", folder / "tsdb"
    source.write_text(openmetrics)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
    )
    config = folder / "prometheus.yml"
    config.write_text("global: {}\n")
    port = _free_port()
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
        stdout=subprocess.DEVNULL,
        stderr=(folder / "prometheus.err").open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            if server.poll() is not None:
                raise RuntimeError((folder / "prometheus.err").read_text()[-2000:])
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
