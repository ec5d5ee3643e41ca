"""The scan's one specification: a line is a candidate when it holds an anchor.

:func:`kvplan.io.vllm.scan.iter_candidate_lines` is a sealed engine (``docs/architecture.md``): it gives
``(line number from 1, byte offset, raw bytes)`` of every line that holds one of
:data:`~kvplan.io.vllm.scan.ANCHORS`, once, whatever the block size it reads. The reference below applies
that rule line by line; the engine must give exactly its lines.
"""

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan import DATA_DIR
from kvplan.io.vllm import scan

SAMPLE_PATHS = sorted(DATA_DIR.glob("**/*.log")) + sorted(
    (DATA_DIR.parent / "tests" / "data").glob("**/*.log")
)


def reference_candidates(data):
    """The rule, line by line: ``(number, offset, line)`` of each line holding an anchor."""
    found, offset = [], 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        if any(anchor in line for anchor in scan.ANCHORS):
            found.append((number, offset, line))
        offset += len(line) + 1
    return found


def candidates(data, chunk_bytes=None):
    return list(scan.iter_candidate_lines(io.BytesIO(data), chunk_bytes=chunk_bytes))


def test_a_line_holding_anchors_is_read_once():
    # a line holding three anchors is one candidate; an anchor cut by a newline is in no line
    data = b"EngineCore failed to start.\nError: Available KV cache memory\nAvailable KV cache me\nmory\n"
    assert candidates(data) == [
        (1, 0, b"EngineCore failed to start."),
        (2, 28, b"Error: Available KV cache memory"),
    ]
    assert candidates(data) == reference_candidates(data)


def test_the_last_line_without_a_newline_is_read():
    data = b"noise\nAvailable KV cache memory: 1.0 GiB"
    assert candidates(data) == [(2, 6, b"Available KV cache memory: 1.0 GiB")]


SAMPLE_LINES = b"".join(path.read_bytes() for path in SAMPLE_PATHS[:6]).splitlines(keepends=True)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([*SAMPLE_LINES, b"noise\n", b"\n", b"x" * 40 + b"\n"]), max_size=25),
    st.sampled_from([b"", b"Available KV cache memory: 1.0 GiB", b"tail"]),
    st.integers(min_value=1, max_value=300),
)
def test_any_block_size_gives_the_lines_of_the_rule(lines, last, chunk_bytes):
    # a block boundary (inside a line, on a newline, or a block without any newline) changes nothing
    data = b"".join(lines) + last
    assert [found for found in reference_candidates(data) if found[1] < len(data)] == candidates(
        data, chunk_bytes
    )


def test_every_sample_is_scanned_by_the_rule():
    # every bundled and test log, one after the other, as one file, at three block sizes
    data = b"".join(path.read_bytes().rstrip(b"\n") + b"\n" for path in SAMPLE_PATHS)
    expected = [found for found in reference_candidates(data) if found[1] < len(data)]
    assert len(expected) > 1000
    for chunk_bytes in (None, 4096, 777):
        assert candidates(data, chunk_bytes) == expected
