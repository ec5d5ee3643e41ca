"""Issue 24: the approved value boots. vLLM's start-up refusals per release as checks, and the launch flags.

vLLM 0.33.0's start-up check, repeated here from its source (``v1/worker/utils.py:request_memory``)::

    requested_memory = math.ceil(init_snapshot.total_memory * cache_config.gpu_memory_utilization)
    if init_snapshot.free_memory < requested_memory:
        raise ValueError("Free memory on device ... is less than desired GPU memory utilization ...")
"""

import json
import math

import pytest

from kvplan import DATA_DIR
from kvplan.budget import largest_utilization
from kvplan.checks.launch import (
    REQUEST_CHECK,
    UTILIZATION_CHECK,
    check_footprint,
    check_full_request,
    largest_length,
    request_bytes,
)
from kvplan.cli import main
from kvplan.io.model_config import read_model_config
from kvplan.kvspec import kv_spec
from kvplan.plan import Policy, decide
from kvplan.units import GiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
H100 = "NVIDIA H100 80GB HBM3"
LLAMA_70B = read_model_config("llama-3.1-70b")


def vllm_0_33_request_memory(total: int, free: int, utilization: float) -> bool:
    """vLLM 0.33.0's check, as its source writes it: True when the rank starts."""
    requested_memory = math.ceil(total * utilization)
    return not free < requested_memory


# --- (a) the companion --gpu-memory-utilization -----------------------------------------------------


