"""One physical line into records (:func:`kvplan.io.vllm.records.split_records`): who printed each
record (process prefix, pid, ip, level, Ray's repeat count) and what it says, for the shapes real
files hold."""

from typing import NamedTuple

import pytest

from kvplan.io.vllm.records import split_records


class Record(NamedTuple):
    """A record as :func:`split_records` gives it (a plain tuple), by field."""

    message: str
    process: str = ""
    pid: int | None = None
    ip: str | None = None
    level: str | None = None
    repeated: int = 0


HEAD = "INFO 08-14 14:07:22 [a.py:1]"
CASES = [
    (
        f"(Worker_TP1 pid=12) {HEAD} Available KV cache memory: 1.0 GiB",
        [Record("Available KV cache memory: 1.0 GiB", "Worker_TP1", 12, None, "INFO")],
    ),
    (
        "(VllmWorker rank=2 pid=3, ip=10.0.0.4) WARNING 08-14 14:07:22.123 [a.py:1] x [repeated 3x across cluster]",
        [Record("x", "VllmWorker rank=2", 3, "10.0.0.4", "WARNING", 3)],
    ),
    (f"{HEAD} plain", [Record("plain", level="INFO")]),
    ("(Worker pid=5) no header here", [Record("no header here", "Worker", 5)]),
    ("   bare message  ", [Record("bare message")]),
    ("", []),
    # a compose prefix is a wrapper's stamp, not a record
    (
        f"web-1  | (Worker_TP0 pid=9) {HEAD} after a compose prefix",
        [Record("after a compose prefix", "Worker_TP0", 9, None, "INFO")],
    ),
    # two processes wrote into one line
    (
        f"(Worker_TP0 pid=9) {HEAD} one (Worker_TP1 pid=10) {HEAD} two",
        [Record("one", "Worker_TP0", 9, None, "INFO"), Record("two", "Worker_TP1", 10, None, "INFO")],
    ),
    (
        f"(Worker_TP0 pid=9) {HEAD} text then INFO 08-14 14:07:23 [b.py:2] more",
        [Record("text then", "Worker_TP0", 9, None, "INFO"), Record("more", level="INFO")],
    ),
    # colour codes: real ones stripped; those that lost their ESC byte stripped in the head only
    (
        f"(Worker_TP0 pid=9) {HEAD} [1mbold[0m text",
        [Record("[1mbold[0m text", "Worker_TP0", 9, None, "INFO")],
    ),
    (
        f"[1;36m(Worker_TP0 pid=9)[0;0m {HEAD} lost ESC bytes",
        [Record("lost ESC bytes", "Worker_TP0", 9, None, "INFO")],
    ),
    (
        f"\x1b[1;36m(Worker_TP0 pid=9)\x1b[0;0m {HEAD} coloured",
        [Record("coloured", "Worker_TP0", 9, None, "INFO")],
    ),
    (
        "\x1b[32mINFO\x1b[0m 08-14 14:07:22 [a.py:1] one \x1b[1;36m(Worker_TP1 pid=10)\x1b[0;0m two",
        [Record("one", level="INFO"), Record("two", "Worker_TP1", 10)],
    ),
    (
        "\x1b[1;36m(Worker_TP0 pid=9)\x1b[0;0m [1mhalf-lost[0m codes",
        [Record("half-lost[0m codes", "Worker_TP0", 9)],
    ),
    # a progress bar's carriage return ends a record
    (f"50%|##  \r{HEAD} done", [Record("50%|##"), Record("done", level="INFO")]),
]


@pytest.mark.parametrize("line, expected", CASES)
def test_a_line_splits_into_its_records(line, expected):
    assert split_records(line) == expected


def test_lines_of_one_shape_keep_their_own_values():
    # issue 23: where the records lie is learnt once per shape (digits read as 0); each line's own
    # digits, names and message still come from the line itself
    first = split_records(
        f"(Worker_TP1 pid=12) {HEAD} Available KV cache memory: 1.5 GiB [repeated 2x across cluster]"
    )
    second = split_records(
        f"(Worker_TP7 pid=98) {HEAD} Available KV cache memory: 9.0 GiB [repeated 4x across cluster]"
    )
    assert first == [Record("Available KV cache memory: 1.5 GiB", "Worker_TP1", 12, None, "INFO", 2)]
    assert second == [Record("Available KV cache memory: 9.0 GiB", "Worker_TP7", 98, None, "INFO", 4)]


def test_colour_codes_inside_a_message_or_a_prefix_are_cut_out_of_it():
    # issue 23: a real colour code inside a field leaves its text in two pieces of the line, joined
    line = "(Engine\x1b[0mCore_DP1 pid=4\x1b[1m2, ip=10.0.\x1b[0m0.5) INFO 08-14 14:07:22 [a.py:1] KV \x1b[32mcache"
    assert split_records(line) == [Record("KV cache", "EngineCore_DP1", 42, "10.0.0.5", "INFO")]
