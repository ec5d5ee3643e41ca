"""What-if: the pure recompute step gives the library's numbers; the panel only wires controls to it."""

import json
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from kvplan import DATA_DIR, charts
from kvplan import notebook as whatif
from kvplan.budget import uniform_budget
from kvplan.io.model_config import read_model_config
from kvplan.kvspec import kv_spec
from kvplan.notebook import (
    Scenario,
    WhatIfPanel,
    add_back_bytes,
    budget_headline,
    budgets_by_boot,
    co_tenant_bytes,
    concurrency_figure,
    coverage,
    evaluate,
    figure_alt,
    format_headline,
    gib_to_bytes,
    read_launch,
    rows_that_set_the_room,
    sequence_lengths,
    weak_rank_at_median,
    weak_rank_verdict,
)
from kvplan.plan import Evidence, ModelLayout, Policy, boot_free_bytes, decide
from kvplan.units import parse_size
from tests.conftest import GiB, MiB

SAMPLE = DATA_DIR / "boots" / "four-rank"


def scenario_of(ledger, reserve_bytes, **options):
    """The what-if of the pipeline's decision over a ledger, no model."""
    decision = decide(Evidence(ledger), Policy(reserve_bytes))
    return Scenario.from_decision(decision, **{"kv_spec": None, "ref_free_bytes": None, **options})


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
    assert outcome.drift.adjusted_uniform_bytes == 28 * GiB + GiB // 4  # 30 − 1.25 − 0.5 = 28.25 GiB
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
        "reserve_gib",
        "block_size",
        "max_model_len",
        "target_concurrency",
        "add_back_0",
        "add_back_1",
        "add_back_2",
        "add_back_3",
    }
    assert panel.controls["add_back_2"].description == "rank 2: add back [GiB] (other processes 5 GiB)"
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("What-if panel")


def test_panel_recomputes_when_a_control_moves():
    panel = WhatIfPanel(Scenario(ROOMS, RESERVE), co_tenant_bytes=[None, None, 6 * GiB, None])
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
    config = {
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "torch_dtype": "bfloat16",
    }
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
    ledger = pd.DataFrame(
        {
            "source": ["/x/a.log"] * 4,
            "boot": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "room_bytes": [13 * GiB, 18 * GiB, 14 * GiB, 12 * GiB],
            "room_source": ["suggestion"] * 4,
            "outcome": ["ok"] * 4,
        }
    )
    budgets = budgets_by_boot(ledger, GiB)
    assert list(budgets) == ["a.log #0", "a.log #1"]
    assert [b.uniform_budget_bytes for b in budgets.values()] == [12 * GiB, 11 * GiB]
    assert [b.limiting_rank for b in budgets.values()] == [0, 1]


def test_scenario_and_co_tenants_from_a_ledger_take_each_rank_at_its_worst():
    # rank 0: rooms 13 and 14 GiB over two boots → 13; rank 1: 15 and 12 GiB → 12
    ledger = pd.DataFrame(
        {
            "source": ["a.log"] * 4,
            "boot": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "room_bytes": [13 * GiB, 15 * GiB, 14 * GiB, 12 * GiB],
            "room_source": ["suggestion"] * 4,
            "other_process_bytes": [pd.NA, 5 * GiB, pd.NA, 6 * GiB],
            "outcome": ["ok"] * 4,
        }
    )
    scenario = scenario_of(ledger, GiB, max_model_len=8192)
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


def test_target_length_is_the_longest_request_the_target_still_fits():
    # 9830 blocks / 8 sequences = 1228.75 → 1228 blocks of 16 = 19,648 tokens each (< 32,768)
    outcome = evaluate(replace(FOUR_RANK, target_concurrency=8))
    assert outcome.target_length == 19_648
    # a plain no when the target does not fit at max_model_len (issue 14, item 4), with how far it goes
    assert outcome.headline()["target fits"] == (
        "no: 8 sequences of 32,768 do not fit; 8 fit up to 19,648 tokens each"
    )
    assert outcome.verdict().startswith("DOES NOT FIT: 8 sequences of 32,768 tokens")
    # 4 sequences of 32,768 need 4 × 2048 = 8192 ≤ 9830 blocks: the target fits at full length
    four = evaluate(replace(FOUR_RANK, target_concurrency=4))
    assert four.target_length == 32_768
    assert four.headline()["target fits"] == "yes: 4 sequences of 32,768 tokens at once"  # a plain yes
    assert four.verdict() == (
        "FITS: 4 sequences of 32,768 tokens · --kv-cache-memory-bytes=12884377600 · rank 2 limits"
    )


