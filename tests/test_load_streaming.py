"""``kvplan load`` reads a stats log line by line: the sealed whole-line engine changes nothing (its corpus test).

A line that is one V1 stats record in vLLM's default form is taken whole by the engine (``V1_STATS_LINE`` in
:mod:`kvplan.io.load.engine`); every other line goes through the general record reader. Each case below is
read twice, with the engine on and off, and everything is compared: rows, warnings, per-file facts and the
JSON text, or the error. The JSON and CSV of a reading hold the rows' values (compared parsed).
"""

import csv
import io
import json
import math
import random
import re
from datetime import datetime, timedelta

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.columns import LOAD_ROW_KEYS as ROW_KEYS
from kvplan.io.load import LoadFormatError, parse_stats_text, read_vllm_stats
from kvplan.io.load import engine as stats_log
from kvplan.io.load.frame import JSON_BATCH, time_texts
from kvplan.io.load.records import READ_BLOCK
from tests.load_rows import load_reading, load_row, rows_of

# vLLM 0.26's default stats line (loggers.py:310 logs "Preemptions" from 0.11.1 on; 152 is 0.10's line)
STATS = (
    "(APIServer pid=1) INFO {stamp} [loggers.py:{lineno}] Engine 000: Avg prompt throughput: 512.0 tokens/s, "
    "Avg generation throughput: 96.3 tokens/s, Running: {running} reqs, Waiting: 2 reqs, {preempted}GPU KV "
    "cache usage: {usage}%, Prefix cache hit rate: 0.0%"
)


def stats(stamp, lineno=310, running="4", preempted="Preemptions: 0, ", usage="5.2"):
    return STATS.format(stamp=stamp, lineno=lineno, running=running, preempted=preempted, usage=usage)


START = "(APIServer pid=1) INFO 12-31 23:58:00 [api_server.py:1977] vLLM API server version 0.26.0"
OOM = "(EngineCore pid=2) ERROR 12-31 23:59:55 [core.py:710] torch.OutOfMemoryError: CUDA out of memory."
V0 = (
    "INFO 12-31 23:59:30 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
    "210.3 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 97.1%, CPU KV "
    "cache usage: 0.0%."
)
LATER = stats("11-29 10:00:20", 152)
DOCKER = "2027-01-01T07:59:00.1Z " + START.replace("23:58:00", "23:59:00")


def engine_stats(engine, second):
    return stats(f"11-29 10:{second // 60:02d}:{second % 60:02d}").replace("Engine 000", f"Engine {engine}")


