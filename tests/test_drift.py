"""Reuse on a later boot: cut by lost free memory plus a guard, never raised."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvplan.drift import adjusted_budget_bytes, drift_budget
from kvplan.units import parse_size
from tests.conftest import GiB


def test_single_rank_example():
    # 30 GiB − (42 − 40.75) GiB − 0.5 GiB = 28.25 GiB
    adjusted = adjusted_budget_bytes(30 * GiB, 42 * GiB, parse_size("40.75GiB"), parse_size("0.5GiB"))
    assert adjusted == parse_size("28.25GiB")


def test_the_rank_that_lost_most_bounds_the_launch():
    # free 41.8, 42.1, 40.6, 41.9 GiB against 42 GiB: the 40.6 GiB rank (rank 2) lost 1.4 GiB;
    # the average free memory (41.6 GiB) would hide it.
    boot_free = [parse_size(f"{gib}GiB") for gib in ("41.8", "42.1", "40.6", "41.9")]
    drift = drift_budget(30 * GiB, 42 * GiB, boot_free, guard_bytes=0)
    assert drift.limiting_rank == 2
    assert drift.adjusted_uniform_bytes == 30 * GiB - (42 * GiB - parse_size("40.6GiB"))
    assert round(sum(boot_free) / 4 / GiB, 1) == 41.6
    # rank 1 gained 0.1 GiB: no increase, but "re-profile to raise"
    assert drift.adjusted_bytes[1] == 30 * GiB
    assert drift.drift_bytes[1] < 0
    assert drift.reprofile_to_raise


def test_no_raise_flag_when_every_rank_lost_memory():
    drift = drift_budget([30 * GiB, 29 * GiB], [42 * GiB, 41 * GiB], [41 * GiB, 41 * GiB], GiB)
    # rank 0: 30 − 1 − 1 = 28; rank 1: 29 − 0 − 1 = 28
    assert drift.adjusted_bytes == (28 * GiB, 28 * GiB)
    assert not drift.reprofile_to_raise
    assert drift.to_dict()["ranks"][0] == {"rank": 0, "drift_bytes": GiB, "adjusted_bytes": 28 * GiB}
    assert drift.to_frame().loc[1, "adjusted_bytes"] == 28 * GiB


def test_refusals():
    with pytest.raises(ValueError, match="differ in length"):
        drift_budget([1, 2], [1, 2, 3], 1)
    with pytest.raises(ValueError, match="guard"):
        drift_budget(1, 1, 1, guard_bytes=-1)
    with pytest.raises(ValueError, match="empty"):
        drift_budget([], 1, 1)


sizes = st.integers(min_value=0, max_value=100 * GiB)


@given(sizes, sizes, sizes, st.integers(min_value=0, max_value=GiB))
def test_drift_never_increases_a_budget(ref_budget, ref_free, boot_free, guard):
    assert adjusted_budget_bytes(ref_budget, ref_free, boot_free, guard) <= ref_budget


def test_drift_gives_a_launch_in_whole_blocks_with_its_utilization(capsys):  # issue 24 (review)
    from kvplan.cli import main

    argv = [
        "drift",
        "--ref-free",
        "42GiB",
        "--ref-budget",
        "30GiB",
        "--boot-free",
        "40.75GiB",
        "--guard",
        "0.5GiB",
    ]
    assert main([*argv, "--block-bytes", "655360", "--total", "47663399567", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # 28.25 GiB = 30,333,206,528 B → 46,284 whole blocks of 655,360 B = 30,332,682,240 B; U: 40.75 − 0.5 GiB
    # less the 5.12 MiB margin holds ceil((47,663,399,567 B + margin) × 0.90) = 40.0 GiB, not × 0.91 = 40.4 GiB
    assert data["uniform_budget_bytes"] == 30_333_206_528
    assert data["launch_flags"] == ["--kv-cache-memory-bytes=30332682240", "--gpu-memory-utilization=0.90"]
    assert data["flag"] == "--kv-cache-memory-bytes=30332682240"
    assert main(argv) == 0  # without them, the text says what the flag lacks and what to give
    out = capsys.readouterr().out
    assert "not rounded to whole KV blocks: give --block-bytes" in out and "give --total" in out