def test_headline_shows_the_block_size_vllm_forces():
    # DeepSeek-V3 (MLA) in 0.12–0.17: block size 16 is overridden to 64; 61 × 576 × 2 B = 70,272 B/token
    # (from 0.18 vLLM keeps a --block-size the MLA backend supports)
    spec = kv_spec(read_model_config("deepseek-v3"), tp=8, vllm_version="0.17.0")
    outcome = evaluate(Scenario(ROOMS, RESERVE, kv_spec=spec, block_size=16, max_model_len=32_768))
    assert outcome.capacity.block_size == 64
    assert outcome.budget.uniform_budget_bytes % (64 * 70_272) == 0
    assert outcome.headline()["block size"] == (
        "64 tokens (block size 16 overridden: "
        "vLLM 0.12–0.17 forces 64-token blocks for the FlashMLA backend unless a multiple of 64)"
    )


def test_concurrency_figure_labels_tokens_at_max_model_len_and_says_why_approximate():
    # Gemma-3-27B (sliding window) on 0.26: tokens = int(concurrency × length) depend on the length
    spec = kv_spec(read_model_config("gemma-3-27b"), tp=2, vllm_version="0.26.0")
    outcome = evaluate(Scenario(ROOMS, RESERVE, kv_spec=spec, max_model_len=131_072, target_concurrency=2))
    assert outcome.curve["tokens"].iloc[0] != outcome.capacity.tokens
    fig = concurrency_figure(outcome)
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("uniform")]
    assert line.get_label() == (
        f"uniform 12 GiB: {outcome.capacity.tokens:,} tokens at 131,072 ({outcome.capacity.max_concurrency:.2f}×)"
    )
    assert [t.get_text() for t in fig.texts] == [f"approximate: {spec.approximate_reason}"]


def test_concurrency_figure_compares_the_weak_rank_at_the_median():
    # rank 2 raised to the median safe budget 16.1 GiB; rank 3's 15.5 GiB then sets the uniform value
    fig = concurrency_figure(evaluate(replace(FOUR_RANK, target_concurrency=8)), weak_rank_fixed=True)
    labels = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert labels[:2] == [
        "uniform 12 GiB: 157,280 tokens at 32,768 (4.80×)",  # 157,280 / 32,768
        "rank 2 raised to the median (16.1 GiB): uniform 15.5 GiB: 203,152 tokens at 32,768 (6.20×)",
    ]
    # crossings: 1228 blocks → 19,648 tokens; 12,697 / 8 = 1587 blocks → 25,392 tokens
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "8 sequences up to 19,648 tokens" in texts and "8 sequences up to 25,392 tokens" in texts


def test_read_launch_joins_the_snapshots_found_next_to_the_logs(tmp_path):
    ledger, _ = read_launch(SAMPLE)
    assert ledger["other_process_bytes"].notna().all()  # joined from nvidia-smi-*.csv in the folder
    bare, _ = read_launch(SAMPLE, nvidia_smi=[])
    assert "other_process_bytes" not in bare.columns or bare["other_process_bytes"].isna().all()
    # another folder with only a log: nothing to join, no error
    (tmp_path / "boot.log").write_text((SAMPLE / "boot.log").read_text())
    alone, _ = read_launch(tmp_path)
    assert "other_process_bytes" not in alone.columns or alone["other_process_bytes"].isna().all()
    assert len(alone) == len(ledger)


