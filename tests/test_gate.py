"""Gate checks on hand-built ledgers with known answers (scenario C's numbers) and on the sample boots."""

import json
from pathlib import Path

import pandas as pd
import pytest

from kvplan import evidence
from kvplan.cli import main
from kvplan.config import DATA_DIR
from kvplan.gate import (
    BUDGET_CHECK,
    KEY_CHECK,
    OUTCOME_CHECK,
    RANKS_CHECK,
    RESERVE_CHECK,
    TOKENS_CHECK,
    Approved,
    Check,
    check_budget_fits,
    check_compatibility_key,
    check_outcomes,
    check_ranks_present,
    check_reserve_after_warmup,
    check_tokens,
    format_checks,
    gate_checks,
    gate_verdict,
    verdict_word,
)
from kvplan.io.model_config import resolve_model_config
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


def test_one_word_per_verdict_for_checks_and_gates():
    assert [verdict_word(v) for v in (True, False, None)] == ["PASS", "FAIL", "CANNOT JUDGE"]
    # the overall word of a gate is the word of its folded verdict
    assert verdict_word(gate_verdict([Check("a", True, ""), Check("b", None, "")])) == "CANNOT JUDGE"


def test_format_checks_lists_each_check_then_the_verdict():
    checks = [Check(RANKS_CHECK, True, "ranks 0-3 of 4"),
              Check(BUDGET_CHECK, False, "rank 2: 28.25 GiB < 30 GiB; a lower value fits: 28.25 GiB"),
              Check(TOKENS_CHECK, None, "the boot did not log its GPU KV cache size")]
    assert format_checks(checks).splitlines() == [
        "PASS  every rank present",
        "      ranks 0-3 of 4",
        "FAIL  approved value fits every rank",
        "      rank 2: 28.25 GiB < 30 GiB",
        "      a lower value fits: 28.25 GiB",
        "CANNOT JUDGE  tokens cover the admission plan",
        "      the boot did not log its GPU KV cache size",
        "gate: FAIL (1 of 3 checks failed)",  # a failure outranks a check that cannot be judged
    ]
    assert format_checks(checks[:1]).splitlines()[-1] == "gate: PASS"
    assert format_checks([checks[0], checks[2]]).splitlines()[-1] == (
        "gate: CANNOT JUDGE (1 of 2 checks lack evidence)")


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
        assert check.detail == "startup free memory not shown for rank 1 at approval"


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


# --- on the sample boots, through `kvplan gate` ---------------------------------------------------

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
DRIFT = DATA_DIR / "boots" / "drift"


def _approve(out: Path, log: Path, reserve: str, model: str, target: int, seq_len: int) -> Path:
    layout = evidence.ModelLayout(resolve_model_config(model), {"tp": 4})
    return evidence.approve([log], out, evidence.Policy(parse_size(reserve)), "QA", layout=layout,
                            plan=evidence.Plan(target, seq_len))


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
        assert all(check.passed for check in checks.values())
        # rank 2: room 12.9 GiB − KV 12,884,377,600 B = 922.1 MiB ≥ reserve 0.9 GiB
        reserve = checks[RESERVE_CHECK].detail
        assert "rank 2: room 12.9 GiB − KV 12 GiB = 922.1 MiB ≥ reserve 921.6 MiB" in reserve
        assert checks[TOKENS_CHECK].detail == "GPU KV cache size 155,856 tokens ≥ plan 131,072 tokens"

    def test_changed_vllm_version_fails_the_key(self, capsys, four_rank_bundle, tmp_path):
        log = edited(tmp_path, FOUR_RANK / "boot.log", lambda text: text.replace("0.26.0", "0.27.0"))
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 1
        assert checks[KEY_CHECK].detail == "vllm_version: approved 0.26.0, boot 0.27.0"

    def test_a_missing_rank_fails(self, capsys, four_rank_bundle, tmp_path):
        # every line of rank 3's worker process (pid 48605) removed
        log = edited(tmp_path, FOUR_RANK / "boot.log",
                     lambda text: "".join(line for line in text.splitlines(True) if "pid=48605" not in line))
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 1
        assert checks[RANKS_CHECK].detail == "missing rank 3 (the boot shows rank 0, 1, 2 of approved 0-3)"
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
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log",
                              *(arg for csv in snapshots for arg in ("--nvidia-smi", csv)))
        assert status == 0
        # GPU 2 (rank 2's pid in the apps snapshot): 2,314 MiB free = 2.26 GiB ≥ 0.9 GiB
        assert "rank 2: free after warm-up (snapshot) = 2.26 GiB ≥ reserve 921.6 MiB" in (
            checks[RESERVE_CHECK].detail)
        # the same snapshot with 512 MiB left on GPU 2: the reserve is gone
        low = edited(tmp_path, snapshots[0],
                     lambda text: text.replace(" 78775 MiB, 2314 MiB", " 80577 MiB, 512 MiB"))
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--nvidia-smi", low,
                              "--nvidia-smi", snapshots[1])
        assert status == 1
        reserve = checks[RESERVE_CHECK].detail
        assert "rank 2: free after warm-up (snapshot) = 512 MiB < reserve 921.6 MiB" in reserve

    def test_fewer_tokens_than_the_plan_fails(self, capsys, four_rank_bundle, tmp_path):
        # what a canary that allocated 7,680 blocks (7,680 × 16 = 122,880 tokens < 131,072) would log
        log = edited(tmp_path, FOUR_RANK / "boot.log",
                     lambda text: text.replace("cache size: 155,856 tokens", "cache size: 122,880 tokens"))
        status, checks = gate(capsys, four_rank_bundle, log)
        assert status == 1
        assert checks[TOKENS_CHECK].detail == "GPU KV cache size 122,880 tokens < plan 131,072 tokens"

    def test_load_evidence(self, capsys, four_rank_bundle):
        load = DATA_DIR / "load"
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load",
                              *sorted((load / "profiled-canary").iterdir()))
        assert status == 0
        assert len(checks) > 6
        status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load",
                              *sorted((load / "manual-canary-overload").iterdir()))
        assert status == 1
        assert [name for name, check in checks.items() if check.passed is False] == ["preemptions ≤ 0"]


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

    def test_canary_with_guard_names_the_value_that_fits(self, capsys, drift_bundle):
        status, checks = gate(capsys, drift_bundle, DRIFT / "canary.log", "--guard", "0.5GiB")
        assert status == 1
        # 28.25 GiB / 40,960 B per token / 16 = 46,284.8 blocks → 46,284 × 655,360 B = 30,332,682,240 B
        assert checks[BUDGET_CHECK].detail.endswith("a lower value fits: 28.25 GiB (whole blocks), "
                                                     "--kv-cache-memory-bytes=30332682240 (limiting rank 2)")

    def test_text_output_and_bad_bundle(self, capsys, drift_bundle, tmp_path):
        assert main(["gate", "--approved", str(drift_bundle), str(DRIFT / "canary.log")]) == 1
        out = capsys.readouterr().out
        assert "FAIL  approved value fits every rank" in out
        assert out.rstrip().endswith("gate: FAIL (1 of 6 checks failed)")
        assert main(["gate", "--approved", str(tmp_path), str(DRIFT / "canary.log")]) == 2
        assert "not an evidence bundle" in capsys.readouterr().err
