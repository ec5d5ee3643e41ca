"""Gate checks on hand-built ledgers with known answers (scenario C's numbers) and on the sample boots."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kvplan import DATA_DIR, evidence
from kvplan.checks import Check, format_checks, gate_verdict, verdict_word
from kvplan.checks.canary import VALUE_CHECK, check_canary_utilization
from kvplan.checks.gate import (
    BUDGET_CHECK,
    RESERVE_CHECK,
    TOKENS_CHECK,
    Approved,
    check_budget_fits,
    check_reserve_after_warmup,
    check_tokens,
    gate_checks,
)
from kvplan.checks.key import (
    KEY_CHECK,
    OUTCOME_CHECK,
    RANKS_CHECK,
    check_compatibility_key,
    check_outcomes,
    check_ranks_present,
    defaulted_key_fields,
)
from kvplan.checks.launch import UTILIZATION_CHECK
from kvplan.cli import main
from kvplan.io.model_config import resolve_model_config
from kvplan.room import read_vllm_log_rooms
from kvplan.units import parse_size
from tests.conftest import GiB, MiB

KEY = {"vllm_version": "0.26.0", "model": "m", "tensor_parallel_size": 4, "block_size": 16, "gpu_name": None}
BLOCK_BYTES = 1_310_720  # 16 tokens × 81,920 B per token per rank (Llama-3.1-70B at TP=4)
APPROVED_BYTES = 30 * GiB // BLOCK_BYTES * BLOCK_BYTES  # 30 GiB rounded down: 24,576 blocks exactly


def approved(**changes) -> Approved:
    """Scenario C at approval: room 31 GiB, reserve 1 GiB → safe 30 GiB, 42 GiB free at start."""
    fields = dict(
        budget_bytes=APPROVED_BYTES,
        ranks=(0, 1, 2, 3),
        safe_bytes=(30 * GiB,) * 4,
        ref_free_bytes=(42 * GiB,) * 4,
        reserve_bytes=GiB,
        guard_bytes=0,
        block_bytes=BLOCK_BYTES,
        compatibility_key=KEY,
        tokens_required=None,
    )
    fields.update(changes)
    return Approved(**fields)


def boot(free=("42GiB",) * 4, **columns) -> pd.DataFrame:
    """One boot of four ranks: startup free memory as logged, everything else from ``columns``."""
    frame = pd.DataFrame(
        {
            "source": "canary.log",
            "boot": 0,
            "rank": [0, 1, 2, 3],
            "init_free_bytes": [parse_size(f) for f in free],
            "outcome": "ok",
            "error": None,
        }
    )
    for name, values in columns.items():
        frame[name] = values
    return frame


CANARY_FREE = ("41.8GiB", "42.1GiB", "40.75GiB", "41.9GiB")


def test_verdict_folds_fail_over_unknown_over_pass():
    assert gate_verdict([Check("a", True, ""), Check("b", True, "")]) is True
    assert gate_verdict([Check("a", True, ""), Check("b", None, "")]) is None
    assert gate_verdict([Check("a", None, ""), Check("b", False, "")]) is False
    assert gate_verdict([]) is None


def test_one_word_per_verdict_for_checks_and_gates():
    assert [verdict_word(v) for v in (True, False, None)] == ["PASS", "FAIL", "CANNOT JUDGE"]
    # the overall word of a gate is the word of its folded verdict
    assert verdict_word(gate_verdict([Check("a", True, ""), Check("b", None, "")])) == "CANNOT JUDGE"


def test_format_checks_lists_each_check_then_the_verdict():
    checks = [
        Check(RANKS_CHECK, True, "ranks 0-3 of 4"),
        Check(BUDGET_CHECK, False, "rank 2: 28.25 GiB < 30 GiB; a lower value fits: 28.25 GiB"),
        Check(TOKENS_CHECK, None, "the boot did not log its GPU KV cache size"),
    ]
    assert format_checks(checks).splitlines() == [
        "PASS  every rank present",
        "      ranks 0-3 of 4",
        "FAIL  approved value fits every rank",
        "      rank 2: 28.25 GiB < 30 GiB",
        "      a lower value fits: 28.25 GiB",
        "CANNOT JUDGE  tokens cover the admission plan",
        "      the boot did not log its GPU KV cache size",
        # a failure outranks a check that cannot be judged; every verdict is counted (issue 24)
        "gate: FAIL (1 PASS, 1 FAIL, 1 CANNOT JUDGE, 0 N/A)",
    ]
    assert format_checks(checks[:1]).splitlines()[-1] == "gate: PASS (1 PASS, 0 FAIL, 0 CANNOT JUDGE, 0 N/A)"
    assert format_checks([checks[0], checks[2]]).splitlines()[-1] == (
        "gate: CANNOT JUDGE (1 PASS, 0 FAIL, 1 CANNOT JUDGE, 0 N/A)"
    )


class TestCompatibilityKey:
    def test_same_key_passes(self):
        assert check_compatibility_key(KEY, dict(KEY)).passed is True

    def test_each_changed_field_is_listed(self):
        changed = {**KEY, "vllm_version": "0.27.0", "block_size": 32}
        check = check_compatibility_key(KEY, changed)
        assert check.passed is False
        assert check.detail == (
            "block_size: approved 16, boot 32; vllm_version: approved 0.26.0, boot 0.27.0; "
            "not shown on either side (not compared): gpu_name"
        )

    def test_fields_unknown_on_both_sides_are_not_counted_as_unchanged(self):
        # KEY has 5 fields and shows the model, so quantization and revision read as vLLM's default
        # None on both sides: 4 + 2 = 6 compared and equal; gpu_name is None on both, not compared.
        check = check_compatibility_key(KEY, dict(KEY))
        assert check.detail == "6 fields unchanged; not shown on either side (not compared): gpu_name"

    def test_quantization_added_on_the_boot_fails(self):
        # the approved logs show the model's config without quantization: vLLM's default, None
        check = check_compatibility_key(KEY, {**KEY, "quantization": "fp8"})
        assert check.passed is False
        assert check.detail.startswith("quantization: approved None, boot fp8")

    def test_a_manual_value_boot_is_not_compared_on_gpu_memory_utilization(self):
        # vLLM sizes a manual boot's KV cache from --kv-cache-memory-bytes; its hint says to drop
        # --gpu-memory-utilization, so 0.9 approved against the default 0.92 is no difference there.
        approved_key = {**KEY, "gpu_memory_utilization": 0.9}
        boot_key = {**KEY, "gpu_memory_utilization": 0.92}
        assert check_compatibility_key(approved_key, boot_key).passed is False
        check = check_compatibility_key(approved_key, boot_key, manual_boot=True)
        assert check.passed is True
        assert "not used by a manual-value boot: gpu_memory_utilization" in check.detail

    def test_field_known_on_one_side_only_is_named_not_failed(self):
        check = check_compatibility_key(KEY, {**KEY, "gpu_name": "NVIDIA H100 80GB HBM3"})
        assert check.passed is True
        assert "not recorded at approval (not compared): gpu_name" in check.detail

    def test_field_recorded_at_approval_but_not_shown_by_the_boot_cannot_be_judged(self):
        # approved with an nvidia-smi snapshot, gated without one: the GPU type is unknown, not "unchanged"
        check = check_compatibility_key({**KEY, "gpu_name": "NVIDIA H100 80GB HBM3"}, KEY)
        assert check.passed is None
        assert check.detail.startswith("the approval recorded gpu_name, which this boot does not show")


class TestDefaultsAreNotShown:
    """Issue 11 item 13: a value the reader filled with vLLM's default is not evidence of the boot's key."""

    def test_a_boots_default_against_a_shown_approved_value_cannot_be_judged(self):
        # the approval's logs showed block_size 16; the canary's do not (the reader assumed 16): not compared
        check = check_compatibility_key(KEY, dict(KEY), boot_defaults={"block_size"})
        assert check.passed is None
        assert check.detail.startswith("the approval recorded block_size, which this boot does not show")
        assert "the reader assumed vLLM's default, which is not evidence" in check.detail

    def test_an_approved_default_against_a_shown_boot_value_is_not_recorded_at_approval(self):
        check = check_compatibility_key(KEY, dict(KEY), approved_defaults={"block_size"})
        assert check.passed is True
        assert "not recorded at approval (not compared): block_size" in check.detail
        assert check.detail.startswith("5 fields unchanged")  # 6 of TestCompatibilityKey less block_size

    def test_defaults_on_both_sides_are_not_compared(self):
        # issue 25: a field neither side shows (the reader's default on both) is never one of the unchanged
        both = check_compatibility_key(
            KEY, dict(KEY), approved_defaults={"block_size"}, boot_defaults={"block_size"}
        )
        shown = check_compatibility_key(KEY, dict(KEY))
        unchanged = int(shown.detail.split()[0])
        assert both.passed is True and both.detail.startswith(f"{unchanged - 1} fields unchanged; ")
        assert "block_size" in both.detail.split("(not compared): ")[1].split(", ")

    def test_a_default_that_differs_from_a_shown_value_is_still_a_difference(self):
        check = check_compatibility_key(KEY, {**KEY, "block_size": 64}, boot_defaults={"block_size"})
        assert check.passed is False and check.detail.startswith("block_size: approved 16, boot 64")

    def test_the_readers_defaults_are_found_in_its_provenance(self):
        # data/boots/four-rank/boot.log shows no block size: the reader fills vLLM 0.26.0's default, 16
        _, metadata = read_vllm_log_rooms(FOUR_RANK / "boot.log")
        assert "block_size" in defaulted_key_fields(metadata["provenance"])


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
        frame = boot(
            outcome=["ok", "ok", "oom", "ok"],
            error=[None, None, "CUDA out of memory. Tried to allocate 1.25 GiB", None],
        )
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
        check = check_budget_fits(
            approved(), boot(CANARY_FREE, total_bytes=[80 * GiB] * 4), guard_bytes=GiB // 2
        )
        assert check.passed is False
        assert "rank 2: 30 GiB − max(0, 42 GiB − 40.75 GiB) − 512 MiB = 28.25 GiB < 30 GiB" in check.detail
        # 28.25 GiB = 23,142.4 blocks of 1.25 MiB → 23,142 blocks × 1,310,720 B = 30,332,682,240 B; its companion
        # U (issue 24): rank 2's 40.75 − 0.5 GiB less the 5.12 MiB margin holds ceil(80 GiB × 0.50), not × 0.51
        assert (
            "--kv-cache-memory-bytes=30332682240 --gpu-memory-utilization=0.50 (limiting rank 2)"
            in check.detail
        )
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
        assert check.detail == "startup free memory not shown for rank 1 at approval"


class TestBudgetFitsOnEveryEstimate:
    """Issue 11 items 7, 8 and 12: the budget check takes the lowest estimate and fails, never errs."""

    def test_the_boots_own_room_below_approved_plus_reserve_fails(self):
        # free memory unchanged (drift 0: 30 GiB ≥ 30 GiB), but rank 1's own room fell to 30.5 GiB (e.g. a
        # larger max_num_batched_tokens, not in the key): 30.5 − 1 GiB reserve = 29.5 GiB < 30 GiB
        frame = boot(
            room_bytes=[31 * GiB, 30 * GiB + 512 * MiB, 31 * GiB, 31 * GiB], total_bytes=[80 * GiB] * 4
        )
        check = check_budget_fits(approved(), frame, guard_bytes=0)
        assert check.passed is False
        assert (
            "rank 1: the boot's own room 30.5 GiB − reserve 1 GiB − 0 B = 29.5 GiB < 30 GiB" in check.detail
        )
        # 29.5 GiB / 1.25 MiB = 24,166.4 blocks → 24,166 × 1,310,720 B = 31,674,859,520 B; U: 42 GiB less the
        # 5.12 MiB margin holds ceil(80 GiB × 0.52) = 41.6 GiB, not × 0.53 = 42.4 GiB
        assert check.detail.endswith(
            "--kv-cache-memory-bytes=31674859520 --gpu-memory-utilization=0.52 (limiting rank 1)"
        )

    def test_the_room_alone_judges_a_rank_without_free_memory(self):
        # no startup free memory at approval for rank 1, but the boot shows its room: 31 − 1 = 30 GiB ≥ 30 GiB
        frame = boot(room_bytes=[31 * GiB] * 4)
        check = check_budget_fits(approved(ref_free_bytes=(42 * GiB, None, 42 * GiB, 42 * GiB)), frame, 0)
        assert check.passed is True

    def test_a_manual_value_above_the_approved_one_fails(self):
        # the canary ran 32 GiB by hand on every rank, above the approved 30 GiB: its pass would say nothing
        frame = boot(room_bytes=[40 * GiB] * 4, manual_kv_bytes=[32 * GiB] * 4)
        check = check_budget_fits(approved(), frame, guard_bytes=0)
        assert check.passed is False
        assert (
            "rank 0 ran --kv-cache-memory-bytes=34359738368, above the approved 30 GiB: not a canary of "
            "the approved value"
        ) in check.detail
        # at or below the approved value is a canary of it
        at_value = boot(room_bytes=[40 * GiB] * 4, manual_kv_bytes=[APPROVED_BYTES] * 4)
        assert check_budget_fits(approved(), at_value, guard_bytes=0).passed is True

    def test_a_rank_left_with_no_room_fails_instead_of_refusing(self):
        # rank 2 lost 31 GiB of free memory: 30 − 31 = −1 GiB; a FAIL with the arithmetic, not bad input
        check = check_budget_fits(approved(), boot(("42GiB", "42GiB", "11GiB", "42GiB")), guard_bytes=0)
        assert check.passed is False
        assert "rank 2: 30 GiB − max(0, 42 GiB − 11 GiB) − 0 B = -1 GiB < 30 GiB" in check.detail
        assert check.detail.endswith("no value fits rank 2: re-profile this deployment")


class TestReserveAfterWarmup:
    def test_room_minus_manual_value_keeps_the_reserve(self):
        # a manual boot at the approved value on ranks with 31 GiB room leaves 1 GiB ≥ 1 GiB reserve
        frame = boot(room_bytes=[31 * GiB] * 4, manual_kv_bytes=[APPROVED_BYTES] * 4)
        assert check_reserve_after_warmup(approved(), frame).passed is True

    def test_shrunken_room_fails(self):
        # a manual boot at the approved value; rank 3's room fell to 30.5 GiB: 30.5 − 30 = 0.5 GiB < 1 GiB
        frame = boot(
            room_bytes=[31 * GiB, 31 * GiB, 31 * GiB, 30 * GiB + 512 * MiB],
            manual_kv_bytes=[APPROVED_BYTES] * 4,
        )
        check = check_reserve_after_warmup(approved(), frame)
        assert check.passed is False
        assert "rank 3: room 30.5 GiB − KV 30 GiB = 512 MiB < reserve 1 GiB" in check.detail

    def test_snapshot_after_warmup_wins(self):
        frame = boot(room_bytes=[31 * GiB] * 4)
        check = check_reserve_after_warmup(approved(), frame, {0: 2 * GiB, 1: 2 * GiB, 2: 900 * MiB, 3: GiB})
        assert check.passed is False
        assert "rank 2: free after warm-up (snapshot) = 900 MiB < reserve 1 GiB" in check.detail

    def test_a_rank_the_snapshot_does_not_show_cannot_be_judged(self):  # issue 24
        # rank 2's memory.free read [N/A]: the snapshot shows ranks 0, 1, 3 with 2 GiB ≥ 1 GiB reserve each,
        # but rank 2 (here the limiting rank) is unobserved, so the check must not pass
        frame = boot(room_bytes=[31 * GiB] * 4)
        check = check_reserve_after_warmup(approved(), frame, {0: 2 * GiB, 1: 2 * GiB, 3: 2 * GiB})
        assert check.passed is None
        assert check.applicable
        assert "rank 2: no free memory after warm-up shown: cannot judge" in check.detail
        assert gate_verdict([Check(KEY_CHECK, True, ""), check]) is None
        # another rank below the reserve still fails: 900 MiB < 1 GiB on rank 3
        failing = check_reserve_after_warmup(approved(), frame, {0: 2 * GiB, 1: 2 * GiB, 3: 900 * MiB})
        assert failing.passed is False

    @pytest.mark.parametrize("columns", [{}, {"room_bytes": [31 * GiB] * 4}])
    def test_no_observation_is_not_applicable(self, columns):
        # no room, or the room of a profiled boot (its KV cache was not the approved value: room −
        # approved would be arithmetic, not an observation after warm-up): nothing shows the reserve
        check = check_reserve_after_warmup(approved(), boot(**columns))
        assert (check.passed, check.applicable) == (None, False)
        assert check.detail.startswith("not applicable: no observation after warm-up")
        # it neither passes nor blocks the gate: the other checks decide
        assert gate_verdict([Check(KEY_CHECK, True, ""), check]) is True
        assert gate_verdict([Check(KEY_CHECK, False, ""), check]) is False


class TestTokens:
    def test_no_plan_is_not_applicable(self):
        check = check_tokens(approved(), boot(kv_cache_tokens=[49_152] * 4))
        assert (check.passed, check.applicable) == (None, False)
        assert check.detail.startswith("not applicable: no admission plan recorded")

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


# --- on the sample boots, through `kvplan gate` ---------------------------------------------------

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
DRIFT = DATA_DIR / "boots" / "drift"
LOAD = DATA_DIR / "load"
PROFILED_RUN = sorted((LOAD / "profiled-canary").iterdir())
STEADY_RUN = [
    LOAD / "manual-canary" / "server.log",
    *sorted((LOAD / "manual-canary" / "metrics").glob("*.prom")),
]
OVERLOAD_RUN = sorted((LOAD / "manual-canary-overload").iterdir())


def _approve(out: Path, log: Path, reserve: str, model: str, target: int, seq_len: int) -> Path:
    layout = evidence.ModelLayout(resolve_model_config(model), {"tp": 4})
    return evidence.approve(
        [log],
        out,
        evidence.Policy(parse_size(reserve)),
        "QA",
        layout=layout,
        plan=evidence.AdmissionPlan(target, seq_len),
    )


@pytest.fixture(scope="module")
def four_rank_bundle(tmp_path_factory) -> Path:
    """Scenario A: 12 GiB in whole blocks (9,830 × 1.25 MiB), plan 4 × 32,768 tokens = 131,072 tokens."""
    return _approve(tmp_path_factory.mktemp("a"), FOUR_RANK / "boot.log", "0.9GiB", "llama-3.1-70b", 4, 32768)


@pytest.fixture(scope="module")
def drift_bundle(tmp_path_factory) -> Path:
    """Scenario C: room 31 GiB − 1 GiB = 30 GiB on every rank, 42 GiB free at start.

    Qwen3-14B at TP=4: 40 layers × 2 × 2 KV heads × 128 × 2 B = 40,960 B per token; 30 GiB = 786,432 tokens
    exactly, so the plan 24 × 32,768 = 786,432 tokens fits.
    """
    return _approve(tmp_path_factory.mktemp("c"), DRIFT / "reference.log", "1GiB", "qwen3-14b", 24, 32768)


def gate(capsys, bundle: Path, *argv) -> tuple[int, dict[str, Check]]:
    status = main(["gate", "--approved", str(bundle), *map(str, argv), "--json"])
    result = json.loads(capsys.readouterr().out)
    checks = {c["name"]: Check(**c) for c in result["checks"]}
    assert result["passed"] is (status == 0)
    return status, checks


def edited(tmp_path: Path, source: Path, edit) -> Path:
    path = tmp_path / source.name
    path.write_text(edit(source.read_text()))
    return path


class TestGateOnSampleBoots:
    def test_the_approved_boot_passes_every_check(self, capsys, four_rank_bundle):
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log")
        assert status == 0
        assert [name for name, check in checks.items() if check.passed] == [
            KEY_CHECK,
            RANKS_CHECK,
            OUTCOME_CHECK,
            BUDGET_CHECK,
            TOKENS_CHECK,
            UTILIZATION_CHECK,  # issue 24: its 0.6 passes vLLM's start-up check on its own free memory
        ]
        # a profiled boot without an nvidia-smi snapshot shows nothing after warm-up: not applicable
        assert (checks[RESERVE_CHECK].passed, checks[RESERVE_CHECK].applicable) == (None, False)
        assert checks[TOKENS_CHECK].detail == "GPU KV cache size 155,856 tokens ≥ plan 131,072 tokens"

    def test_changed_vllm_version_fails_the_key(self, capsys, four_rank_bundle, tmp_path):
        log = edited(tmp_path, FOUR_RANK / "boot.log", lambda text: text.replace("0.26.0", "0.27.0"))
        status, checks = gate(capsys, four_rank_bundle, log)
        # issue 24: another key is no evidence of the approved launch: cannot judge (exit 2), no value offered
        assert status == 2
        # the sample boot shows no GPU name or driver (no nvidia-smi snapshot), and says so
        assert checks[KEY_CHECK].detail == "cannot judge: " + (
            "vllm_version: approved 0.26.0, boot 0.27.0; not shown on either side (not compared): "
            "block_size, driver_version, gpu_name"
        )

    def test_a_missing_rank_fails(self, capsys, four_rank_bundle, tmp_path):
        # every line of rank 3's worker process (pid 48605) removed
        log = edited(
            tmp_path,
            FOUR_RANK / "boot.log",
            lambda text: "".join(line for line in text.splitlines(True) if "pid=48605" not in line),
        )
        status, checks = gate(capsys, four_rank_bundle, log)
        # issue 24: a canary missing a rank is no evidence of the approved launch: cannot judge (exit 2)
        assert status == 2
        assert checks[RANKS_CHECK].detail == (
            "cannot judge: missing rank 3 (the boot shows rank 0, 1, 2 of approved 0-3)"
        )
        assert checks[BUDGET_CHECK].passed is None  # rank 3's free memory is not shown

    def test_an_oom_boot_fails(self, capsys, four_rank_bundle):
        status, checks = gate(capsys, four_rank_bundle, DATA_DIR / "boots" / "oom" / "boot.log")
        assert status == 1
        assert checks[OUTCOME_CHECK].passed is False
        assert ": oom: " in checks[OUTCOME_CHECK].detail

    def test_an_incomplete_boot_cannot_be_judged(self, capsys, four_rank_bundle, tmp_path):
        # the first 50 lines: the workers have started, no KV cache is sized yet
        log = edited(tmp_path, FOUR_RANK / "boot.log", lambda text: "".join(text.splitlines(True)[:50]))
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 2
        assert checks[OUTCOME_CHECK].passed is None

    def test_nvidia_smi_snapshot_after_warmup(self, capsys, four_rank_bundle, tmp_path):
        snapshots = [FOUR_RANK / "nvidia-smi-gpu.csv", FOUR_RANK / "nvidia-smi-apps.csv"]
        status, checks = gate(
            capsys,
            four_rank_bundle,
            FOUR_RANK / "boot.log",
            *(arg for csv in snapshots for arg in ("--nvidia-smi", csv)),
        )
        assert status == 0
        # GPU 2 (rank 2's pid in the apps snapshot): 2,314 MiB free = 2.26 GiB ≥ 0.9 GiB
        assert "rank 2: free after warm-up (snapshot) = 2.26 GiB ≥ reserve 921.6 MiB" in (
            checks[RESERVE_CHECK].detail
        )
        # the same snapshot with 512 MiB left on GPU 2: the reserve is gone
        low = edited(
            tmp_path, snapshots[0], lambda text: text.replace(" 78775 MiB, 2314 MiB", " 80577 MiB, 512 MiB")
        )
        status, checks = gate(
            capsys,
            four_rank_bundle,
            FOUR_RANK / "boot.log",
            "--nvidia-smi",
            low,
            "--nvidia-smi",
            snapshots[1],
        )
        assert status == 1
        reserve = checks[RESERVE_CHECK].detail
        assert "rank 2: free after warm-up (snapshot) = 512 MiB < reserve 921.6 MiB" in reserve

    def test_fewer_tokens_than_the_plan_fails(self, capsys, four_rank_bundle, tmp_path):
        # what a canary that allocated 7,680 blocks (7,680 × 16 = 122,880 tokens < 131,072) would log
        log = edited(
            tmp_path,
            FOUR_RANK / "boot.log",
            lambda text: text.replace("cache size: 155,856 tokens", "cache size: 122,880 tokens"),
        )
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 1
        assert checks[TOKENS_CHECK].detail == "GPU KV cache size 122,880 tokens < plan 131,072 tokens"

    def test_load_evidence(self, capsys, four_rank_bundle):
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", *PROFILED_RUN)
        assert status == 0
        assert {name: check.passed for name, check in checks.items()} == {
            KEY_CHECK: True,
            RANKS_CHECK: True,
            OUTCOME_CHECK: True,
            BUDGET_CHECK: True,
            RESERVE_CHECK: None,
            TOKENS_CHECK: True,
            UTILIZATION_CHECK: True,  # issue 24
            VALUE_CHECK: None,  # issue 24: not applicable, the canary profiled
            "no OOM under load": True,
            "preemptions ≤ 0": True,
            "peak KV cache usage reported": True,
        }  # a profiled run: no capacity-loss check
        assert checks["preemptions ≤ 0"].detail == "0 preemption(s) in the run; policy allows 0"
        # the profiled canary's own "GPU KV cache size: 155,856 tokens" (server.log line 3)
        assert checks["peak KV cache usage reported"].detail.startswith("peak 70.")
        assert " of 155,856 tokens (≈" in checks["peak KV cache usage reported"].detail
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", *OVERLOAD_RUN)
        assert status == 1
        assert [name for name, check in checks.items() if check.passed is False] == ["preemptions ≤ 0"]
        assert checks["preemptions ≤ 0"].detail.startswith("30 preemption(s) in the run, first seen at ")
        # capacity is the run's own logged 157,280 tokens (9,830 blocks × 16), not the gated boot's 155,856
        assert " of 157,280 tokens (≈" in checks["peak KV cache usage reported"].detail

    def test_load_capacity_and_manual_value_as_approve_reads_them(self, capsys, four_rank_bundle):
        # the manual canary states --kv-cache-memory-bytes 12884377600 = the approved value, so its capacity
        # is compared with the profiled boot's 155,856 tokens: 157,280 − 155,856 = 1,424 tokens gained =
        # 1,424 / 155,856 = 0.914 %; a bound of 0.5 % is met (a gain is no loss)
        status, checks = gate(
            capsys,
            four_rank_bundle,
            FOUR_RANK / "boot.log",
            "--load",
            *STEADY_RUN,
            "--max-capacity-loss",
            "0.5",
        )
        assert status == 0
        assert checks["capacity vs profiled canary (loss ≤ 0.5%)"].detail == (
            "157,280 tokens against 155,856 profiled: gain of 1,424 tokens (0.914%); policy bound 0.5%"
        )
        # approve reads the same run the same way
        record = evidence.read_bundle(
            evidence.approve(
                [FOUR_RANK / "boot.log"],
                four_rank_bundle.parent,
                evidence.Policy(parse_size("0.9GiB")),
                "QA",
                note="load",
                layout=evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4}),
                plan=evidence.AdmissionPlan(4, 32768),
                load_paths=STEADY_RUN,
                load_policy=evidence.LoadPolicy(max_capacity_loss_pct=0.5),
            )
        )
        approved_check = next(c for c in record["checks"] if c["name"].startswith("capacity vs profiled"))
        assert approved_check["detail"] == checks["capacity vs profiled canary (loss ≤ 0.5%)"].detail

    def test_capacity_loss_bound_fails_a_smaller_manual_value(self, capsys, four_rank_bundle, tmp_path):
        # the steady canary's log as if started at 9,600 blocks: 9,600 × 1,310,720 B = 12,582,912,000 B,
        # 9,600 × 16 = 153,600 tokens; loss 155,856 − 153,600 = 2,256 tokens = 2,256 / 155,856 = 1.447 % > 1 %
        log = edited(
            tmp_path,
            STEADY_RUN[0],
            lambda text: text.replace(
                "GPU KV cache size: 157,280 tokens", "GPU KV cache size: 153,600 tokens"
            ).replace("'kv_cache_memory_bytes': 12884377600", "'kv_cache_memory_bytes': 12582912000"),
        )
        status, checks = gate(
            capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", log, "--max-capacity-loss", "1"
        )
        assert status == 1
        assert checks["capacity vs profiled canary (loss ≤ 1%)"] == Check(
            "capacity vs profiled canary (loss ≤ 1%)",
            False,
            "153,600 tokens against 155,856 profiled: loss of 2,256 tokens (1.447%); policy bound 1%",
        )
        # 70.1 % of 153,600 = 107,673.6 → ≈107,673 tokens: the run's own capacity
        assert " of 153,600 tokens (≈107,673 tokens)" in checks["peak KV cache usage reported"].detail

    def test_load_run_not_at_the_approved_value_is_warned(self, capsys, four_rank_bundle):
        main(
            [
                "gate",
                "--approved",
                str(four_rank_bundle),
                str(FOUR_RANK / "boot.log"),
                "--load",
                *map(str, PROFILED_RUN),
            ]
        )
        err = capsys.readouterr().err
        assert "warning: the load run states no --kv-cache-memory-bytes (a profiled run): it is not " in err
        # 9,830 blocks × 16 = 157,280 tokens at the approved 12 GiB; the profiled run logged 155,856
        assert (
            "warning: the load run's KV cache holds 155,856 tokens; the approved value holds 157,280" in err
        )

    def test_year_anchors_the_log_times(self, capsys, four_rank_bundle):
        # the steady canary's server log alone: its peak stats line (line 304) is stamped "11-27 09:36:28"
        argv = [FOUR_RANK / "boot.log", "--load", STEADY_RUN[0]]
        _, checks = gate(capsys, four_rank_bundle, *argv)
        assert "server.log:304 (11-27 09:36:28)" in checks["peak KV cache usage reported"].detail
        _, checks = gate(capsys, four_rank_bundle, *argv, "--year", "2026")
        assert "server.log:304 (2026-11-27T09:36:28)" in checks["peak KV cache usage reported"].detail
        assert (
            main(["gate", "--approved", str(four_rank_bundle), str(FOUR_RANK / "boot.log"), "--year", "2026"])
            == 2
        )
        assert "apply to --load files only" in capsys.readouterr().err

    def test_a_canary_that_lost_most_of_its_memory_fails_with_the_checks_printed(
        self, capsys, four_rank_bundle, tmp_path
    ):
        # rank 2 starts with 30.01 GiB free instead of 48.61 GiB: 18.6 GiB lost, more than its 12 GiB budget;
        # a FAIL (exit 1) with every check printed, not a refusal (exit 2). Its suggestion falls with it, so
        # the line adds up (issue 26): 13,851,269,530 B − 18.6 GiB = −6,120,328,396 B (−5.7 GiB)
        log = edited(
            tmp_path,
            FOUR_RANK / "boot.log",
            lambda text: text.replace("(48.61/79.19 GiB)", "(30.01/79.19 GiB)").replace(
                "`--kv-cache-memory=13851269530` (12.9 GiB)", "`--kv-cache-memory=-6120328396` (-5.7 GiB)"
            ),
        )
        assert main(["gate", "--approved", str(four_rank_bundle), str(log)]) == 1
        out = capsys.readouterr().out
        assert "FAIL  approved value fits every rank" in out
        assert "no value fits rank 2: re-profile this deployment" in out
        assert "PASS  every rank present" in out

    def test_a_canary_with_less_room_of_its_own_fails(self, capsys, four_rank_bundle, tmp_path):
        # same free memory, but rank 2's own room fell from 12.9 to 12.4 GiB (13,314,398,618 B):
        # 12.4 − 0.9 GiB reserve = 11.5 GiB < the approved 12 GiB
        log = edited(
            tmp_path,
            FOUR_RANK / "boot.log",
            lambda text: text.replace(
                "`--kv-cache-memory=13851269530` (12.9 GiB)", "`--kv-cache-memory=13314398618` (12.4 GiB)"
            ),
        )
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 1
        assert "rank 2: the boot's own room 12.4 GiB − reserve 921.6 MiB − 0 B = 11.5 GiB < 12 GiB" in (
            checks[BUDGET_CHECK].detail
        )


def test_start_up_check_that_misses_a_rank_cannot_pass():
    # issue 24 (review): rank 3 shows no free memory at start-up, so vLLM's check is not seen on every rank.
    # Ranks 0-2: 42 GiB − 5.12 MiB margin ≥ ceil((80 GiB + margin) × 0.5) = 40 GiB + 2.56 MiB: each passes
    ledger = boot(("42GiB",) * 4, total_bytes=[80 * GiB] * 4)
    ledger.loc[3, "init_free_bytes"] = None
    check = check_canary_utilization(
        approved(), ledger, {"gpu_memory_utilization": 0.5, "vllm_version": "0.33.0"}, 0
    )
    assert check.passed is None
    assert "rank 3: free or total memory at start-up not shown" in check.detail
    assert check.detail.endswith(
        "cannot judge the rank(s) not shown: gate a canary whose log shows every "
        "rank's free and total memory at start-up (VLLM_LOGGING_LEVEL=DEBUG prints them per rank)"
    )


class TestLowFreeMemoryIsNeverHidden:
    """Issue 11 item 9: a rank's lowest startup free memory decides, whatever line or process shows it."""

    RANK_2 = "(48.61/79.19 GiB) on startup"

    def lower_line(self) -> str:
        lines = (FOUR_RANK / "boot.log").read_text().splitlines(True)
        [line] = [line for line in lines if self.RANK_2 in line]
        return line.replace("48.61/79.19", "40.61/79.19")

    @pytest.mark.parametrize("how", ["duplicate line first", "duplicate line last", "second process"])
    def test_the_lower_free_memory_fails_the_canary(self, capsys, four_rank_bundle, tmp_path, how):
        # rank 2 shows 40.61 GiB free at startup once besides its 48.61 GiB: 12 GiB − (48.61 − 40.61) GiB
        # = 4 GiB < 12 GiB, so the canary fails (or is refused naming the conflict), never passes
        lower = self.lower_line()
        if how == "second process":
            lower = lower.replace("pid=48604", "pid=59999")
        text = (FOUR_RANK / "boot.log").read_text()
        original = next(line for line in text.splitlines(True) if self.RANK_2 in line)
        both = lower + original if how == "duplicate line first" else original + lower
        log = tmp_path / "canary.log"
        log.write_text(text.replace(original, both))
        status = main(["gate", "--approved", str(four_rank_bundle), str(log), "--json"])
        out, err = capsys.readouterr()
        assert status in (1, 2)
        if status == 1:
            budget = next(c for c in json.loads(out)["checks"] if c["name"] == BUDGET_CHECK)
            assert "40.61 GiB" in budget["detail"] and budget["passed"] is False
        else:
            assert err.startswith(f"error: {log}:")


