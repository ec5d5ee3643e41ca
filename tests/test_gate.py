"""Gate checks on hand-built ledgers with known answers (scenario C's numbers) and on the sample boots."""

import pandas as pd
import pytest

from kvplan.gate import (
    BUDGET_CHECK,
    Approved,
    Check,
    check_budget_fits,
    check_compatibility_key,
    check_outcomes,
    check_ranks_present,
    check_reserve_after_warmup,
    check_tokens,
    gate_checks,
    gate_verdict,
)
from kvplan.units import parse_size
from tests.conftest import GiB, MiB

KEY = {"vllm_version": "0.26.0", "model": "m", "tensor_parallel_size": 4, "block_size": 16, "gpu_name": None}
BLOCK_BYTES = 1_310_720  # 16 tokens × 81,920 B per token per rank (Llama-3.1-70B at TP=4)
APPROVED_BYTES = 30 * GiB // BLOCK_BYTES * BLOCK_BYTES  # 30 GiB rounded down: 24,576 blocks exactly


def approved(**changes) -> Approved:
    """Scenario C at approval: room 31 GiB, reserve 1 GiB → safe 30 GiB, 42 GiB free at start."""
    fields = dict(budget_bytes=APPROVED_BYTES, ranks=(0, 1, 2, 3), safe_bytes=(30 * GiB,) * 4,
                  ref_free_bytes=(42 * GiB,) * 4, reserve_bytes=GiB, guard_bytes=0, block_bytes=BLOCK_BYTES,
                  compatibility_key=KEY, tokens_required=None)
    fields.update(changes)
    return Approved(**fields)


def boot(free=("42GiB",) * 4, **columns) -> pd.DataFrame:
    """One boot of four ranks: startup free memory as logged, everything else from ``columns``."""
    frame = pd.DataFrame({"source": "canary.log", "boot": 0, "rank": [0, 1, 2, 3],
                          "init_free_bytes": [parse_size(f) for f in free], "outcome": "ok", "error": None})
    for name, values in columns.items():
        frame[name] = values
    return frame


CANARY_FREE = ("41.8GiB", "42.1GiB", "40.75GiB", "41.9GiB")


def test_verdict_folds_fail_over_unknown_over_pass():
    assert gate_verdict([Check("a", True, ""), Check("b", True, "")]) is True
    assert gate_verdict([Check("a", True, ""), Check("b", None, "")]) is None
    assert gate_verdict([Check("a", None, ""), Check("b", False, "")]) is False
    assert gate_verdict([]) is None


class TestCompatibilityKey:
    def test_same_key_passes(self):
        assert check_compatibility_key(KEY, dict(KEY)).passed is True

    def test_each_changed_field_is_listed(self):
        changed = {**KEY, "vllm_version": "0.27.0", "block_size": 32}
        check = check_compatibility_key(KEY, changed)
        assert check.passed is False
        assert check.detail == "block_size: approved 16, boot 32; vllm_version: approved 0.26.0, boot 0.27.0"

    def test_field_known_on_one_side_only_is_named_not_failed(self):
        check = check_compatibility_key(KEY, {**KEY, "gpu_name": "NVIDIA H100 80GB HBM3"})
        assert check.passed is True
        assert "not shown on one side: gpu_name" in check.detail


class TestRanksPresent:
    def test_all_ranks(self):
        expected = Check("every rank present", True, "ranks 0-3 of 4")
        assert check_ranks_present([0, 1, 2, 3], boot()) == expected

    def test_missing_rank_fails(self):
        check = check_ranks_present([0, 1, 2, 3], boot().iloc[[0, 1, 3]])
        assert check.passed is False
        assert check.detail.startswith("missing rank 2")


class TestOutcomes:
    def test_all_ok(self):
        assert check_outcomes(boot()).passed is True

    def test_oom_fails_with_its_text(self):
        frame = boot(outcome=["ok", "ok", "oom", "ok"],
                     error=[None, None, "CUDA out of memory. Tried to allocate 1.25 GiB", None])
        check = check_outcomes(frame)
        assert check.passed is False
        assert check.detail == "canary.log rank 2: oom: CUDA out of memory. Tried to allocate 1.25 GiB"

    def test_incomplete_boot_cannot_be_judged(self):
        assert check_outcomes(boot(outcome=["ok", "ok", "incomplete", "ok"])).passed is None