def test_coverage_marks_what_each_rank_printed():
    ledger = pd.DataFrame(
        {
            "source": "a.log",
            "boot": [0, 0],
            "rank": [0, 1],
            "room_bytes": [5 * GiB, None],
            "weights_bytes": [GiB, GiB],
        }
    )
    shown = coverage(ledger)
    assert shown.loc["room_bytes"].tolist() == [True, False]
    assert shown.loc["weights_bytes"].tolist() == [True, True]
    assert not shown.loc["cuda_graph_bytes"].any()  # no column: never shown


def test_startup_free_bytes_of_a_reference_and_of_a_later_boot():
    # reference: two boots; rank 0's rooms 13 and 12 GiB → the 12 GiB boot's free memory, 42 GiB;
    # rank 1's rooms 14 and 15 GiB → the 14 GiB boot's, 43 GiB (the pipeline's one F_ref rule)
    reference = pd.DataFrame(
        {
            "source": "r.log",
            "boot": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "room_bytes": [13 * GiB, 14 * GiB, 12 * GiB, 15 * GiB],
            "room_source": "suggestion",
            "outcome": "ok",
            "model": "m",
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 1,
            "data_parallel_size": 1,
            "init_free_bytes": [41 * GiB, 43 * GiB, 42 * GiB, 44 * GiB],
        }
    )
    assert decide(Evidence(reference), Policy(GiB)).ref_free_bytes == (42 * GiB, 43 * GiB)
    # a boot with a manual value shows no room: the lowest free memory over its boots
    boot = pd.DataFrame(
        {"source": "b.log", "rank": [0, 0, 1], "init_free_bytes": [41 * GiB, 40 * GiB, 43 * GiB]}
    )
    assert boot_free_bytes(boot, [0, 1]) == (40 * GiB, 43 * GiB)
    with pytest.raises(ValueError, match=r"b\.log: rank 2 shows no free memory at startup"):
        boot_free_bytes(boot, [0, 1, 2])


def test_panel_redraws_the_ledger_chart_with_the_co_tenant_added_back():
    ledger, _ = read_launch(SAMPLE)
    panel = WhatIfPanel(scenario_of(ledger, RESERVE), ledger=ledger)
    titles = [fig.axes[0].get_title() or fig.axes[0].get_title("left") for fig in panel.figures()]
    assert titles[1].startswith("Where each GPU's memory goes: 12 GiB KV on every rank")
    panel.controls["add_back_2"].value = 5.0
    ax = panel.figures()[1].axes[0]
    (other,) = [c for c in ax.containers if c.get_label() == "other processes"]
    before = ledger.loc[ledger["rank"] == 2, "other_process_bytes"].iloc[0]
    assert other.patches[2].get_height() == pytest.approx((before - 5 * GiB) / GiB)
    assert ax.get_title("left").startswith("Where each GPU's memory goes: 15.5 GiB KV")  # rank 3 limits now


def test_ledger_parts_take_the_add_back_off_the_co_tenant():
    ledger = pd.DataFrame({"rank": [0, 1], "other_process_bytes": [pd.NA, 5 * GiB]})
    parts = charts.LedgerParts.of(ledger, (0, 1)).with_add_back((0, 512 * MiB))
    assert parts.parts[0] == (0, int(4.5 * GiB))  # other processes: unknown is none; 5 GiB − 0.5 GiB


def test_read_launch_lists_the_snapshot_warning_with_the_readers(recwarn):
    # the GPU snapshot alone cannot tell other processes' memory: unknown, and said in the warnings list
    ledger, metadata = read_launch(SAMPLE, nvidia_smi=[SAMPLE / "nvidia-smi-gpu.csv"])
    assert ledger["other_process_bytes"].isna().all()
    assert [w for w in metadata["warnings"] if "--query-compute-apps" in w]
    assert not [w for w in recwarn if w.category.__name__ == "NvidiaSmiWarning"]


# --- drift panel: the flag shown is this boot's, not the reference's ---------------------------------------

