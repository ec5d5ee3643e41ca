"""Fuzz the load and snapshot readers: any text gives rows within bounds or one ``error:`` line, exit 2.

Inputs are the project's own sample files (``data/load``, ``data/boots``), cut into lines that are
shuffled, repeated, truncated and salted with other text, plus free text. For every input: no uncaught
exception; a reading's values stay within what vLLM can print (KV usage 0–100 %, JSON strict); an
nvidia-smi snapshot never shows more free or used memory than total; and the CLI answers bad input with
exit 2 and exactly one ``error:`` line, never a traceback.

Bounded for CI (a few dozen examples per target, the file in well under 40 s); a longer run:
``KVPLAN_FUZZ_EXAMPLES=5000 python -m pytest -q tests/test_fuzz_load.py``.
"""

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.gpu_snapshot import NvidiaSmiError, read_nvidia_smi_csv
from kvplan.io.load import LoadFormatError, parse_metrics_snapshots, parse_stats_text
from kvplan.io.load import engine as stats_log
from tests.load_rows import rows_of

EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="KVPLAN_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def _lines(pattern: str) -> list[str]:
    return [line for path in sorted(DATA_DIR.glob(pattern)) for line in path.read_text().splitlines()]


LOG_LINES = _lines("load/*/server.log")
METRICS_LINES = _lines("load/*/*.prom")[:400] + _lines("load/*/metrics/*.prom")[:200]
SMI_LINES = _lines("boots/*/nvidia-smi*.csv")
SALT = [
    "",
    "-5",
    "1e309",
    "NaN",
    "+Inf",
    "9" * 30,
    "\x1b[31m",
    "\r",
    ",",
    "}",
    "{",
    '"',
    "#",
    " - ",
    "] ",
    "(EngineCore_DP1 pid=7) ",
    "ERROR 11-27 11:00:00 [core.py:1] ",
    "02-30",
    "[N/A]",
    "MiB",
    "-1 MiB",
]


@st.composite
def mutated(draw, lines: list[str]) -> str:
    """A text made of sample lines, some cut, salted or replaced by free text."""
    chosen = draw(st.lists(st.sampled_from(lines), min_size=0, max_size=30))
    out = []
    for line in chosen:
        action = draw(st.integers(0, 5))
        if action == 1:
            line = line[: draw(st.integers(0, len(line)))]
        elif action == 2:
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.sampled_from(SALT)) + line[at:]
        elif action == 3:
            line = draw(st.text(max_size=40))
        out.append(line)
    return "\n".join(out) + draw(st.sampled_from(["", "\n"]))


def _refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def _check_json(reading) -> None:
    data = json.loads(b"".join(reading.json_chunks()), parse_constant=_refuse)
    for row in data["rows"]:
        usage = row["kv_cache_usage_pct"]
        assert usage is None or 0 <= usage <= 100, row


READERS = {
    "fuzz.log": (LOG_LINES, lambda text: parse_stats_text(text, "fuzz.log", year=2026)),
    "fuzz.prom": (METRICS_LINES, lambda text: parse_metrics_snapshots([("fuzz.prom", text)])),
}


@pytest.mark.parametrize("source", sorted(READERS))
@FUZZ
@given(data=st.data())
def test_stats_and_metrics_readers_read_or_refuse(source, data):
    lines, read = READERS[source]
    try:
        reading = read(data.draw(mutated(lines)))
    except LoadFormatError as exc:
        assert str(exc).startswith(source)
        return
    _check_json(reading)


@FUZZ
@given(mutated(LOG_LINES))
def test_whole_line_stats_path_reads_what_the_general_reader_reads(text):
    def read():
        try:
            reading = parse_stats_text(text, "fuzz.log", year=2026)
        except LoadFormatError as exc:
            return str(exc)
        return [list(rows_of(reading)), reading.warnings, reading.sources, b"".join(reading.json_chunks())]

    fast = read()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stats_log, "V1_STATS_LINE", re.compile(r"(?!)"))  # every line by the general reader
        assert read() == fast


@FUZZ
@given(mutated(SMI_LINES))
def test_nvidia_smi_reader_reads_or_refuses(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("smi") / "snapshot.csv"
    path.write_text(text)
    try:
        frame, _ = read_nvidia_smi_csv(path)
    except NvidiaSmiError as exc:
        assert str(exc).startswith(str(path))
        return
    for column in [c for c in frame.columns if c.endswith("_bytes")]:
        assert (frame[column].dropna() >= 0).all()
    if "memory_total_bytes" in frame:
        for column in ("memory_free_bytes", "memory_used_bytes"):
            both = frame[[column, "memory_total_bytes"]].dropna()
            assert (both[column] <= both["memory_total_bytes"]).all()


@FUZZ
@given(st.sampled_from(["log", "prom"]), st.data())
def test_cli_load_exits_0_or_2_with_one_error_line(tmp_path_factory, capsys, suffix, data):
    text = data.draw(mutated(LOG_LINES if suffix == "log" else METRICS_LINES))
    path = tmp_path_factory.mktemp("load") / f"run.{suffix}"
    path.write_text(text)
    status = main(["load", str(path), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status == 0:
        _strict = json.loads(captured.out)
        assert set(_strict) == {"rows", "warnings"}
    else:
        assert status == 2
        errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0], captured.err
