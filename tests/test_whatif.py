"""What-if: the pure recompute step gives the library's numbers; the panel only wires controls to it."""

from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from kvplan.budget import uniform_budget
from kvplan.units import parse_size
from kvplan.whatif import (
    Scenario,
    WhatIfPanel,
    budget_headline,
    budgets_by_boot,
    co_tenant_bytes,
    evaluate,
    format_headline,
    gib_to_bytes,
    sequence_lengths,
    weak_rank_at_median,
    weak_rank_verdict,
)
from tests.conftest import GiB

# Scenario A: rooms 18.8, 17.6, 12.9, 16.4 GiB (nearest byte), reserve 0.9 GiB → 12 GiB, rank 2 limits.
ROOMS = tuple(parse_size(f"{gib}GiB") for gib in ("18.8", "17.6", "12.9", "16.4"))
RESERVE = parse_size("0.9GiB")
# Llama-3.1-70B at TP=4: 2 KV heads per rank × 128 × 2 (K and V) × 2 B × 80 layers = 81,920 B per token
BYTES_PER_TOKEN = 81_920
FOUR_RANK = Scenario(ROOMS, RESERVE, bytes_per_token=BYTES_PER_TOKEN, max_model_len=32_768)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_founding_example_with_blocks_tokens_and_concurrency():
    outcome = evaluate(FOUR_RANK)
    # block = 16 × 81,920 = 1,310,720 B; 12 GiB / 1,310,720 = 9830.4 → 9830 blocks
    assert outcome.budget.num_blocks == 9830
    assert outcome.budget.uniform_budget_bytes == 9830 * 1_310_720  # 12,884,377,600 B
    assert outcome.budget.limiting_rank == 2
    assert outcome.capacity.tokens == 157_280  # 9830 × 16
    assert outcome.capacity.max_concurrency == 9830 / 2048  # 32,768 / 16 = 2048 blocks per sequence
    assert outcome.curve["seq_len"].tolist() == [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert outcome.curve["whole_sequences"].tolist()[-1] == 4  # floor(4.7998)
    headline = outcome.headline()
    assert headline["flag"] == "--kv-cache-memory-bytes=12884377600"
    assert headline["tokens"] == "157,280"
    assert headline["max concurrency"] == "4.80× at 32,768"


def test_target_concurrency_needs_bytes_per_rank():
    # 8 sequences × 2048 blocks × 1,310,720 B = 21,474,836,480 B = 20 GiB per rank
    outcome = evaluate(replace(FOUR_RANK, target_concurrency=8))
    assert outcome.target_bytes == 20 * GiB
    assert outcome.headline()["target needs"] == "20 GiB per rank for 8 sequences of 32,768"
    # a fractional target rounds up to whole sequences: 7.5 → 8
    assert evaluate(replace(FOUR_RANK, target_concurrency=7.5)).target_bytes == 20 * GiB


def test_block_size_and_length_move_capacity():
    # block 32: 32 × 81,920 = 2,621,440 B; 12 GiB → 4915 blocks × 32 = 157,280 tokens
    outcome = evaluate(replace(FOUR_RANK, block_size=32, max_model_len=32_768))
    assert outcome.budget.num_blocks == 4915  # 12,884,901,888 // 2,621,440 = 4915.2
    assert outcome.capacity.tokens == 157_280
    assert evaluate(replace(FOUR_RANK, max_model_len=8192)).capacity.max_concurrency == 9830 / 512


def test_adding_back_the_co_tenant_moves_the_limiting_rank():
    # rank 2 gets 5 GiB back: 12.9 + 5 − 0.9 = 17.0 GiB; rank 3's 15.5 GiB now limits
    outcome = evaluate(Scenario(ROOMS, RESERVE, add_back_bytes=(0, 0, 5 * GiB, 0)))
    assert outcome.budget.limiting_rank == 3
    assert outcome.budget.uniform_budget_bytes == ROOMS[3] - RESERVE
    table = outcome.table()
    assert table.loc[2, "add_back_bytes"] == 5 * GiB
    assert table.loc[2, "room_bytes"] == ROOMS[2] + 5 * GiB


def test_add_back_must_match_the_ranks():
    with pytest.raises(ValueError, match="3 add-back values for 4 ranks"):
        evaluate(Scenario(ROOMS, RESERVE, add_back_bytes=(0, 0, 0)))


def test_drift_uses_each_rank_safe_budget_and_the_guard():
    # Scenario C: room 31 GiB, reserve 1 GiB → safe 30 GiB; F_ref 42; boots 41.8, 42.1, 40.75, 41.9; G 0.5
    boot = tuple(parse_size(f"{gib}GiB") for gib in ("41.8", "42.1", "40.75", "41.9"))
    scenario = Scenario(
        (31 * GiB,) * 4, GiB, guard_bytes=GiB // 2, ref_free_bytes=(42 * GiB,) * 4, boot_free_bytes=boot
    )
    outcome = evaluate(scenario)
    assert outcome.drift.uniform_budget_bytes == 28 * GiB + GiB // 4  # 30 − 1.25 − 0.5 = 28.25 GiB
    assert outcome.drift.limiting_rank == 2
    assert outcome.headline()["after drift"] == "28.25 GiB (rank 2 limits; re-profile to raise)"
    assert outcome.table()["adjusted_bytes"].tolist() == list(outcome.drift.adjusted_bytes)
    with pytest.raises(ValueError, match="ref_free_bytes"):
        evaluate(replace(scenario, ref_free_bytes=None))


def test_sequence_lengths_end_at_max_model_len():
    assert sequence_lengths(4096, shortest=1024) == [1024, 2048, 4096]
    assert sequence_lengths(100) == [100]
    with pytest.raises(ValueError, match="positive"):
        sequence_lengths(0)


def test_gib_to_bytes_matches_parse_size():
    assert gib_to_bytes(1.9) == parse_size("1.9GiB") == 2_040_109_466  # 1.9 × 2^30 = 2,040,109,465.6


def test_panel_starts_from_the_exact_scenario():
    panel = WhatIfPanel(FOUR_RANK, co_tenant_bytes=[None, None, 5 * GiB, None])
    assert panel.scenario() == FOUR_RANK  # untouched controls keep the exact bytes
    assert panel.outcome.budget == evaluate(FOUR_RANK).budget
    assert panel.outcome.capacity == evaluate(FOUR_RANK).capacity
    assert set(panel.controls) == {
        "reserve_gib", "block_size", "max_model_len", "target_concurrency",
        "add_back_0", "add_back_1", "add_back_2", "add_back_3",
    }
    assert panel.controls["add_back_2"].description == "rank 2: add back [GiB] (other processes 5 GiB)"
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("What-if panel")


def test_panel_recomputes_when_a_control_moves():
    panel = WhatIfPanel(Scenario(ROOMS, RESERVE))
    panel.controls["reserve_gib"].value = 1.9
    # 12.9 GiB − 1.9 GiB = 13,851,269,530 − 2,040,109,466 = 11,811,160,064 B = 11 GiB exactly
    assert panel.outcome.budget.uniform_budget_bytes == 11 * GiB
    panel.controls["add_back_2"].value = 5.0
    assert panel.outcome.budget.limiting_rank == 3  # 16.4 − 1.9 = 14.5 < 12.9 + 5 − 1.9 = 16.0
    assert panel.outcome.budget == evaluate(panel.scenario()).budget


def test_panel_shows_the_error_instead_of_a_budget():
    panel = WhatIfPanel(Scenario(ROOMS, RESERVE))
    panel.controls["reserve_gib"].value = 4.0  # max of the slider; still below every room
    panel.controls["add_back_2"].value = 0.0
    assert panel.error is None
    panel.base = replace(panel.base, room_bytes=(ROOMS[0], ROOMS[1], 3 * GiB, ROOMS[3]))
    panel.update()  # rank 2: 3 GiB room − 4 GiB reserve ≤ 0
    assert panel.outcome is None
    assert "rank 2" in panel.error


def test_panel_draws_every_chart_the_inputs_allow():
    boot = (42 * GiB, 42 * GiB, 41 * GiB, 42 * GiB)
    scenario = replace(FOUR_RANK, target_concurrency=8, ref_free_bytes=(42 * GiB,) * 4, boot_free_bytes=boot)
    panel = WhatIfPanel(scenario)
    assert "guard_gib" in panel.controls
    figures = panel.figures()
    titles = [fig.axes[0].get_title() for fig in figures]
    assert titles[0].startswith("One value for every rank")
    assert titles[1].startswith("Stranded on the stronger ranks")
    assert titles[2].startswith("What the budget buys")
    assert figures[3]._suptitle.get_text().startswith("Rank 2 lost the most")


def test_a_model_spec_gives_vllm_figures_and_follows_the_block_size():
    from kvplan.kvspec import kv_spec

    # Llama-3.1-70B shape: 80 layers, 8 KV heads, head_dim 128, bf16; TP=4 → 81,920 B per token per rank
    config = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}
    spec = kv_spec(config, tp=4, vllm_version="0.26.0")
    scenario = Scenario(ROOMS, RESERVE, kv_spec=spec, max_model_len=32_768, target_concurrency=8)
    outcome = evaluate(scenario)
    assert outcome.budget.num_blocks == 9830  # as with bytes_per_token: 12 GiB // 1,310,720
    # 0.21+: tokens = int(9830 / 2048 × 32,768) = 157,280
    assert outcome.capacity.tokens == 157_280
    assert outcome.curve["tokens"].tolist()[-1] == 157_280
    assert outcome.target_bytes == 20 * GiB  # 8 × 2048 × 1,310,720
    # block 32 → 2,621,440 B blocks: 4915 of them
    assert evaluate(replace(scenario, block_size=32)).budget.num_blocks == 4915
    panel = WhatIfPanel(scenario)
    panel.controls["block_size"].value = 32
    assert panel.outcome.budget.num_blocks == 4915