CASES = {
    "year, New Year": ([START, stats("12-31 23:59:50"), V0, stats("01-01 00:00:00")], {"year": 2026}),
    "no year": ([stats("12-31 23:59:50"), stats("01-01 00:00:10")], {}),
    "UTC offset given": (
        [stats("12-31 23:59:50"), stats("01-01 00:00:10")],
        {"year": 2026, "utc_offset": -7},
    ),
    "offset from docker stamps": ([DOCKER, stats("12-31 23:59:50"), stats("12-31 23:59:59")], {}),
    "preemptions from line 236": ([stats("11-29 10:00:00", 236, preempted=""), stats("11-29 10:00:10")], {}),
    "preemptions seen later": (
        [stats("11-29 10:00:00", 152, preempted=""), stats("11-29 10:00:10", 152, preempted=""), V0, LATER],
        {"year": 2026},
    ),
    "before 0.11.1": (
        [stats("11-29 10:00:00", 152, preempted=""), stats("11-29 10:00:10", 152, preempted="")],
        {},
    ),
    "error blocks": ([stats("12-31 23:59:50"), OOM, OOM, stats("12-31 23:59:56"), OOM], {"year": 2026}),
    "restart": ([stats("12-31 23:59:00"), START, stats("12-31 23:59:50")], {"year": 2026}),
    "usage over 100 %": ([stats("11-29 10:00:00"), stats("11-29 10:00:10", usage="100.5")], {"year": 2026}),
    "idle gap": (
        [stats(f"11-29 10:00:{s:02d}") for s in (0, 10, 20, 30, 40)] + [stats("11-29 11:00:00")],
        {},
    ),
    "a count beyond 64 bits": (
        [stats("11-29 10:00:00"), stats("11-29 10:00:10", running="9" * 30), OOM],
        {"year": 2026},
    ),
    "counts of 18 and 19 digits": (
        [stats("11-29 10:00:00", running="9" * 18), stats("11-29 10:00:10", running=str(2**63 - 1))],
        {"year": 2026},
    ),
    "no such day": ([stats("11-29 10:00:00"), stats("02-30 10:00:00")], {"year": 2026}),
    "no such second": ([stats("11-29 10:00:00"), stats("11-29 10:00:60")], {"year": 2026}),
    "shifted before year 1": ([stats("01-01 00:00:00")], {"year": 1, "utc_offset": 5}),
    "yearless then stamped": ([stats("11-29 10:00:00"), DOCKER, stats("12-31 23:59:59")], {}),
    # runs of whole lines: a day (and a year) changes inside one run, engines take turns in one run
    "new day inside a run": ([stats("12-31 23:59:50"), stats("01-01 00:00:00"), stats("01-01 00:00:10")], {}),
    "engines take turns": (  # engine 001 is idle from 100 s to 200 s: a gap in its series only
        [
            engine_stats(engine, second)
            for second in range(0, 210, 10)
            for engine in ("000", "001")
            if engine == "000" or not 100 < second < 200
        ],
        {"year": 2026},
    ),
    "bad lines inside a run": (
        [
            stats("11-29 10:00:00"),
            stats("11-29 10:00:10", usage="-1.0"),
            stats("11-29 10:00:20"),
            stats("11-29 10:00:61"),
            stats("11-29 10:00:30"),
            stats("02-30 10:00:40"),
            stats("11-29 10:00:50"),
        ],
        {"year": 2026},
    ),
    "shift past the last year inside a run": (
        [stats("12-31 23:59:50"), stats("12-31 23:59:59")],
        {"year": 9999, "utc_offset": -14},
    ),
    # more lines than a read block (READ_BLOCK), a line the pattern misses right at the block's edge
    "blocks": (
        [stats(f"11-29 {minute // 60:02d}:{minute % 60:02d}:00") for minute in range(1, 1440)]
        * (READ_BLOCK // 1439 + 1)
        + [V0]
        + [stats("11-30 00:00:00")],
        {"year": 2026},
    ),
}
WRAPPED = stats("11-29 10:00:10")  # read with wrap_width = its length: a collector's hard wrap


def read(lines: list[str], **options):
    """Everything a reading says (or the error), as plain values to compare."""
    try:
        reading = parse_stats_text("\n".join(lines), "fast.log", **options)
    except LoadFormatError as exc:
        return str(exc)
    return [list(rows_of(reading)), reading.warnings, reading.sources, b"".join(reading.json_chunks())]


def read_both(monkeypatch, lines: list[str], **options):
    """(read with the whole-line path, read with the general reader only)."""
    assert any(stats_log.V1_STATS_LINE.match(line) for line in lines)  # the whole-line path is tried
    fast = read(lines, **options)
    monkeypatch.setattr(stats_log, "V1_STATS_LINE", re.compile(r"(?!)"))
    return fast, read(lines, **options)


@pytest.mark.parametrize("case", sorted(CASES))
def test_whole_line_path_reads_what_the_general_reader_reads(monkeypatch, case):
    lines, options = CASES[case]
    fast, general = read_both(monkeypatch, lines, **options)
    assert fast == general


def test_whole_line_path_leaves_a_hard_wrapped_line_to_the_general_reader(monkeypatch):
    lines = [
        stats("11-29 10:00:00"),
        WRAPPED,
        "Prefix cache hit rate: GPU: 1.0%, CPU: 0.0%",
        stats("11-29 10:00:20"),
    ]
    fast, general = read_both(monkeypatch, lines, year=2026, wrap_width=len(WRAPPED))
    assert fast == general
    assert [row.line for row in fast[0]] == [1, 2, 4]  # line 3 continued line 2: one record, no stats row


def test_sample_logs_read_alike(monkeypatch):
    logs = sorted((DATA_DIR / "load").glob("*/server.log"))
    fast = [read(path.read_text().splitlines(), year=2026) for path in logs]
    monkeypatch.setattr(stats_log, "V1_STATS_LINE", re.compile(r"(?!)"))
    assert fast == [read(path.read_text().splitlines(), year=2026) for path in logs]


def parsed_json(reading) -> dict:
    """The reading's JSON text parsed (strict: NaN or Infinity would be refused)."""
    return json.loads(b"".join(reading.json_chunks()), parse_constant=lambda name: pytest.fail(name))


def test_json_holds_the_rows_and_warnings(capsys):
    log = DATA_DIR / "load" / "manual-canary-overload" / "server.log"
    reading = read_vllm_stats(log, year=2026)
    expected = {"rows": reading.records(), "warnings": list(reading.warnings)}
    assert parsed_json(reading) == expected
    assert main(["load", str(log), "--year", "2026", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    # vLLM's line 7 of the sample: Engine 000 at 11-27 11:03:08, 98.4 % usage, 23 running, 41 waiting
    assert expected["rows"][0] == {
        "source": str(log),
        "line": 7,
        "time": "2026-11-27T11:03:08",
        "engine": 0,
        "kv_cache_usage_pct": 98.4,
        "running": 23,
        "waiting": 41,
        "swapped": None,
        "prompt_tokens_per_s": 15300.8,
        "generation_tokens_per_s": 152.6,
        "prefix_cache_hit_pct": 0.0,
        "preemptions": 0,
        "preemptions_total": None,
        "event": None,
    }
    rows = (load_row("a.log", 1, None, None, kv_cache_usage_pct=-0.0, event="oom", raw="x"),)
    assert parsed_json(load_reading(rows, ("w",))) == {
        "rows": [
            dict.fromkeys(ROW_KEYS)
            | {"source": "a.log", "line": 1, "kv_cache_usage_pct": -0.0, "event": "oom"}
        ],
        "warnings": ["w"],
    }


def test_docker_stamps_beyond_any_utc_offset_are_a_warning_not_a_traceback():
    # the docker stamp says 2027-01-01 14:59 UTC where vLLM's own stamp says 12-31 23:59 (local): the server
    # would sit at UTC−15 h, which no time zone uses (UTC−12 … UTC+14); this raised ValueError from
    # log_time_shift before. The times stay local and the reading says why.
    far = "2027-01-01T14:59:00.1Z " + START.replace("23:58:00", "23:59:00")
    reading = parse_stats_text("\n".join([far, stats("12-31 23:59:50")]), "far.log")
    assert [row.time.hour for row in rows_of(reading)] == [23]  # local time, not shifted
    assert any("UTC-15 h, outside UTC-14 … UTC+14 h" in warning for warning in reading.warnings)


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def csv_text(reading) -> str:
    text = io.StringIO()
    reading.write_csv(text)
    return text.getvalue()


def as_cells(records: list[dict]) -> list[list[str]]:
    """JSON rows as CSV cells: unknown empty, numbers as Python writes them."""
    return [["" if value is None else str(value) for value in record.values()] for record in records]


def test_csv_holds_the_rows(tmp_path, capsys):
    # a path with a comma and a quote, unknowns (None, NaN) and -0.0 come back as the JSON rows' values
    log = tmp_path / 'my "b", c.log'
    log.write_text("\n".join([START, stats("12-31 23:59:50"), OOM, stats("12-31 23:59:56", usage="-0.0")]))
    assert main(["load", str(log), "--year", "2026", "--csv"]) == 0
    reading = read_vllm_stats(log, year=2026)
    out = capsys.readouterr().out
    assert csv_rows(out) == [list(ROW_KEYS), *as_cells(reading.records())]
    assert '/my ""b"", c.log",' in out and ",-0.0," in out
    rows = (load_row("a,b.log", 1, None, None, kv_cache_usage_pct=math.nan, event="oom", raw="x"),)
    assert csv_rows(csv_text(load_reading(rows))) == [
        list(ROW_KEYS),
        ["a,b.log", "1", "", "", "", "", "", "", "", "", "", "", "", "oom"],
    ]


def random_rows(seed, count=JSON_BATCH + 300):
    """Rows of every kind of value the text writers meet: times in and out of order, over midnights,
    with and without a year or a fraction of a second, unknowns, repeated numbers, 0.0 and -0.0."""
    rng = random.Random(seed)
    start = datetime(2026, 12, 31, 23, 0) if seed % 2 else datetime(2026, 11, 29, 10)
    rows, when = [], start
    for line in range(1, count + 1):
        when += timedelta(seconds=rng.choice([10, 10, 10, 3600, 86400]), microseconds=rng.choice([0, 0, 7]))
        time = rng.choice([when, when, when, when - timedelta(days=2), None]) if seed % 3 else when
        negative_zero = -0.0 if seed % 3 or line > JSON_BATCH else 0.0  # or only after the first batch
        rows.append(
            load_row(
                rng.choice(["s.log", 's "t", u.log']) if seed % 5 == 0 else "s.log",
                line,
                time,
                rng.choice([0, 1, None]),
                kv_cache_usage_pct=rng.choice(
                    [0.0, negative_zero, 5.2, 99.9, math.nan, None, rng.random() * 100]
                ),
                running=rng.choice([0, 4, 12, None]),
                waiting=rng.choice([0, 2]),
                prompt_tokens_per_s=rng.choice([512.0, 0.0, rng.random() * 1e4]),
                preemptions=rng.choice([0, 0, 3, None]) if seed % 4 else 0,
                event=rng.choice([None] * 20 + ["oom", "preemption"]),
                year_known=rng.random() < 0.9 if seed % 2 else True,
            )
        )
    return rows


def expected_record(row: dict) -> dict:
    """The JSON row of a row given by hand: ISO time (vLLM's MM-DD HH:MM:SS without a year), NaN unknown."""
    record = {key: row.get(key) for key in ROW_KEYS}
    time = row["time"]
    if time is not None:
        record["time"] = time.isoformat() if row.get("year_known", True) else time.strftime("%m-%d %H:%M:%S")
    if isinstance(record["kv_cache_usage_pct"], float) and math.isnan(record["kv_cache_usage_pct"]):
        record["kv_cache_usage_pct"] = None
    return record


@pytest.mark.parametrize("seed", range(8))
def test_json_and_csv_hold_the_rows_values(seed):
    # times in and out of order, over midnights, with and without a year or a fraction of a second,
    # unknowns, repeated numbers, 0.0 and -0.0: the JSON and CSV give each row's values back
    rows = random_rows(seed)
    reading = load_reading(rows)
    expected = [expected_record(row) for row in rows]
    assert reading.records() == expected
    assert parsed_json(reading)["rows"] == expected
    assert csv_rows(csv_text(reading)) == [list(ROW_KEYS), *as_cells(expected)]


@pytest.mark.parametrize("seed", range(8))
def test_csv_is_the_bytes_to_csv_writes(seed):  # issue 23: --csv by to_csv's own writer, batch by batch
    reading = load_reading(random_rows(seed))
    table = reading.frame.loc[:, list(ROW_KEYS)]
    table["time"] = pd.array(time_texts(reading.frame), dtype="string")
    assert csv_text(reading) == table.to_csv(index=False, lineterminator="\n")
