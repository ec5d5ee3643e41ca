"""The manual KV value a canary ran: the flag's exact bytes where vLLM logs them, else a safe interval.

data/boots/drift/canary.log is a vLLM 0.26.0 manual-value boot: its API server's non-default args state
``'kv_cache_memory_bytes': 32212254720`` (line 2) and every rank prints "reserved 30.0 GiB memory for KV Cache"
(lines 49–52, ``format_gib``: rounded to 0.01 GiB).
"""

from __future__ import annotations

import pandas as pd

from kvplan import DATA_DIR
from kvplan.checks.gate import Approved, check_budget_fits
from kvplan.io.vllm.manual import PRINTED_HALF_BYTES
from kvplan.room import read_vllm_log_rooms

GiB = 2**30
CANARY = DATA_DIR / "boots" / "drift" / "canary.log"
ARGS = "'kv_cache_memory_bytes': 32212254720"


def manual(path) -> tuple[list, list, list]:
    ledger, metadata = read_vllm_log_rooms(path)
    ledger = ledger.sort_values("rank")
    rows = metadata.provenance
    lines = rows[rows["column"] == "manual_kv_bytes"].sort_values("rank")["line"].tolist()
    return ledger["manual_kv_bytes"].tolist(), ledger["manual_kv_max_bytes"].tolist(), lines


def edited(tmp_path, old: str, new: str):
    path = tmp_path / "canary.log"
    text = CANARY.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_half_of_the_printed_hundredth_rounded_up():
    # 0.005 GiB = 2^30 / 200 = 5,368,709.12 B → 5,368,710 B (rounded up: the bound must not fall short)
    assert PRINTED_HALF_BYTES == 5_368_710


def test_the_arguments_give_the_exact_bytes(tmp_path):
    # 32,212,254,720 = 30 GiB exactly; taken from the non-default args (line 2) on every rank
    assert manual(CANARY) == ([32_212_254_720] * 4, [32_212_254_720] * 4, [2] * 4)
    # a flag that prints as 30.0 GiB but is not 30 GiB: 32,217,000,000 B = 30.0044 GiB (within 0.005 GiB)
    path = edited(tmp_path, ARGS, "'kv_cache_memory_bytes': 32217000000")
    assert manual(path)[:2] == ([32_217_000_000] * 4, [32_217_000_000] * 4)


def test_without_the_arguments_the_printed_figure_is_an_interval(tmp_path):
    # the workers' lines alone: "30.0 GiB" = 32,212,254,720 B, and the flag may be up to 0.005 GiB more
    path = edited(tmp_path, ARGS + ", ", "")
    assert manual(path) == ([32_212_254_720] * 4, [32_212_254_720 + 5_368_710] * 4, [49, 50, 52, 51])


def test_arguments_far_from_the_printed_figure_keep_the_larger(tmp_path):
    # 33,000,000,000 B = 30.73 GiB, 0.73 GiB from the printed 30.0 GiB: two values for one flag; the printed
    # figure stays, and the most it may have run is the larger, 33,000,000,000 B, with a note
    path = edited(tmp_path, ARGS, "'kv_cache_memory_bytes': 33000000000")
    assert manual(path)[:2] == ([32_212_254_720] * 4, [33_000_000_000] * 4)
    notes = [note for note in read_vllm_log_rooms(path)[1].warnings if note.code == "manual-value-differs"]
    assert len(notes) == 4 and str(notes[0]).startswith(f"{path}:2: the arguments give ")


def approved(budget_bytes: int, block_bytes: int) -> Approved:
    """One rank approved at ``budget_bytes`` (its safe budget), 70 GiB free at approval."""
    return Approved(budget_bytes, (0,), (budget_bytes,), (70 * GiB,), GiB, 0, block_bytes, {})


def canary(kv_bytes: int, most_bytes: int) -> pd.DataFrame:
    """A canary rank with the approval's 70 GiB free (no drift) that ran ``kv_bytes`` (at most ``most_bytes``)."""
    return pd.DataFrame(
        {
            "rank": [0],
            "init_free_bytes": [70 * GiB],
            "manual_kv_bytes": [kv_bytes],
            "manual_kv_max_bytes": [most_bytes],
        }
    )


def test_gate_passes_the_exact_approved_value_and_never_a_printed_one_that_may_be_above():
    # the fleet's H100 class: 87,685 blocks × 655,360 B = 57,465,241,600 B = 53.5194 GiB, printed "53.52 GiB"
    # = 57,466,662,420 B (53.52 × 2^30 = 57,466,662,420.48, to the nearest byte)
    block, value, printed = 655_360, 57_465_241_600, 57_466_662_420
    assert check_budget_fits(approved(value, block), canary(value, value), 0).passed is True
    # printed only: up to 57,466,662,420 + 5,368,710 = 57,472,031,130 B = 87,695 blocks > 87,685: may be above
    check = check_budget_fits(approved(value, block), canary(printed, printed + 5_368_710), 0)
    assert check.passed is False
    assert (
        "rank 0 ran a value vLLM printed as 53.52 GiB (to 0.01 GiB), so up to "
        # the approved value as a budget, never above its bytes: 53.5194 GiB floored to "53.51 GiB" (issue 27)
        "--kv-cache-memory-bytes=57472031130, which may be above the approved 53.51 GiB" in check.detail
    )
    # a printed figure whose whole interval holds no more blocks than the approved value passes:
    # "53.51 GiB" = 57,455,925,002 B, up to 57,461,293,712 B = 87,678 blocks ≤ 87,685
    low = 57_455_925_002
    assert check_budget_fits(approved(value, block), canary(low, low + 5_368_710), 0).passed is True
