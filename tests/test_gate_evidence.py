"""Issue 24: the gate on incomplete or foreign evidence, the verdict line, one line per rank per check, and the
canary's own launch (its utilization on its own free memory, the manual value it ran)."""

import json
from pathlib import Path

import pytest

from kvplan.checks.canary import VALUE_CHECK
from kvplan.checks.gate import BUDGET_CHECK
from kvplan.checks.key import KEY_CHECK, RANKS_CHECK
from kvplan.checks.launch import UTILIZATION_CHECK
from kvplan.cli import main
from tests.test_gate import DRIFT, FOUR_RANK, _approve, edited, gate


@pytest.fixture(scope="module")
def four_rank_bundle(tmp_path_factory) -> Path:
    return _approve(tmp_path_factory.mktemp("a"), FOUR_RANK / "boot.log", "0.9GiB", "llama-3.1-70b", 4, 32768)


@pytest.fixture(scope="module")
def drift_bundle(tmp_path_factory) -> Path:
    return _approve(tmp_path_factory.mktemp("c"), DRIFT / "reference.log", "1GiB", "qwen3-14b", 24, 32768)


def rank0_only(text: str) -> str:
    """The sample boot without the lines of ranks 1-3's workers (pids 48603-48605)."""
    return "".join(
        line for line in text.splitlines(True) if not any(f"pid={p}" in line for p in (48603, 48604, 48605))
    )


@pytest.mark.parametrize(
    "edit, reason",
    [
        # cut short: the first 50 lines, before any KV cache is sized
        (
            lambda text: "".join(text.splitlines(True)[:50]),
            "the canary's log stops before the KV cache is sized",
        ),
        (rank0_only, "the canary misses or adds ranks"),
        (
            lambda text: text.replace("Llama-3.1-70B", "Llama-3.3-70B"),
            "the canary shows another compatibility key",
        ),
        # the canary: cut short, rank 0 only, another model
        (
            lambda text: "".join(
                rank0_only(text.replace("Llama-3.1-70B", "Llama-3.3-70B")).splitlines(True)[:60]
            ),
            "the canary shows another compatibility key",
        ),
    ],
)
def test_incomplete_or_foreign_evidence_cannot_be_judged(capsys, four_rank_bundle, tmp_path, edit, reason):
    log = edited(tmp_path, FOUR_RANK / "boot.log", edit)
    status, checks = gate(capsys, four_rank_bundle, log)
    assert status == 2
    assert not any(check.passed is False for check in checks.values())
    assert checks[BUDGET_CHECK].passed is None and reason in checks[BUDGET_CHECK].detail
    assert main(["gate", "--approved", str(four_rank_bundle), str(log)]) == 2
    out = capsys.readouterr().out
    assert "a lower value fits" not in out and "--kv-cache-memory-bytes=" not in out.split("\n", 1)[1]
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("gate: CANNOT JUDGE (") and " CANNOT JUDGE, " in last and last.endswith(" N/A)")


def test_a_missing_rank_says_cannot_judge_and_why(capsys, four_rank_bundle, tmp_path):
    status, checks = gate(capsys, four_rank_bundle, edited(tmp_path, FOUR_RANK / "boot.log", rank0_only))
    assert status == 2
    assert checks[RANKS_CHECK].detail.startswith("cannot judge: missing ranks 1, 2, 3")
    assert checks[KEY_CHECK].passed is True  # the key of rank 0's lines is the approved one


def test_a_rank_the_snapshot_shows_no_free_memory_for_is_not_passed(
    capsys, four_rank_bundle, tmp_path
):  # issue 24
    # rank 2 is the limiting rank (12 GiB ≥ 12 GiB); its memory.free [N/A] used to leave ranks 0, 1, 3
    # (8,356, 7,127, 5,898 MiB ≥ 921.6 MiB reserve) and gate: PASS, exit 0
    apps = FOUR_RANK / "nvidia-smi-apps.csv"
    status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--nvidia-smi",
                          FOUR_RANK / "nvidia-smi-gpu.csv", "--nvidia-smi", apps)  # fmt: skip
    assert (status, checks["reserve present after warm-up"].passed) == (0, True)  # the snapshot as taken
    snapshot = edited(
        tmp_path, FOUR_RANK / "nvidia-smi-gpu.csv", lambda text: text.replace("2314 MiB", "[N/A]")
    )
    status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--nvidia-smi", snapshot,
                          "--nvidia-smi", apps)  # fmt: skip
    reserve = checks["reserve present after warm-up"]
    assert (status, reserve.passed) == (2, None)
    assert reserve.detail.endswith("rank 2: no free memory after warm-up shown: cannot judge")