class TestBudgetFits:
    def test_the_approved_boot_itself_passes_with_the_default_guard(self):
        # safe_ref − max(0, 42 − 42) − 0 = 30 GiB ≥ 30 GiB rounded down to blocks
        check = check_budget_fits(approved(), boot(), guard_bytes=0)
        assert check.passed is True
        assert "rank 2: 30 GiB − max(0, 42 GiB − 42 GiB) − 0 B = 30 GiB ≥ 30 GiB" in check.detail

    def test_canary_with_guard_fails_and_names_the_lower_value(self):
        # adjusted: 30 − 0.2 − 0.5 = 29.3; 30 − 0 − 0.5 = 29.5; 30 − 1.25 − 0.5 = 28.25; 30 − 0.1 − 0.5 = 29.4
        check = check_budget_fits(approved(), boot(CANARY_FREE), guard_bytes=GiB // 2)
        assert check.passed is False
        assert "rank 2: 30 GiB − max(0, 42 GiB − 40.75 GiB) − 512 MiB = 28.25 GiB < 30 GiB" in check.detail
        # 28.25 GiB = 23,142.4 blocks of 1.25 MiB → 23,142 blocks × 1,310,720 B = 30,332,682,240 B
        assert "--kv-cache-memory-bytes=30332682240 (limiting rank 2)" in check.detail
        assert "re-profile to raise" in check.detail  # rank 1 starts with 0.1 GiB more than at approval

    def test_more_free_memory_never_raises(self):
        # every rank gains 1 GiB: the adjusted budget stays safe_ref = 30 GiB
        check = check_budget_fits(approved(), boot(("43GiB",) * 4), guard_bytes=0)
        assert check.passed is True
        assert "re-profile to raise" in check.detail

    def test_one_rank_losing_memory_fails_even_without_guard(self):
        check = check_budget_fits(approved(), boot(("42GiB", "42GiB", "41.5GiB", "42GiB")), guard_bytes=0)
        assert check.passed is False  # rank 2: 30 − 0.5 = 29.5 GiB < 30 GiB

    def test_free_memory_not_shown_cannot_be_judged(self):
        check = check_budget_fits(approved(ref_free_bytes=(42 * GiB, None, 42 * GiB, 42 * GiB)), boot(), 0)
        assert check.passed is None
        assert "rank 1" in check.detail


class TestReserveAfterWarmup:
    def test_room_minus_manual_value_keeps_the_reserve(self):
        # a manual boot at the approved value on ranks with 31 GiB room leaves 1 GiB ≥ 1 GiB reserve
        frame = boot(room_bytes=[31 * GiB] * 4, manual_kv_bytes=[APPROVED_BYTES] * 4)
        assert check_reserve_after_warmup(approved(), frame).passed is True

    def test_shrunken_room_fails(self):
        # rank 3's room fell to 30.5 GiB: 30.5 − 30 = 0.5 GiB < 1 GiB reserve
        frame = boot(room_bytes=[31 * GiB, 31 * GiB, 31 * GiB, 30 * GiB + 512 * MiB])
        check = check_reserve_after_warmup(approved(), frame)
        assert check.passed is False
        assert "rank 3: room 30.5 GiB − KV 30 GiB = 512 MiB < reserve 1 GiB" in check.detail

    def test_snapshot_after_warmup_wins(self):
        frame = boot(room_bytes=[31 * GiB] * 4)
        check = check_reserve_after_warmup(approved(), frame, {0: 2 * GiB, 1: 2 * GiB, 2: 900 * MiB, 3: GiB})
        assert check.passed is False
        assert "rank 2: free after warm-up (snapshot) = 900 MiB < reserve 1 GiB" in check.detail

    def test_not_shown_is_nothing_to_check(self):
        check = check_reserve_after_warmup(approved(), boot())
        assert check.passed is True
        assert check.detail.startswith("not shown by this boot")


class TestTokens:
    def test_no_plan_passes_with_a_note(self):
        assert check_tokens(approved(), boot()).detail.startswith("no admission plan recorded")

    @pytest.mark.parametrize(("logged", "passed"), [(49_152, True), (49_136, False)])
    def test_logged_tokens_against_the_plan(self, logged, passed):
        # plan: 6 sequences × 8,192 tokens = 6 × 512 blocks × 16 = 49,152 tokens
        frame = boot(kv_cache_tokens=[logged, None, None, None])
        check = check_tokens(approved(tokens_required=49_152), frame)
        assert check.passed is passed

    def test_tokens_not_logged_cannot_be_judged(self):
        assert check_tokens(approved(tokens_required=49_152), boot()).passed is None


def test_gate_checks_order_and_guard_default():
    checks = gate_checks(approved(guard_bytes=GiB // 2), boot(), KEY)
    assert [c.name for c in checks][3] == BUDGET_CHECK
    assert checks[3].passed is False  # the recorded 0.5 GiB guard applies: 30 − 0.5 < 30
    assert gate_checks(approved(guard_bytes=GiB // 2), boot(), KEY, guard_bytes=0)[3].passed is True
    with pytest.raises(ValueError, match="guard"):
        gate_checks(approved(), boot(), KEY, guard_bytes=-1)
