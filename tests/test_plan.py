"""The one decision pipeline: every consumer's numbers come from :func:`kvplan.plan.decide`."""

from datetime import datetime, timezone

import pandas as pd
import pytest

from kvplan import DATA_DIR, evidence
from kvplan.cli import main
from kvplan.plan import ModelLayout, Policy, boot_free_bytes, decide, given_rooms

GiB = 2**30
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)

# Two ranks of one boot: rank 0 shows its room (30 GiB) and 50 GiB free at startup; rank 1 shows only
# its own 52 GiB free (a log that prints the room on local rank 0 only), so --assume-uniform gives it
# rank 0's room. F_ref of rank 1 is its own startup free memory, 52 GiB (the highest its boots show:
# the strictest reference for a room that is not its own), wherever the decision is made.
RANK0_ONLY_CSV = """\
rank,outcome,room_bytes,room_source,init_free_bytes,model,tensor_parallel_size,pipeline_parallel_size,data_parallel_size,vllm_version,block_size
0,ok,30GiB,manual,50GiB,meta-llama/Llama-3.1-8B-Instruct,2,1,1,0.23.0,16
1,ok,,,52GiB,meta-llama/Llama-3.1-8B-Instruct,2,1,1,0.23.0,16
"""


@pytest.fixture
def rank0_only(tmp_path):
    path = tmp_path / "rank0-only.csv"
    path.write_text(RANK0_ONLY_CSV)
    return path


def test_assume_uniform_f_ref_agrees_between_approval_gate_and_notebook(rank0_only, tmp_path):
    policy = Policy(GiB, assume_uniform=True)
    # notebook 04's path: decide(REFERENCE, Policy(...)).ref_free_bytes
    notebook = decide([rank0_only], policy).ref_free_bytes
    assert notebook == (50 * GiB, 52 * GiB)
    bundle = evidence.approve([rank0_only], tmp_path / "out", policy, "QA", now=NOW)
    record = evidence.read_bundle(bundle)
    assert [rank["init_free_bytes"] for rank in record["ranks"]] == [50 * GiB, 52 * GiB]
    _, approved = evidence.verified_approval(bundle)  # what `kvplan gate` judges against
    assert approved.ref_free_bytes == notebook


def test_budget_cli_and_the_pipeline_give_the_same_flag(capsys):
    # DESIGN's worked example: rooms 18.8, 17.6, 12.9, 16.4 GiB, reserve 0.9 GiB → rank 2's 12.0 GiB
    rooms = [int(gib * GiB) for gib in (18.8, 17.6, 12.9, 16.4)]
    decision = decide(given_rooms(rooms), Policy(int(0.9 * GiB)))
    assert decision.budget.uniform_budget_bytes == int(12.9 * GiB) - int(0.9 * GiB)
    assert main(["budget", "--room", "18.8GiB,17.6GiB,12.9GiB,16.4GiB", "--reserve", "0.9GiB"]) == 0
    assert decision.budget.flag in capsys.readouterr().out


def test_the_sample_launch_decides_once_with_capacity_and_checks():
    # four-rank sample, llama-3.1-70b TP4: 9,830 blocks of 16 tokens = 157,280 tokens (make demo's numbers)
    decision = decide(
        [DATA_DIR / "boots" / "four-rank" / "boot.log"],
        Policy(966_367_642),
        ModelLayout("llama-3.1-70b", {"tp": 4}),
    )
    assert decision.budget.num_blocks == 9_830
    assert decision.capacity_at_max_len.tokens == 9_830 * 16
    assert decision.rooms.loc[2, "room_bytes"] == min(decision.budget.room_bytes)  # rank 2 limits
    # ranks, outcomes, model and (issue 24) vLLM's start-up checks: free memory, one request, footprint
    assert [check.passed for check in decision.checks] == [True] * 6


def test_a_later_boot_free_memory_is_its_lowest_per_rank():
    # F_boot takes the lowest a rank shows (lower F_boot only lowers B_adj): 48 GiB of 50 and 48
    boot = pd.DataFrame({"source": "c.log", "rank": [0, 0], "init_free_bytes": [50 * GiB, 48 * GiB]})
    assert boot_free_bytes(boot, [0]) == (48 * GiB,)


def test_the_pipeline_refuses_a_model_without_tp_for_the_cli_too(tmp_path, capsys):
    # a ledger CSV of two rooms that shows no tensor-parallel size: the model's bytes per rank are unknown
    rooms = tmp_path / "rooms.csv"
    rooms.write_text("rank,room_bytes,outcome\n0,13GiB,ok\n1,13GiB,ok\n")
    with pytest.raises(ValueError, match="--model needs --tp N: the tensor-parallel size the ranks run with"):
        decide([rooms], Policy(GiB), ModelLayout("llama-3.1-8b", {}))
    assert main(["budget", str(rooms), "--reserve", "1GiB", "--model", "llama-3.1-8b"]) == 2
    assert "error: --model needs --tp N" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--room gives 2 rank"):  # 2 rooms cannot fill TP 1 × PP 3
        decide(
            given_rooms([13 * GiB, 13 * GiB]), Policy(GiB), ModelLayout("llama-3.1-8b", {"tp": 1, "pp": 3})
        )