def test_budget_prints_both_flags_and_vllm_starts_on_every_rank(capsys):  # issue 24
    argv = [
        "budget",
        str(FOUR_RANK / "boot.log"),
        "--reserve",
        "0.9GiB",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "4",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "flag            --kv-cache-memory-bytes=12884377600" in out
    assert "launch flags    --kv-cache-memory-bytes=12884377600 --gpu-memory-utilization=0.61" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["flag"] == "--kv-cache-memory-bytes=12884377600"  # unchanged: the byte flag
    assert data["launch_flags"] == ["--kv-cache-memory-bytes=12884377600", "--gpu-memory-utilization=0.61"]
    assert data["gpu_memory_utilization"] == 0.61


def test_utilization_passes_on_the_restart_with_the_least_free_memory(capsys, tmp_path):  # issue 24
    # A restart whose rank 2 had 47.0 GiB free (co-tenants grew) but a smaller non-KV footprint (no CUDA
    # graphs, 0.70 GiB peak), so its room is 47.0 − 32.86 − 0.70 − 0.38 − 0 − 150 MiB = 12.9135 GiB
    # (13865853747 B, vLLM's own arithmetic) > the first boot's 12.9 GiB: the first boot sets the room and
    # F_ref (48.61 GiB), but vLLM checks free ≥ ceil(total × U) at every boot. On 47.0 GiB (read as 46.995)
    # of 79.19 (read as 79.195): U ≤ 46.995 / 79.195 = 0.5934 → 0.59; 0.61 (the first boot's) asks 48.31 GiB.
    lines = (FOUR_RANK / "boot.log").read_text().splitlines(keepends=True)
    rank2 = next(i for i, line in enumerate(lines) if "Free memory on device (48.61/79.19 GiB)" in line)
    lines[rank2] = (
        lines[rank2]
        .replace("(48.61/79.19 GiB)", "(47.0/79.19 GiB)")
        .replace("1.41 GiB for peak activation", "0.7 GiB for peak activation")
        .replace("0.92 GiB for CUDAGraph memory", "0.0 GiB for CUDAGraph memory")
        .replace("`--kv-cache-memory=13851269530` (12.9 GiB)", "`--kv-cache-memory=13865853747` (12.91 GiB)")
    )
    restart = tmp_path / "restart.log"
    restart.write_text("".join(lines))
    argv = ["budget", str(FOUR_RANK / "boot.log"), str(restart), "--reserve", "0.9GiB"]
    assert main([*argv, "--model", "llama-3.1-70b", "--tp", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["uniform_budget_bytes"] == 12884377600  # the first boot's room still limits
    assert data["gpu_memory_utilization"] == 0.59
    assert vllm_0_33_request_memory(round(79.19 * GiB), round(47.0 * GiB), 0.59)
    assert not vllm_0_33_request_memory(round(79.19 * GiB), round(47.0 * GiB), 0.61)


@pytest.mark.parametrize(
    "boot", ["four-rank", "shared-gpu", "drift", "v0.10.2", "v0.19-debug", "rank0-only", "v0-three-line"]
)
def test_every_sample_launch_passes_vllms_check_with_its_utilization(boot):  # issue 24
    # each rank's logged free memory (read on its safe side: less 0.005 GiB, the printed step's half)
    # less the guard, against ceil(total × U) with the total on its safe side too
    logs = [log for log in sorted((DATA_DIR / "boots" / boot).glob("*.log")) if log.name != "canary.log"]
    decision = decide(logs, Policy(GiB // 2, guard_bytes=GiB // 4, assume_uniform=True))
    ledger = decision.ledger
    utilization = decision.gpu_memory_utilization
    shown = (
        ledger.dropna(subset=["total_bytes", "init_free_bytes"]) if "total_bytes" in ledger else ledger[:0]
    )
    if shown.empty:  # no free memory shown: U is the profiled boot's, with a warning naming what to measure
        assert decision.launch_warning is not None and "nvidia-smi" in decision.launch_warning
        return
    margin = GiB // 200 + 1
    for rank, free in zip(decision.budget.ranks, decision.ref_free_bytes):
        total = int(ledger.loc[ledger["rank"] == rank, "total_bytes"].max())
        assert vllm_0_33_request_memory(total + margin, free - margin - GiB // 4, utilization)
    # and U is the largest such two-decimal value: one hundredth more fails some rank
    assert not all(
        vllm_0_33_request_memory(
            int(ledger.loc[ledger["rank"] == rank, "total_bytes"].max()) + margin,
            free - margin - GiB // 4,
            round(utilization + 0.01, 2),
        )
        for rank, free in zip(decision.budget.ranks, decision.ref_free_bytes)
    )


def test_the_founding_co_tenant_case_fails_at_vllms_default():  # issue 24
    # rank 2: 48.61 of 79.19 GiB free. vLLM's default 0.92 asks ceil(79.19 GiB × 0.92) = 72.85 GiB: refused;
    # U = 0.61: 79.195 GiB × 0.61 = 48.31 GiB ≤ 48.605 GiB, and 0.62 → 49.10 GiB > 48.605 GiB
    total, free = 85_029_615_043, 52_194_590_065  # the reader's bytes of 79.19 and 48.61 GiB
    assert not vllm_0_33_request_memory(total, free, 0.92)
    assert largest_utilization([total], [free], 0) == 0.61
    assert largest_utilization([total], [free], GiB) == 0.6  # (48.605 − 1) / 79.195 = 0.6011


def test_rooms_by_hand_get_the_byte_flag_and_a_warning(capsys):  # issue 24
    assert main(["budget", "--room", "13GiB", "--reserve", "1GiB"]) == 0
    out, err = capsys.readouterr()
    assert "launch flags    --kv-cache-memory-bytes=12884901888\n" in out
    assert "ceil(total × gpu_memory_utilization)" in err and "memory.free,memory.total" in err


# --- (b) one max_model_len request fits, per release family -----------------------------------------


def test_v0_one_request_is_block_size_times_blocks():  # issue 24
    # V0 worker.py raise_if_cache_size_invalid: max_model_len ≤ block_size × num_gpu_blocks.
    # Llama-3.1-70B TP4: 80 layers × 2 × 2 heads × 128 × 2 B × 16 = 1,310,720 B a block.
    spec = kv_spec(LLAMA_70B, tp=4, vllm_version="0.6.6")
    assert request_bytes(spec, 32768) == 2048 * 1_310_720  # ceil(32,768 / 16) blocks, no null block
    assert largest_length(spec, 1000 * 1_310_720, 32768) == 16_000  # 1,000 blocks × 16
    assert check_full_request(spec, 2048 * 1_310_720, 32768, None).passed is True
    assert check_full_request(spec, 2047 * 1_310_720, 32768, None).passed is False


def test_v1_up_to_0_28_plans_against_every_block():  # issue 24
    spec = kv_spec(LLAMA_70B, tp=4, vllm_version="0.20.0")
    assert check_full_request(spec, 2048 * 1_310_720, 32768, None).passed is True
    assert largest_length(spec, 2047 * 1_310_720, 32768) == 2047 * 16


def test_v1_from_0_29_holds_back_the_null_block():  # issue 24
    # 0.29+ check_enough_kv_cache_memory: available − one block (the block pool's null block)
    spec = kv_spec(LLAMA_70B, tp=4, vllm_version="0.33.0")
    check = check_full_request(spec, 2048 * 1_310_720, 32768, 15 * GiB)
    assert check.passed is False
    assert "the largest --max-model-len that fits is 32,752" in check.detail  # 2,047 blocks × 16
    # the reserve that would allow it: weakest room 15 GiB − 2,049 blocks × 1,310,720 B
    assert f"or a reserve ≤ 12.5 GiB ({15 * GiB - 2049 * 1_310_720:,} B)" in check.detail
    assert check_full_request(spec, 2049 * 1_310_720, 32768, None).passed is True


def test_hybrid_counts_every_groups_blocks():  # issue 24
    # Qwen3-Next TP2 on H100, 0.33 (tests/test_kvspec_v033.py): 465 blocks of 7,077,888 B per 262,144-token
    # request, + the null block
    spec = kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=2, gpu_name=H100, max_num_batched_tokens=8192)
    assert request_bytes(spec, 262_144) == 466 * 7_077_888
    assert check_full_request(spec, 466 * 7_077_888, 262_144, None).passed is True
    assert check_full_request(spec, 465 * 7_077_888, 262_144, None).passed is False


def test_auto_fit_is_the_length_vllm_would_fit():  # issue 24
    # tests/data/v0.33-llama-3.1-8b-tp1-auto-fit.log: 4.0 GiB → "reduced from 131072 to 32752"
    spec = kv_spec(read_model_config("llama-3.1-8b"), vllm_version="0.33.0")
    assert largest_length(spec, 4 * GiB, 131_072) == 32_752
    check = check_full_request(spec, 4 * GiB, 131_072, None)
    assert "--max-model-len -1 (auto-fit) would fit 32,752" in check.detail


def test_approval_below_one_request_fails_with_the_largest_length(capsys, tmp_path):  # issue 24
    # reserve 11 GiB: rank 2's room 13,851,269,530 B − 11 GiB = 2,040,109,466 B → 1,556 blocks of 1,310,720 B
    # (0.26: no null block) → 1,556 × 16 = 24,896 tokens < 32,768; a reserve ≤ room − 2,048 blocks allows it
    argv = ["approve", str(FOUR_RANK / "boot.log"), "--reserve", "11GiB", "--model", "llama-3.1-70b"]
    status = main([*argv, "--tp", "4", "--approver", "A", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 1
    assert f"FAIL  {REQUEST_CHECK}" in out
    assert "the largest --max-model-len that fits is 24,896" in out
    assert f"or a reserve ≤ 10.4 GiB ({13_851_269_530 - 2048 * 1_310_720:,} B)" in out
    assert err.startswith("error: not approved: one max_model_len request fits")
    assert not any(tmp_path.iterdir())  # nothing written


def test_approve_json_carries_the_launch(capsys, tmp_path):  # issue 24
    argv = ["approve", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--approver", "A"]
    assert main([*argv, "--out", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"]["flag"] == data["decision"]["launch_flags"][0]
    assert data["decision"]["gpu_memory_utilization"] == 0.61
    assert UTILIZATION_CHECK in {check["name"] for check in data["checks"]}


def test_summary_says_how_to_launch_and_why_room_is_below_available_kv(capsys, tmp_path):  # issue 24
    from kvplan.evidence import launch_lines

    argv = [
        "approve",
        str(FOUR_RANK / "boot.log"),
        "--reserve",
        "0.9GiB",
        "--approver",
        "A",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    [bundle] = tmp_path.iterdir()
    summary = (bundle / "SUMMARY.md").read_text()
    assert (
        "- **Launch with:** `--kv-cache-memory-bytes=12884901888 --gpu-memory-utilization=0.61`: vLLM refuses"
    ) in summary
    # a 0.11 rank whose room is the available KV memory less the graphs captured after it (2.31 GiB − 1.92 GiB)
    row = {
        "rank": 1,
        "room_source": "available_kv",
        "room_bytes": 418_759_311,
        "available_kv_bytes": 2_480_343_613,
    }
    [_, why] = launch_lines({"decision": {"launch_flags": ["--kv-cache-memory-bytes=1"]}, "ledger": [row]})
    assert why == (
        "- **Room below available KV:** rank 1: room 399.36 MiB < available KV 2.31 GiB: vLLM sized the KV cache "
        "before capturing CUDA graphs, which take 1.92 GiB of it after."
    )


def test_a_footprint_refusal_says_what_to_run():  # issue 24 (review)
    # used 10 + 92 = 102 B > limit 100 − 5 = 95 B by 7 B: a reserve 7 B larger lowers the value by ≥ 7 B;
    # dropping the 5 B guard alone is not enough
    assert check_footprint([0], 10, [100], [92], 5).detail.endswith(
        "next: approve again with a reserve 7 B (7 B) larger"
    )
    # 10 + 88 = 98 B > 95 B by 3 B ≤ the 5 B guard: --guard 0 also fits (98 ≤ 100)
    assert check_footprint([0], 10, [100], [88], 5).detail.endswith(
        "next: approve again with --guard 0 (a canary takes its guard from kvplan gate --guard) or a reserve "
        "3 B (3 B) larger"
    )
