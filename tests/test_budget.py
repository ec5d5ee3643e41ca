"""The uniform budget reproduces the founding worked examples and keeps its invariants."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvplan.budget import BudgetError, median_bytes, round_down_to_blocks, uniform_budget
from kvplan.units import format_size, parse_size
from tests.conftest import GiB, MiB

# The founding example: rooms 18.8, 17.6, 12.9, 16.4 GiB, reserve 0.9 GiB.
# To the nearest byte: 18.8 GiB = 20,186,346,291.2 → 20,186,346,291; 17.6 GiB → 18,897,856,102;
# 12.9 GiB = 13,851,269,529.6 → 13,851,269,530; 16.4 GiB → 17,609,365,914; 0.9 GiB → 966,367,642.
ROOMS = [20_186_346_291, 18_897_856_102, 13_851_269_530, 17_609_365_914]
RESERVE = 966_367_642


def test_room_constants_are_the_article_sizes():
    assert [parse_size(f"{gib}GiB") for gib in ("18.8", "17.6", "12.9", "16.4")] == ROOMS
    assert parse_size("0.9GiB") == RESERVE


def test_four_rank_example():
    budget = uniform_budget(ROOMS, RESERVE)
    # safe = room − reserve: 17.9, 16.7, 12.0, 15.5 GiB
    assert [format_size(b) for b in budget.safe_bytes] == ["17.9 GiB", "16.7 GiB", "12 GiB", "15.5 GiB"]
    # 13,851,269,530 − 966,367,642 = 12,884,901,888 = 12 × 2^30 exactly
    assert budget.uniform_budget_bytes == 12 * GiB
    assert budget.limiting_rank == 2
    assert budget.allocated_total_bytes == 48 * GiB  # 4 × 12 GiB
    # stranded 5.9 + 4.7 + 0 + 3.5 = 14.1 GiB (sum of safe − 48 GiB)
    assert budget.stranded_total_bytes == sum(budget.safe_bytes) - 48 * GiB
    assert [format_size(s) for s in budget.stranded_bytes] == ["5.9 GiB", "4.7 GiB", "0 B", "3.5 GiB"]
    assert format_size(budget.stranded_total_bytes) == "14.1 GiB"
    assert budget.flag == "--kv-cache-memory-bytes=12884901888"


def test_the_average_would_have_been_unsafe():
    # average room (18.8 + 17.6 + 12.9 + 16.4) / 4 = 16.425 GiB ≈ 16.4 GiB, far above rank 2's 12.0 GiB
    average_room = sum(ROOMS) / len(ROOMS)
    assert round(average_room / GiB, 1) == 16.4
    assert average_room - RESERVE > uniform_budget(ROOMS, RESERVE).uniform_budget_bytes


def test_weak_rank_removes_a_third():
    # min 12 GiB, median 18 GiB → ratio 2/3, the weak rank removes one third of typical capacity
    budget = uniform_budget([13 * GiB, 19 * GiB, 20 * GiB], reserve_bytes=GiB)
    assert budget.min_safe_bytes == 12 * GiB
    assert budget.median_safe_bytes == 18 * GiB
    assert budget.min_median_ratio == pytest.approx(2 / 3)
    assert budget.weak_rank_loss_fraction == pytest.approx(1 / 3)


def test_weakest_rank_after_capture_with_one_gib_reserve():
    # 13.1 GiB room − 1 GiB reserve = 12.1 GiB before block rounding
    budget = uniform_budget([parse_size("13.1GiB"), 20 * GiB], reserve_bytes=GiB)
    assert budget.uniform_budget_bytes == parse_size("12.1GiB")
    assert format_size(budget.uniform_budget_bytes) == "12.1 GiB"


def test_block_rounding():
    # 12.1 GiB = 12,992,276,070 B (nearest byte); blocks of 4 MiB (16 tokens × 256 KiB):
    # 12,992,276,070 // 4,194,304 = 3,097 blocks = 12,989,759,488 B; loss 2,516,582 B
    budget = uniform_budget([parse_size("13.1GiB"), 20 * GiB], GiB, block_bytes=4 * MiB)
    assert budget.num_blocks == 3_097
    assert budget.uniform_budget_bytes == 3_097 * 4 * MiB == 12_989_759_488
    assert budget.rounding_loss_bytes == 12_992_276_070 - 12_989_759_488
    # stranded includes the rounding loss: the limiting rank 0 strands exactly that loss
    assert budget.stranded_bytes == (budget.rounding_loss_bytes, (20 - 1) * GiB - 12_989_759_488)


def test_to_frame_and_to_dict():
    budget = uniform_budget(ROOMS, RESERVE)
    frame = budget.to_frame()
    assert frame.index.tolist() == [0, 1, 2, 3]
    assert frame.loc[2, "limiting"]
    assert frame["safe_bytes"].tolist() == list(budget.safe_bytes)
    data = budget.to_dict()
    assert data["uniform_budget_bytes"] == 12 * GiB
    assert data["ranks"][2] == {
        "rank": 2,
        "room_bytes": ROOMS[2],
        "safe_bytes": 12 * GiB,
        "stranded_bytes": 0,
    }


def test_explicit_rank_ids():
    budget = uniform_budget([10 * GiB, 5 * GiB], GiB, ranks=[4, 7])
    assert budget.limiting_rank == 7


@pytest.mark.parametrize(
    ("rooms", "reserve", "fragment"),
    [
        ([], GiB, "no ranks"),
        ([10 * GiB], -1, "must not be negative"),
        ([10 * GiB, 2 * GiB], 3 * GiB, "rank 1: reserve 3 GiB leaves no KV budget"),
        ([10 * GiB, 3 * GiB], 3 * GiB, "rank 1"),  # safe budget exactly 0 is refused too
    ],
)
def test_refusals_name_the_rank(rooms, reserve, fragment):
    with pytest.raises(BudgetError, match=fragment):
        uniform_budget(rooms, reserve)


def test_budget_smaller_than_one_block_is_refused():
    with pytest.raises(BudgetError, match="less than one block"):
        uniform_budget([GiB + MiB], GiB, block_bytes=4 * MiB)


def test_helpers():
    assert round_down_to_blocks(10 * MiB, 4 * MiB) == 8 * MiB
    assert median_bytes([5, 1, 3]) == 3
    assert median_bytes([1, 2, 3, 4]) == 2  # (2 + 3) // 2


rooms_strategy = st.lists(st.integers(min_value=2 * GiB, max_value=200 * GiB), min_size=1, max_size=16)


@given(
    rooms_strategy,
    st.integers(min_value=0, max_value=GiB),
    st.one_of(st.none(), st.integers(min_value=1, max_value=64 * MiB)),
)
def test_invariants(rooms, reserve, block_bytes):
    budget = uniform_budget(rooms, reserve, block_bytes=block_bytes)
    assert all(budget.uniform_budget_bytes <= safe for safe in budget.safe_bytes)
    assert all(stranded >= 0 for stranded in budget.stranded_bytes)
    assert budget.allocated_total_bytes + budget.stranded_total_bytes == sum(budget.safe_bytes)
    assert budget.uniform_budget_bytes <= budget.min_safe_bytes  # rounding never increases
    if block_bytes is not None:
        assert budget.uniform_budget_bytes % block_bytes == 0
        assert budget.min_safe_bytes - budget.uniform_budget_bytes < block_bytes


def test_to_frame_marks_every_tied_rank_limiting():
    # four ranks of 31 GiB with a 1 GiB reserve: each safe budget is 30 GiB, so no rank limits alone;
    # the table marks all four (it used to mark rank 0 only, the JSON key limiting_rank's first of them)
    budget = uniform_budget([31 * GiB] * 4, GiB)
    assert budget.to_frame()["limiting"].tolist() == [True, True, True, True]
    assert budget.limiting_rank == 0  # the JSON key keeps naming the first
    # one weak rank among ties of stronger ones: only it limits
    assert uniform_budget([31 * GiB, 20 * GiB, 31 * GiB], GiB).to_frame()["limiting"].tolist() == [
        False,
        True,
        False,
    ]