DRIFT = DATA_DIR / "boots" / "drift"
# Scenario C: room 31 GiB, reserve 1 GiB → safe 30 GiB; F_ref 42; boots 41.8, 42.1, 40.75, 41.9; G 0.5
DRIFT_SCENARIO = Scenario(
    (31 * GiB,) * 4,
    GiB,
    guard_bytes=GiB // 2,
    ref_free_bytes=(42 * GiB,) * 4,
    boot_free_bytes=tuple(parse_size(f"{gib}GiB") for gib in ("41.8", "42.1", "40.75", "41.9")),
)


def test_drift_headline_shows_the_flag_for_this_boot_and_the_reference_as_such():
    headline = evaluate(DRIFT_SCENARIO).headline()
    # rank 2: 30 − (42 − 40.75) − 0.5 = 28.25 GiB = 30,333,206,528 B; reference 30 GiB = 32,212,254,720 B
    assert headline["flag for this boot"] == "--kv-cache-memory-bytes=30333206528"
    assert headline["limiting rank"] == "2"  # the drift's, not the reference's rank 0
    assert headline["reference flag"] == "--kv-cache-memory-bytes=32212254720"
    assert (
        headline["reference limiting rank"] == "none: every rank the same"
    )  # all four at 30 GiB: a tie names no rank
    assert "flag" not in headline and "uniform budget" not in headline
    assert list(headline)[:3] == ["after drift", "flag for this boot", "limiting rank"]


def test_drift_flag_for_this_boot_is_whole_blocks_when_a_block_size_is_set():
    # block 16 × 81,920 = 1,310,720 B = 1.25 MiB; 28.25 GiB = 28,928 MiB → 23,142.4 → 23,142 blocks
    outcome = evaluate(replace(DRIFT_SCENARIO, bytes_per_token=BYTES_PER_TOKEN))
    assert outcome.boot_budget_bytes == 23_142 * 1_310_720 == 30_332_682_240
    assert outcome.headline()["flag for this boot"] == "--kv-cache-memory-bytes=30332682240"
    assert outcome.headline()["reference flag"] == "--kv-cache-memory-bytes=32212254720"  # 24,576 blocks


def test_drift_table_uniform_budget_and_limiting_rank_are_this_boots():
    table = evaluate(DRIFT_SCENARIO).table()
    assert table["uniform_budget_bytes"].tolist() == [30_333_206_528] * 4  # 28.25 GiB
    assert table["limiting"].tolist() == [False, False, True, False]
    assert table["ref_uniform_budget_bytes"].tolist() == [30 * GiB] * 4
    # the reference boot's four ranks tie at 31 GiB room (30 GiB safe): every one of them limits
    assert table["ref_limiting"].tolist() == [True, True, True, True]


def test_drift_panel_of_the_sample_shows_the_flag_for_this_boot():
    # notebook 04: reference.log profiled, canary.log with the value; reserve 1 GiB, guard 0.5 GiB
    reference, _ = read_launch(DRIFT / "reference.log")
    boot, _ = read_launch(DRIFT / "canary.log")
    decision = decide(Evidence(reference), Policy(GiB))
    panel = WhatIfPanel(
        Scenario.from_decision(
            decision, guard_bytes=GiB // 2, boot_free_bytes=boot_free_bytes(boot, decision.budget.ranks)
        )
    )
    headline = panel.outcome.headline()
    assert headline["flag for this boot"] == "--kv-cache-memory-bytes=30333206528"  # 28.25 GiB
    assert headline["after drift"] == "28.25 GiB (rank 2 limits; re-profile to raise)"
    assert headline["reference budget"] == "30 GiB"


# --- add-back sliders: never more than the co-tenant holds -------------------------------------------------


def test_add_back_is_capped_at_the_co_tenants_exact_bytes():
    ledger, _ = read_launch(SAMPLE)
    co_tenants = co_tenant_bytes(ledger)
    assert co_tenants[0] == 25_840_058_368  # rank 0's co-tenant: 24.07 GiB
    panel = WhatIfPanel(scenario_of(ledger, RESERVE), co_tenant_bytes=co_tenants, ledger=ledger)
    slider = panel.controls["add_back_0"]
    assert slider.max == 25_840_058_368 / 2**30  # 24.0654… GiB exactly, not ceil() = 25
    slider.value = 25.0  # more than the co-tenant holds: the slider stops at its max
    assert panel.scenario().add_back_bytes[0] == 25_840_058_368
    assert add_back_bytes(25.0, 25_840_058_368) == 25_840_058_368
    assert add_back_bytes(2.0, 25_840_058_368) == 2 * GiB