def test_one_line_per_rank_per_check(capsys, four_rank_bundle, tmp_path):
    # rank 2's own room lowered (12.9 → 12.4 GiB): both estimates shown, on one line, the lower first
    log = edited(
        tmp_path,
        FOUR_RANK / "boot.log",
        lambda text: text.replace(
            "`--kv-cache-memory=13851269530` (12.9 GiB)", "`--kv-cache-memory=13314398618` (12.4 GiB)"
        ),
    )
    assert main(["gate", "--approved", str(four_rank_bundle), str(log)]) == 1
    out = capsys.readouterr().out
    for name in (BUDGET_CHECK, UTILIZATION_CHECK):
        block = out.split(f"  {name}\n", 1)[1].split("\n")
        lines = [line.strip() for line in block[:4]]
        assert [line.split(":", 1)[0] for line in lines] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert (
        "rank 2: the boot's own room 12.4 GiB − reserve 921.6 MiB − 0 B = 11.5 GiB < 12 GiB (also 12 GiB − "
        "max(0, 48.61 GiB − 48.61 GiB) − 0 B = 12 GiB ≥ 12 GiB)"
    ) in out
    # key, ranks, outcome, tokens, utilization PASS; budget FAIL; reserve (no snapshot), value (profiled) N/A
    assert out.rstrip().splitlines()[-1] == "gate: FAIL (5 PASS, 1 FAIL, 0 CANNOT JUDGE, 2 N/A)"


def test_a_canary_whose_utilization_would_not_pass_fails(capsys, four_rank_bundle, tmp_path):
    # rank 2 starts with 47.52 GiB free: vLLM asked ceil(79.19 GiB × 0.6) = 47.51 GiB and started, but with the
    # 0.5 GiB guard and the printed figures on their safe side, 47.515 − 0.5 < ceil(79.195 × 0.6) = 47.517 GiB:
    # the next boot may not start. Its suggestion falls with its free memory, so the line adds up (issue 26):
    # 13,851,269,530 B − 1.09 GiB = 12,680,890,942 B (11.81 GiB)
    log = edited(
        tmp_path,
        FOUR_RANK / "boot.log",
        lambda text: text.replace("(48.61/79.19 GiB)", "(47.52/79.19 GiB)").replace(
            "`--kv-cache-memory=13851269530` (12.9 GiB)", "`--kv-cache-memory=12680890942` (11.81 GiB)"
        ),
    )
    status, checks = gate(capsys, four_rank_bundle, log, "--guard", "0.5GiB")
    assert status == 1
    check = checks[UTILIZATION_CHECK]
    assert check.passed is False
    assert "rank 2: free 47.52 GiB − margin 5.12 MiB − guard 512 MiB < ceil(79.2 GiB × 0.60)" in check.detail


def test_a_canary_that_ran_another_value_fails(capsys, drift_bundle, tmp_path):
    # the drift canary ran the approved 30 GiB = 32,212,254,720 B; the same canary at 29 GiB is not its canary
    def at_29_gib(text: str) -> str:
        return text.replace("32212254720", "31138512896").replace("reserved 30.0 GiB", "reserved 29.0 GiB")

    status, checks = gate(capsys, drift_bundle, DRIFT / "canary.log")
    assert checks[VALUE_CHECK].passed is True
    status, checks = gate(capsys, drift_bundle, edited(tmp_path, DRIFT / "canary.log", at_29_gib))
    assert status == 1
    assert checks[VALUE_CHECK].passed is False
    assert (
        "rank 0: ran --kv-cache-memory-bytes=31138512896, approved --kv-cache-memory-bytes=32212254720"
        in (checks[VALUE_CHECK].detail)
    )
    assert json.dumps(checks[VALUE_CHECK].detail).count("rank 2:") == 1