def test_headline_text_of_the_founding_example():
    text = format_headline(budget_headline(uniform_budget(ROOMS, RESERVE)))
    assert text.splitlines() == [
        "uniform budget  12 GiB",
        "flag            --kv-cache-memory-bytes=12884901888",
        "limiting rank   2",
        "stranded total  14.1 GiB",  # 5.9 + 4.7 + 0 + 3.5
        "min/median      0.745",  # 12.0 / median(12.0, 15.5, 16.7, 17.9) = 12.0 / 16.1
    ]


def test_verdict_fix_the_weak_rank_or_tune_the_value():
    # 1 − 12.0 / 16.1 = 0.2547 ≥ 10 %: the weak rank is the lever
    assert weak_rank_verdict(uniform_budget(ROOMS, RESERVE)) == (
        "Fix the weak rank: rank 2 (12 GiB) removes 25.5% of the median rank's safe budget (16.1 GiB); "
        "find what else holds memory on its GPU before tuning the value."
    )
    # safe 15, 15.5, 16 GiB: 1 − 15 / 15.5 = 3.2 % < 10 %: tune the value
    even = uniform_budget([16 * GiB, 33 * GiB // 2, 17 * GiB], GiB)
    assert weak_rank_verdict(even) == (
        "Tune the value: the weakest rank (0, 15 GiB) is within 3.2% of the median (15.5 GiB); "
        "the reserve is the lever."
    )


def test_budgets_by_boot_gives_one_budget_per_boot():
    # boot 0: rooms 13, 18 GiB; boot 1: rooms 14, 12 GiB; reserve 1 GiB
    ledger = pd.DataFrame({
        "source": ["/x/a.log"] * 4, "boot": [0, 0, 1, 1], "rank": [0, 1, 0, 1],
        "room_bytes": [13 * GiB, 18 * GiB, 14 * GiB, 12 * GiB], "room_source": ["suggestion"] * 4,
        "outcome": ["ok"] * 4,
    })
    budgets = budgets_by_boot(ledger, GiB)
    assert list(budgets) == ["a.log #0", "a.log #1"]
    assert [b.uniform_budget_bytes for b in budgets.values()] == [12 * GiB, 11 * GiB]
    assert [b.limiting_rank for b in budgets.values()] == [0, 1]


def test_scenario_and_co_tenants_from_a_ledger_take_each_rank_at_its_worst():
    # rank 0: rooms 13 and 14 GiB over two boots → 13; rank 1: 12 GiB (boot 1 only shows it)
    ledger = pd.DataFrame({
        "source": ["a.log"] * 4, "boot": [0, 0, 1, 1], "rank": [0, 1, 0, 1],
        "room_bytes": [13 * GiB, pd.NA, 14 * GiB, 12 * GiB], "room_source": ["suggestion"] * 4,
        "other_process_bytes": [pd.NA, 5 * GiB, pd.NA, 6 * GiB], "outcome": ["ok"] * 4,
    })
    scenario = Scenario.from_ledger(ledger, GiB, max_model_len=8192)
    assert scenario == Scenario((13 * GiB, 12 * GiB), GiB, ranks=(0, 1), max_model_len=8192)
    assert co_tenant_bytes(ledger) == [None, 6 * GiB]  # the most any boot saw
    assert co_tenant_bytes(ledger.drop(columns="other_process_bytes")) == [None, None]


def test_weak_rank_at_median_shows_what_fixing_it_buys():
    # safe 17.9, 16.7, 12.0, 15.5 GiB; median 16.1 GiB → rank 2 gets 4.1 GiB back, rank 3 (15.5) then limits
    outcome = evaluate(FOUR_RANK)
    fixed = evaluate(weak_rank_at_median(outcome))
    budget = outcome.budget
    assert fixed.scenario.add_back_bytes[2] == budget.median_safe_bytes - budget.min_safe_bytes
    assert fixed.budget.limiting_rank == 3
    # 16,642,998,272 B (15.5 GiB) // 1,310,720 B = 12,697 blocks × 16 = 203,152 tokens (vs 157,280)
    assert fixed.budget.num_blocks == (ROOMS[3] - RESERVE) // 1_310_720 == 12_697
    assert fixed.capacity.tokens == 203_152