def test_rank_without_known_co_tenant_memory_gets_no_add_back():
    ledger, _ = read_launch(SAMPLE, nvidia_smi=[])  # no nvidia-smi: co-tenants unknown
    panel = WhatIfPanel(scenario_of(ledger, RESERVE), ledger=ledger)
    slider = panel.controls["add_back_2"]
    assert slider.disabled and slider.max == 0.0
    assert "co-tenant memory is unknown" in slider.tooltip
    slider.value = 5.0  # clamped to 0: rank 2's room stays 12.9 GiB, nothing beyond the GPU's total
    assert panel.scenario().add_back_bytes in (None, (0, 0, 0, 0))
    assert panel.outcome.budget.limiting_rank == 2
    assert add_back_bytes(5.0, None) == 0


# --- chart errors are shown in the panel, and leave no figure open ------------------------------------------


def test_panel_on_a_reference_and_a_manual_value_boot_draws_the_ledger_from_the_reference(monkeypatch):
    # data/boots/drift: 4 rows with room (reference.log) + 4 without (canary.log, a manual value);
    # building the panel used to raise "ledger has several rows for rank(s) [0, 1, 2, 3]"
    ledger, _ = read_launch(DRIFT)
    panel = WhatIfPanel(scenario_of(ledger, GiB), ledger=ledger)
    assert panel.error is None and panel.chart_errors == {}
    titles = [figure_alt(fig).removeprefix("Chart: ") for fig in panel.figures()]
    assert titles[1].startswith("Where each GPU's memory goes: 30 GiB KV")  # 31 − 1 GiB, the reference
    assert len(rows_that_set_the_room(ledger)) == 4


def test_a_failing_chart_is_shown_in_the_panel_in_its_place(monkeypatch):
    panel = WhatIfPanel(Scenario(ROOMS, RESERVE), co_tenant_bytes=[None, None, 6 * GiB, None])

    def broken(_budget, **_options):
        raise ValueError("chart failed")

    monkeypatch.setattr(charts, "stranded_chart", broken)
    panel.controls["add_back_2"].value = 1.0  # used to raise out of `.value =` and leave the panel stale
    assert panel.outcome.scenario.add_back_bytes[2] == GiB  # the table and headline are the new ones
    assert panel.chart_errors == {"stranded": "ValueError: chart failed"}
    message = "<b>The stranded chart cannot be drawn:</b> ValueError: chart failed"
    assert panel.images["stranded"].value == message
    assert panel.images["safe budget"].value.startswith('<img class="kvplan-chart"')  # the others still drawn
    with pytest.raises(ValueError, match="chart failed"):
        panel.figures()
    assert plt.get_fignums() == []  # no pyplot figure is ever opened


# --- target concurrency: whole sequences, and a target that never fits -------------------------------------


def test_fractional_target_says_it_rounds_up():
    # 3 sequences × 2048 blocks × 1,310,720 B = 8,053,063,680 B = 7.5 GiB
    headline = evaluate(replace(FOUR_RANK, target_concurrency=2.5)).headline()
    assert headline["target needs"] == "7.5 GiB per rank for 3 sequences of 32,768 (2.5 rounded up to 3)"


def test_a_target_that_fits_at_no_length_says_so():
    # 100,000 sequences need ≥ 100,000 blocks; the budget holds 9830
    outcome = evaluate(replace(FOUR_RANK, target_concurrency=100_000))
    assert outcome.target_length == 0
    assert outcome.headline()["target fits"] == (
        "no: 100,000 sequences do not fit at any length (not even 1 token each)"
    )


