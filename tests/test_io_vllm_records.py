"""One physical line into records (:func:`kvplan.io.vllm.records.split_records`): who printed each
record (process prefix, pid, ip, level, Ray's repeat count) and what it says, for the shapes real
files hold."""

import pytest

from kvplan.io.vllm.records import Record, split_records

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
