"""The reader's fast paths give exactly what the general ones give.

- :func:`kvplan.io.vllm.families.read_message` learns, per shape of message (digits read as 0),
  which families are worth trying and where their groups lie; the values still come from each
  message's own numbers, read there, and a family whose regex holds a literal digit is searched in
  every message of the shape. A message read before gives what it gave then, in new dicts.
- :meth:`kvplan.io.vllm.boots.BootSplitter.scanned_line` reads a line by its shape's plan
  (:func:`kvplan.io.vllm.lines.line_plan`: where the record lies, which families its message holds):
  the boots :meth:`~kvplan.io.vllm.boots.BootSplitter.line` (split_records, read_message) gives.
- :func:`kvplan.io.vllm.records.split_records` reads the common line (one prefix, one header, real
  colour codes stripped) with one anchored match, learnt once per shape of line (where its parts
  lie); every other line takes the general walk, with the same records.
- :func:`kvplan.io.vllm.values.gib_bytes` reads a plain decimal with integer arithmetic: the bytes
  :func:`kvplan.units.parse_size` gives, and what it refuses, it leaves to ``parse_size``.
- :func:`kvplan.io.vllm.scan.iter_candidate_lines` checks the anchors where their signature pairs
  are, all at once: the lines a per-line check of anchor and pair keeps.
"""

import functools
import io
import random

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvplan.io.vllm import families, records, scan, values
from kvplan.io.vllm.families import read_message
from kvplan.io.vllm.memo import MAX_ENTRIES
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


def test_a_message_read_again_gives_the_same_facts_in_new_dicts():
    # read_message keeps what each message said: a second read gives equal facts whose values a
    # caller may change (the conflicts code does) without changing a third read
    message = "Available KV cache memory: 12.5 GiB"  # 12.5 x 2^30 = 13,421,772,800 bytes
    first = read_message(message)
    first[0].values["available_kv_bytes"] = 0
    assert facts(message) == [("available_kv", {"available_kv_bytes": 13_421_772_800})]
    assert facts(message) == [("available_kv", {"available_kv_bytes": 13_421_772_800})]


def test_the_message_table_stays_bounded():
    families._MESSAGES.clear()
    for count in range(MAX_ENTRIES + 10):
        read_message(f"Model loading took {count} GiB")
    assert len(families._MESSAGES) <= MAX_ENTRIES