def test_target_concurrency_control_takes_whole_sequences():
    panel = WhatIfPanel(replace(FOUR_RANK, target_concurrency=8))
    control = panel.controls["target_concurrency"]
    assert isinstance(control.value, int) and control.step == 1
    control.value = 3
    assert panel.scenario().target_concurrency == 3
    assert panel.outcome.headline()["target needs"] == "7.5 GiB per rank for 3 sequences of 32,768"


# --- block size in effect; max model length beyond the model's ---------------------------------------------


def test_headline_shows_the_block_size_vllm_raises_for_a_hybrid_model():
    spec = kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=8, vllm_version="0.26.0")
    panel = WhatIfPanel(Scenario(ROOMS, RESERVE, kv_spec=spec))  # no max_model_len: no capacity line
    panel.controls["block_size"].value = 16
    assert panel.outcome.headline()["block size"] == f"144 tokens ({spec.block_size_note})"
    assert "raised to 144 tokens" in spec.block_size_note
    # bytes per token only: the block size asked is the one in effect
    assert evaluate(Scenario(ROOMS, RESERVE, bytes_per_token=BYTES_PER_TOKEN)).headline()["block size"] == (
        "16 tokens"
    )


def test_max_model_len_beyond_the_configs_max_position_embeddings_is_warned(tmp_path):
    config = {**read_model_config("llama-3.1-70b"), "max_position_embeddings": 131_072}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    ledger, _ = read_launch(SAMPLE, nvidia_smi=[])
    spec = decide(Evidence(ledger), Policy(RESERVE), ModelLayout(path)).spec
    assert spec.arch.max_position_embeddings == 131_072
    panel = WhatIfPanel(scenario_of(ledger, RESERVE, kv_spec=spec, max_model_len=32_768))
    assert "max model length" not in panel.outcome.headline()  # 32,768 ≤ 131,072
    panel.controls["max_model_len"].value = 10_000_000
    assert panel.outcome.headline()["max model length"].startswith(
        "10,000,000 tokens exceeds the model config's max_position_embeddings (131,072)"
    )
    # the bundled llama-3.1-70b config states none: no warning
    bundled = decide(Evidence(ledger), Policy(RESERVE), ModelLayout("llama-3.1-70b")).spec
    plain = scenario_of(ledger, RESERVE, kv_spec=bundled, max_model_len=10_000_000)
    assert plain.position_limit is None and "max model length" not in evaluate(plain).headline()


def test_launch_snapshots_find_the_files_beside_the_logs_unless_given(tmp_path):
    (tmp_path / "boot.log").write_text("")
    assert whatif.launch_snapshots([tmp_path / "boot.log"]) == []
    (tmp_path / "nvidia-smi-apps.csv").write_text("")
    (tmp_path / "nvidia-smi-gpu.csv").write_text("")
    found = whatif.launch_snapshots([tmp_path / "boot.log", tmp_path / "boot.log"])
    assert found == [tmp_path / "nvidia-smi-gpu.csv", tmp_path / "nvidia-smi-apps.csv"]  # one folder, once
    assert whatif.snapshots_in(tmp_path) == found
    assert whatif.launch_snapshots([tmp_path / "boot.log"], []) == []
    assert [str(path) for path in whatif.launch_snapshots([tmp_path / "boot.log"], ["x.csv"])] == ["x.csv"]


def test_launch_max_model_len_takes_the_given_else_the_logged_length_and_names_the_parameter():
    ledger = pd.DataFrame({"source": "a.log", "boot": 0, "rank": [0, 1], "max_model_len": [32768, 32768]})
    assert whatif.launch_max_model_len(ledger) == 32768
    assert whatif.launch_max_model_len(ledger, 4096) == 4096
    disagree = ledger.assign(boot=[0, 1], max_model_len=[32768, 16384])
    for unknown in (ledger.drop(columns="max_model_len"), ledger.assign(max_model_len=None)):
        with pytest.raises(ValueError, match="MAX_MODEL_LEN"):
            whatif.launch_max_model_len(unknown)
    with pytest.raises(ValueError, match="mix compatibility keys"):
        whatif.launch_max_model_len(disagree)
    for wrong in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="MAX_MODEL_LEN"):
            whatif.launch_max_model_len(ledger, wrong)