class TestGateTrustsOnlyAVerifiedBundle:
    def test_hand_edited_budget_is_not_judged_against(self, capsys, four_rank_bundle, tmp_path):
        folder = Path(shutil.copytree(four_rank_bundle, tmp_path / four_rank_bundle.name))
        record = json.loads((folder / "budget.json").read_text())
        record["decision"]["kv_cache_memory_bytes"] = 10_884_377_600
        record["policy"]["reserve_bytes"] = 1
        (folder / "budget.json").write_text(json.dumps(record))
        assert main(["gate", "--approved", str(folder), str(FOUR_RANK / "boot.log")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"error: cannot judge: the approved bundle changed: {folder} fails verification"
        )
        assert err.count("\n") == 1  # one line; kvplan verify lists every difference
        assert main(["verify", str(folder)]) == 1
        out = capsys.readouterr().out
        # recomputed with the edited 1 B reserve: rank 2's 12.9 GiB = 13,851,332,198 B − 1 B, / 1,310,720 B
        # = 10,567.7 → 10,567 blocks × 1,310,720 B = 13,850,378,240 B
        assert "  - decision.kv_cache_memory_bytes: recorded 10884377600, recomputed 13850378240\n" in out
        assert "  - inputs digest: recorded " in out  # the 1 B reserve is not the approved policy
        assert main(["verify", str(folder)]) == 1


class TestGateInputErrors:
    def test_a_file_without_startup_lines_is_named(self, capsys, four_rank_bundle, tmp_path):
        garbage = tmp_path / "garbage.log"
        garbage.write_text("hello\n")
        assert main(["gate", "--approved", str(four_rank_bundle), str(garbage)]) == 2
        assert capsys.readouterr().err == (
            f"error: {garbage}: no vLLM boot found: expected vLLM startup lines such as 'Free memory on "
            "device (…) on startup', 'Available KV cache memory: … GiB' or 'GPU KV cache size: N tokens'\n"
        )

    @pytest.mark.parametrize("argument", ["BOOT_LOG", "--nvidia-smi", "--load"])
    def test_a_missing_file_names_its_argument(self, capsys, four_rank_bundle, tmp_path, argument):
        missing = tmp_path / "missing.file"
        argv = {
            "BOOT_LOG": [missing],
            "--nvidia-smi": [FOUR_RANK / "boot.log", "--nvidia-smi", missing],
            "--load": [FOUR_RANK / "boot.log", "--load", missing],
        }[argument]
        assert main(["gate", "--approved", str(four_rank_bundle), *map(str, argv)]) == 2
        assert capsys.readouterr().err == f"error: {missing}: no such file ({argument})\n"


class TestGateOnDriftCanary:
    def test_reference_boot_fits_but_holds_fewer_tokens_than_the_plan(self, capsys, drift_bundle):
        status, checks = gate(capsys, drift_bundle, DRIFT / "reference.log")
        assert checks[BUDGET_CHECK].passed is True
        # profiled at gpu_memory_utilization 0.9, it logged 761,216 tokens, below the 786,432 the plan needs
        assert checks[TOKENS_CHECK].detail == "GPU KV cache size 761,216 tokens < plan 786,432 tokens"
        assert status == 1

    def test_canary_without_guard(self, capsys, drift_bundle):
        status, checks = gate(capsys, drift_bundle, DRIFT / "canary.log")
        assert status == 1
        # 30 − (42 − 40.75) = 28.75 GiB on rank 2; 30 − 0 on rank 1 (more free memory never raises)
        detail = checks[BUDGET_CHECK].detail
        assert "rank 2: 30 GiB − max(0, 42 GiB − 40.75 GiB) − 0 B = 28.75 GiB < 30 GiB" in detail
        assert "rank 1: 30 GiB − max(0, 42 GiB − 42.1 GiB) − 0 B = 30 GiB ≥ 30 GiB" in detail
        assert checks[TOKENS_CHECK].passed is True  # 786,432 ≥ 786,432: the canary ran at the approved value

    def test_canary_with_guard_names_the_launch_that_fits(self, capsys, drift_bundle):
        # issue 24 (review): the remedy is a launch that boots, the byte flag with its companion U
        status, checks = gate(capsys, drift_bundle, DRIFT / "canary.log", "--guard", "0.5GiB")
        assert status == 1
        # 28.25 GiB / 40,960 B per token / 16 = 46,284.8 blocks → 46,284 × 655,360 B = 30,332,682,240 B.
        # U: the canary shows no total, the approval's is 47,663,399,567 B; rank 2's 40.75 GiB − 0.5 GiB guard
        # − 5.12 MiB margin ≥ ceil((total + margin) × U) holds up to U = 0.90 (0.91 needs 40.40 GiB), below
        # the approval's 0.94, which rank 2 would fail (0.94 × 44.39 GiB = 41.73 GiB > 40.75 GiB)
        assert checks[BUDGET_CHECK].detail.endswith(
            "a lower value fits: 28.25 GiB (whole blocks), "
            "--kv-cache-memory-bytes=30332682240 --gpu-memory-utilization=0.90 (limiting rank 2)"
        )
        total, free, margin = 47_663_399_567, parse_size("40.75GiB") - parse_size("0.5GiB"), 5_368_710
        assert math.ceil((total + margin) * 0.90) <= free - margin < math.ceil((total + margin) * 0.91)

    def test_no_launch_offered_where_a_rank_shows_no_memory(self):
        # issue 24 (review): without rank 3's free memory no U can be shown to pass: the remedy says so
        ledger = boot(("41.8GiB", "42.1GiB", "40.75GiB", "0GiB"), total_bytes=[80 * GiB] * 4)
        ledger.loc[3, "init_free_bytes"] = None
        detail = check_budget_fits(approved(), ledger, 0).detail
        assert "a lower value fits" not in detail
        assert detail.endswith(
            "28.75 GiB would fit rank 2, but no launch can be offered: rank 3 shows no free or total memory at "
            "start-up: gate a canary whose log shows every rank's free and total memory at start-up "
            "(VLLM_LOGGING_LEVEL=DEBUG prints them per rank)"
        )

    def test_text_output_and_bad_bundle(self, capsys, drift_bundle, tmp_path):
        assert main(["gate", "--approved", str(drift_bundle), str(DRIFT / "canary.log")]) == 1
        out = capsys.readouterr().out
        assert "FAIL  approved value fits every rank" in out
        # the canary logged no room after warm-up and no snapshot was given: the reserve check is N/A
        assert "N/A  reserve present after warm-up" in out
        # issue 24: every verdict counted; the canary's own utilization (N/A: it shows no total memory) and
        # the value it ran (the approved 30 GiB: PASS) are checked too
        assert out.rstrip().endswith("gate: FAIL (5 PASS, 1 FAIL, 0 CANNOT JUDGE, 2 N/A)")
        assert main(["gate", "--approved", str(tmp_path), str(DRIFT / "canary.log")]) == 2
        assert "not an evidence bundle" in capsys.readouterr().err