def test_the_shape_table_stays_bounded():
    families._SHAPES.clear()
    for count in range(MAX_ENTRIES + 10):
        read_message("x" * (count % 50) + "y" * (count // 50) + " took")
    assert len(families._SHAPES) <= MAX_ENTRIES


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
    # real colour codes (ESC kept): stripped, then the common line's one match, or the general walk
    "\x1b[1;36m(Worker_TP0 pid=9)\x1b[0;0m INFO 08-14 14:07:22 [a.py:1] coloured",
    "\x1b[32mINFO\x1b[0m 08-14 14:07:22 [a.py:1] one \x1b[1;36m(Worker_TP1 pid=10)\x1b[0;0m two",
    "\x1b[1;36m(Worker_TP0 pid=9)\x1b[0;0m [1mhalf-lost[0m codes",
]


@pytest.mark.parametrize("line", LINES)
def test_the_simple_line_path_reads_as_the_general_walk(line):
    general = [
        record
        for segment in records.strip_ansi(line).split("\r")
        for record in records._segment_records(records.strip_bare_colour(segment))
    ]
    assert split_records(line) == general


def reference_candidates(data):
    """The scan's lines by the rule it implements, line by line: an anchor and a signature pair."""
    return [
        (number, offset, line)
        for number, (offset, line) in enumerate(_lines_with_offsets(data), start=1)
        if any(anchor in line for anchor in scan.ANCHORS) and any(pair in line for pair in scan.ANCHOR_PAIRS)
    ]


def _lines_with_offsets(data):
    offset = 0
    for line in data.split(b"\n"):
        yield offset, line
        offset += len(line) + 1


def test_the_scan_keeps_a_line_holding_an_anchor_and_a_signature_pair():
    # "failed to start" holds no signature pair: "EngineCore" brings "eC", a line without one is not
    # read; an anchor cut by a newline is in no line
    data = b"EngineCore failed to start.\nSomething failed to start.\nAvailable KV cache me\nmory\n"
    found = list(scan.iter_candidate_lines(io.BytesIO(data)))
    assert found == [(1, 0, b"EngineCore failed to start.")]
    assert found == reference_candidates(data)


@pytest.mark.parametrize("chunk_bytes", [None, 4096, 777])
def test_the_scan_of_every_sample_is_the_line_by_line_rule(chunk_bytes):
    # every bundled and test log, one after the other, as one file: the vectorised anchor check finds
    # the lines (number, byte offset, bytes) the per-line rule finds, whatever the block size
    from kvplan.config import DATA_DIR

    paths = sorted(DATA_DIR.glob("**/*.log")) + sorted((DATA_DIR.parent / "tests" / "data").glob("**/*.log"))
    data = b"".join(path.read_bytes().rstrip(b"\n") + b"\n" for path in paths)
    expected = [found for found in reference_candidates(data) if found[1] < len(data)]
    assert len(expected) > 1000
    assert list(scan.iter_candidate_lines(io.BytesIO(data), chunk_bytes=chunk_bytes)) == expected


def test_two_lines_of_one_shape_keep_their_own_numbers():
    # the split is learnt once per shape of line (digits read as 0); pid, Ray's count, the ip and
    # the message's numbers still come from each line
    records._SHAPES.clear()
    first = "(Worker_TP1 pid=12, ip=10.0.0.4) INFO 08-14 14:07:22 [a.py:1] took 1.5 GiB [repeated 2x across cluster]"
    second = "(Worker_TP7 pid=98, ip=10.9.8.7) INFO 09-25 03:18:33 [a.py:9] took 7.2 GiB [repeated 9x across cluster]"
    assert split_records(first) == [records.Record("took 1.5 GiB", "Worker_TP1", 12, "10.0.0.4", "INFO", 2)]
    assert split_records(second) == [records.Record("took 7.2 GiB", "Worker_TP7", 98, "10.9.8.7", "INFO", 9)]
    assert len(records._SHAPES) == 1


def test_the_line_shape_table_stays_bounded():
    records._SHAPES.clear()
    for count in range(MAX_ENTRIES + 10):
        split_records("x" * (count % 50) + "y" * (count // 50) + " took")
    assert len(records._SHAPES) <= MAX_ENTRIES


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


def sample_lines():
    """Every line of every bundled and test log, as bytes."""
    from kvplan.config import DATA_DIR

    paths = sorted(DATA_DIR.glob("**/*.log")) + sorted((DATA_DIR.parent / "tests" / "data").glob("**/*.log"))
    return [line for path in paths for line in path.read_bytes().split(b"\n")]


def mutants(line, rng):
    """``line`` with its digits changed (as many, and more or fewer), colour codes, ``\\r``, a second
    record, non-ASCII and broken UTF-8 bytes: the variety real files bring."""
    digits = lambda count=None: rng.choice(b"0123456789")  # noqa: E731
    yield bytes(digits() if 48 <= byte <= 57 else byte for byte in line)
    yield re_digits(line, rng)
    yield b"\x1b[1;36m" + line[:12] + b"\x1b[0;0m" + line[12:]
    yield b"[1;36m" + line
    yield line[: len(line) // 2] + b"\r" + line
    yield line + b" (Worker_TP1 pid=77) INFO 08-14 14:07:22 [a.py:1] GPU KV cache size: 1,024 tokens"
    yield line.replace(b" ", " é ".encode(), 1) + b" \xff\xfe"


def re_digits(line, rng):
    """Each run of digits replaced by a random number of one to four digits."""
    import re

    return re.sub(rb"\d+", lambda m: str(rng.randrange(10 ** rng.randint(1, 4))).encode(), line)


@functools.cache
def all_inputs():

    rng = random.Random(15)
    lines = sample_lines()
    return lines + [mutant for line in lines for mutant in mutants(line, rng)]


def reference_facts(message):
    """The line families' rule, family by family: each whose trigger the message holds is searched for,
    in table order; outcome families stop at the first match."""
    found, seen_outcome = [], False
    for family, trigger, pattern, scope, handler in families.FAMILIES:
        if trigger not in message or (scope == "outcome" and seen_outcome):
            continue
        match = pattern.search(message)
        if match is not None:
            found.append((family, handler(match)))
            seen_outcome = seen_outcome or scope == "outcome"
    return found


def test_the_families_read_at_their_shape_places_give_what_each_regex_gives():
    # a shape-safe family's groups are read where its regex matched the message's shape; on every
    # message of the samples and their mutants (other numbers, other digit counts) that gives the values
    # the regex's own match on the message gives
    families._SHAPES.clear()
    families._MESSAGES.clear()
    messages = {
        record.message for line in all_inputs() for record in split_records(line.decode("utf-8", "replace"))
    }
    assert len(messages) > 5000
    for message in sorted(messages):
        assert facts(message) == reference_facts(message), message


def test_a_line_read_by_its_shape_plan_is_the_line_read_by_the_general_walk():
    # BootSplitter.scanned_line (the shape's plan: one look-up, no decoding of a line that says
    # nothing) gives the boots BootSplitter.line (split_records, read_message) gives, line by line;
    # provenance keeps the byte offset of odd lines, the text of even ones
    from kvplan.io.vllm import lines
    from kvplan.io.vllm.boots import BootSplitter

    lines._PLANS.clear()
    general, planned = [], []
    by_line, by_plan = BootSplitter("x.log", general.append), BootSplitter("x.log", planned.append)
    offset, refused = 0, 0
    for number, line in enumerate(all_inputs(), start=1):
        text = line.decode("utf-8", "replace")
        keep_offset = number % 2 == 1
        general_says = outcome(by_line.line, number, offset if keep_offset else text, text)
        assert outcome(by_plan.scanned_line, number, offset if keep_offset else None, line) == general_says
        refused += general_says is not None
        offset += len(line) + 1
    by_line.finish()
    by_plan.finish()
    assert len(general) > 100 and refused  # mutants with impossible sizes are refused alike
    assert planned == general
    assert repr(planned) == repr(general)


def outcome(read, *line):
    """None, or the refusal (its text) when ``read(*line)`` refuses the line."""
    try:
        read(*line)
    except ValueError as refusal:
        return repr(refusal)
    return None


@given(
    st.from_regex(r"-?[0-9]{1,6}(\.[0-9]{1,9})?", fullmatch=True) | st.text("0123456789.-+e_ ١٢", max_size=8),
    st.sampled_from(["GiB", "GB", "MB"]),
)
def test_gib_bytes_reads_a_decimal_as_parse_size_does(text, unit):
    # "GB" meant GiB and "MB" MiB; anything but a plain decimal (with Unicode digits, as \d reads them)
    # goes to parse_size, which reads it or refuses it
    spelled = f"{text}{'MiB' if unit == 'MB' else 'GiB'}"
    expected = outcome(parse_size, spelled)
    got = outcome(values.gib_bytes.__wrapped__, text, unit)
    assert got == expected
    if expected is None:
        assert values.gib_bytes.__wrapped__(text, unit) == parse_size(spelled)
