"""The reader's fast paths give exactly what the general ones give.

- :func:`kvplan.io.vllm.families.read_message` learns, per shape of message (digits read as 0),
  which families are worth trying; the values still come from each message's own numbers, and a
  family whose regex holds a literal digit is tried on every message of the shape.
- :func:`kvplan.io.vllm.records.split_records` reads the common line (one prefix, one header) with
  one anchored match; every other line takes the general walk, with the same records.
"""

import pandas as pd
import pytest

from kvplan.io.vllm import families, records
from kvplan.io.vllm.families import read_message
from kvplan.io.vllm.records import split_records
from kvplan.units import parse_size


def facts(message):
    return [(fact.family, fact.values) for fact in read_message(message)]


def test_two_messages_of_one_shape_keep_their_own_values():
    # same shape ("Available KV cache memory: 00.0 GiB"), other numbers: 12.5 and 31.5 GiB in bytes
    assert facts("Available KV cache memory: 12.5 GiB") == [
        ("available_kv", {"available_kv_bytes": parse_size("12.5GiB")})
    ]
    assert facts("Available KV cache memory: 31.5 GiB") == [
        ("available_kv", {"available_kv_bytes": parse_size("31.5GiB")})
    ]


def test_a_family_with_a_literal_digit_is_tried_on_each_message_of_the_shape():
    # "In v0.19, …" (0.17-0.18) says the estimate is not applied; "In v0.29, …" has the same shape
    # (digits read as 0) but is no vLLM line: a table learnt from the first must not answer the second
    families._SHAPES.clear()
    assert facts("In v0.19, CUDA graph memory profiling will be enabled by default") == [
        ("graph_estimate_off", {"estimate_applied": False})
    ]
    assert facts("In v0.29, CUDA graph memory profiling will be enabled by default") == []


def test_the_shape_table_stays_bounded():
    families._SHAPES.clear()
    for count in range(families.MAX_SHAPES + 10):
        read_message("x" * (count % 50) + "y" * (count // 50) + " took")
    assert len(families._SHAPES) <= families.MAX_SHAPES


LINES = [
    "(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Available KV cache memory: 1.0 GiB",
    "(VllmWorker rank=2 pid=3, ip=10.0.0.4) WARNING 08-14 14:07:22.123 [a.py:1] x [repeated 3x across cluster]",
    "INFO 08-14 14:07:22 [a.py:1] plain",
    "(Worker pid=5) no header here",
    "   bare message  ",
    "",
    "web-1  | (Worker_TP0 pid=9) INFO 08-14 14:07:22 [a.py:1] after a compose prefix",
    "(Worker_TP0 pid=9) INFO 08-14 14:07:22 [a.py:1] one (Worker_TP1 pid=10) INFO 08-14 14:07:22 [a.py:1] two",
    "(Worker_TP0 pid=9) INFO 08-14 14:07:22 [a.py:1] [1mbold[0m text",
    "[1;36m(Worker_TP0 pid=9)[0;0m INFO 08-14 14:07:22 [a.py:1] lost ESC bytes",
    "(Worker_TP0 pid=9) INFO 08-14 14:07:22 [a.py:1] text then INFO 08-14 14:07:23 [b.py:2] more",
]


@pytest.mark.parametrize("line", LINES)
def test_the_simple_line_path_reads_as_the_general_walk(line):
    general = [
        record
        for segment in records.strip_ansi(line).split("\r")
        for record in records._segment_records(records.strip_bare_colour(segment))
    ]
    assert split_records(line) == general


def test_a_ledger_built_in_frames_of_few_rows_is_the_ledger_built_at_once(monkeypatch):
    # the reader turns every FRAME_ROWS rows into a frame (less memory than the rows' dicts) and joins
    # them at the end: with one row a frame, the dense sample's ledger and line index are unchanged
    from kvplan.config import DATA_DIR
    from kvplan.io.vllm import read

    path = DATA_DIR / "boots" / "four-rank" / "boot.log"
    text = path.read_text()
    log = "".join(text.replace("pid=", f"pid={copy}") for copy in range(1, 4))  # three boots, new pids
    whole, whole_meta = read.read_vllm_log(log)
    monkeypatch.setattr(read, "FRAME_ROWS", 1)
    framed, framed_meta = read.read_vllm_log(log)
    assert len(whole) == 12  # 3 boots x 4 ranks
    pd.testing.assert_frame_equal(framed, whole)
    assert dict(framed_meta.lines) == dict(whole_meta.lines)
    assert list(framed_meta.provenance_rows) == list(whole_meta.provenance_rows)
