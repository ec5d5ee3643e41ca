"""The bundle's JSON text in pieces is byte for byte what json.dumps writes, and the light readers agree."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from kvplan import DATA_DIR
from kvplan.checks import defaulted_key_fields, read_defaulted_key_fields
from kvplan.evidence.record import record_bytes, same_bytes, same_canonical, seal
from kvplan.json_text import canonical_chunks, indented_chunks
from kvplan.room import read_vllm_logs_rooms

#: Scalars that JSON writes in special ways: big ints, -0.0, NaN and infinities, escapes, non-ASCII,
#: separators inside strings (the C encoder's item separator must not be confused with them).
SCALARS = [
    None,
    True,
    False,
    0,
    -3,
    2**70,
    1.5,
    -0.0,
    1e300,
    float("nan"),
    float("inf"),
    "",
    'é\n"x',
    "a,\n  b: c",
]
KEYS = ["a", "b", "c,", "d: ", 1, 2.5, True, None, "é"]


def random_value(rng: random.Random, depth: int = 0) -> object:
    """A random JSON-able value: nested dicts, lists and tuples of :data:`SCALARS`."""
    draw = rng.random()
    if depth > 4 or draw < 0.4:
        return rng.choice(SCALARS)
    if draw < 0.7:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if draw < 0.8:
        return tuple(random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(20))
def test_pieces_are_json_dumps(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        value = random_value(rng)
        assert "".join(indented_chunks(value)) == json.dumps(value, indent=2)
        try:
            canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
        except TypeError:  # keys of mixed types cannot be sorted: the pieces refuse them too
            with pytest.raises(TypeError):
                "".join(canonical_chunks(value))
            continue
        assert "".join(canonical_chunks(value)) == canonical


def test_a_record_of_ledger_rows() -> None:
    rows = [{"rank": rank, "room_bytes": 13 * 2**30 + rank, "source": None, "ok": True} for rank in range(4)]
    record = {"schema": "kvplan.budget", "ledger": rows, "files": {}, "ranks": [], "seal_sha256": "x"}
    assert record_bytes(record) == (json.dumps(record, indent=2) + "\n").encode()
    without_seal = {k: v for k, v in record.items() if k != "seal_sha256"}
    expected = json.dumps(without_seal, sort_keys=True, separators=(",", ":")).encode()
    assert seal(record) == hashlib.sha256(expected).hexdigest()


def test_piecewise_comparisons() -> None:
    assert same_bytes(b"", [])
    assert not same_bytes(b"abc", [b"abd"])
    assert not same_bytes(b"abcd", [b"ab", b"c"])  # data left over
    assert same_canonical({"a": 1, "b": [1, 2]}, {"b": (1, 2), "a": 1})
    assert not same_canonical({"a": True}, {"a": 1})  # true and 1 are not the same record
    assert not same_canonical([1, 2], [1, 2, 3])


@pytest.mark.parametrize(
    "log", sorted((DATA_DIR / "boots").glob("*/*.log")), ids=lambda path: path.parent.name
)
def test_defaulted_fields_from_rows_are_the_frames(log) -> None:
    _, metadata = read_vllm_logs_rooms([log])
    assert read_defaulted_key_fields(metadata) == defaulted_key_fields(metadata.provenance)
