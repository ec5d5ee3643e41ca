"""Ledger checks, worst room per rank, and the budget from logs (library and CLI)."""

import json

import pandas as pd
import pytest

from kvplan.cli import main
from kvplan.config import DATA_DIR
from kvplan.io import read_vllm_log, read_vllm_logs
from kvplan.ledger import LedgerError, budget_from_ledger, compatibility_key, room_per_rank
from kvplan.units import parse_size
from tests.conftest import TESTS_DATA_DIR, GiB

LOGS = TESTS_DATA_DIR / "logs"
FOUR_RANK = DATA_DIR / "boots" / "four-rank"
RESERVE = parse_size("0.9GiB")
HEAD = "INFO 08-14 14:07:22 [gpu_worker.py:227] "


def boot_text(version, rooms, tp=None):
    """One boot: engine config, then one suggestion line per rank with the given room bytes."""
    tp = tp or len(rooms)
    lines = [
        f"vLLM API server version {version}",
        f"(EngineCore_DP0 pid=9) Initializing a V1 LLM engine (v{version}) with config: model='m', "
        f"tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1",
    ]
    for rank, room in enumerate(rooms):
        lines.append(
            f"(Worker_TP{rank} pid={100 + rank}) {HEAD}Free memory on device (70.0/79.19 GiB) on startup. "
            "Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 32.0 GiB for weight, "
            "2.0 GiB "
            "for peak activation, 1.0 GiB for non-torch memory, and 0.5 GiB for CUDAGraph memory. Replace "
            "gpu_memory_utilization config with `--kv-cache-memory=1` (0.0 GiB) to fit into requested "
            "memory, "
            f"or `--kv-cache-memory={room}` ({room / GiB:.2f} GiB) to fully utilize gpu memory. Current kv "
            "cache memory in use is 30.0 GiB."
        )
    return "\n".join(lines) + "\n"


def ledger_of_texts(texts):
    """Several in-memory logs as one ledger, as read_vllm_logs makes of files."""
    frames = [read_vllm_log(text, source=name) for name, text in texts.items()]
    ledger = pd.concat([frame for frame, _ in frames], ignore_index=True)
    ledger.attrs = {"lines": {k: v for _, meta in frames for k, v in meta["lines"].items()}}
    return ledger


def test_four_rank_sample_gives_12_gib_with_rank_2_limiting():
    ledger, meta = read_vllm_logs(FOUR_RANK)
    assert meta["warnings"] == []
    # the sample's rooms are parse_size of 18.8, 17.6, 12.9 and 16.4 GiB (suggested_full, every rank)
    assert ledger["room_bytes"].tolist() == [parse_size(f"{x}GiB") for x in ("18.8", "17.6", "12.9", "16.4")]
    assert ledger["room_source"].tolist() == ["suggestion"] * 4
    budget = budget_from_ledger(ledger, RESERVE)
    # min(room − 0.9 GiB) = 12.9 − 0.9 = 12.0 GiB on rank 2
    assert (budget.uniform_budget_bytes, budget.limiting_rank) == (12 * GiB, 2)


def test_cli_budget_from_logs_equals_the_room_form(capsys):
    assert main(["budget", *map(str, sorted(FOUR_RANK.glob("*.log"))), "--reserve", "0.9GiB", "--json"]) == 0
    from_logs = json.loads(capsys.readouterr().out)
    assert main(["budget", "--room", "18.8GiB,17.6GiB,12.9GiB,16.4GiB", "--reserve", "0.9GiB", "--json"]) == 0
    from_room = json.loads(capsys.readouterr().out)
    # the same budget; only where each room came from differs (the logs' suggestion lines vs given)
    assert [rank.pop("room_source") for rank in from_logs["ranks"]] == ["suggestion"] * 4
    assert [rank.pop("room_source") for rank in from_room["ranks"]] == ["given"] * 4
    assert from_logs == from_room
    assert (from_logs["uniform_budget_bytes"], from_logs["limiting_rank"]) == (12 * GiB, 2)


def test_cli_budget_needs_logs_or_room_not_both(capsys):
    assert main(["budget", "--reserve", "1GiB"]) == 2
    assert main(["budget", str(FOUR_RANK), "--room", "1GiB", "--reserve", "1GiB"]) == 2
    assert "exactly one" in capsys.readouterr().err


def test_cli_ledger_json_csv_and_table(capsys):
    assert main(["ledger", str(LOGS / "v0.14.0-tp2-rank0-only.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"rows", "warnings"} and len(data["warnings"]) == 1
    assert data["rows"][0]["available_kv_bytes"] == parse_size("52.3GiB")
    assert data["rows"][1]["available_kv_bytes"] is None
    assert main(["ledger", str(LOGS / "v0.14.0-tp2-rank0-only.log"), "--csv"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("source,boot,rank,") and len(out.splitlines()) == 3
    assert main(["ledger", str(LOGS / "v0.14.0-tp2-rank0-only.log")]) == 0
    assert "51.68 GiB" in capsys.readouterr().out  # 52.3 − 0.62 GiB


def test_rank_zero_only_is_refused_unless_assumed_uniform():
    ledger, _ = read_vllm_log(LOGS / "v0.14.0-tp2-rank0-only.log")
    with pytest.raises(LedgerError, match=r"rank0-only\.log:7: the logs show the room of local rank 0 only"):
        budget_from_ledger(ledger, GiB)
    rooms = room_per_rank(ledger, assume_uniform=True)
    assert rooms["room_source"].tolist() == ["available_kv", "assumed_uniform"]
    assert rooms["room_bytes"].tolist() == [parse_size("52.3GiB") - parse_size("0.62GiB")] * 2


def test_missing_rank_is_refused_naming_the_file_and_line(tmp_path):
    ledger, _ = read_vllm_log(boot_text("0.26.0", [20 * GiB, 19 * GiB], tp=4), source="two.log")
    with pytest.raises(LedgerError, match=r"rank\(s\) 2, 3 missing: TP × PP × DP = 4 \(two\.log:2\)"):
        room_per_rank(ledger)


def test_failed_boot_is_refused_naming_the_error_line():
    ledger, _ = read_vllm_log(LOGS / "v0.9.2-tp2-oom-then-restart.log")
    with pytest.raises(
        LedgerError,
        match=r"restart\.log:10: boot 0 rank 0 did not boot cleanly \(error: "
        r"RuntimeError: Engine core",
    ):
        budget_from_ledger(ledger, GiB)
    good = ledger[ledger["boot"] == 1]
    good.attrs = ledger.attrs
    # 57.5 − 0.53 GiB (rank 1) − 1 GiB reserve
    assert (
        budget_from_ledger(good, GiB).uniform_budget_bytes
        == parse_size("57.5GiB") - parse_size("0.53GiB") - GiB
    )


def test_mixed_keys_are_refused_field_by_field():
    ledger = ledger_of_texts(
        {
            "a.log": boot_text("0.26.0", [20 * GiB, 19 * GiB]),
            "b.log": boot_text("0.25.0", [20 * GiB, 19 * GiB]),
        }
    )
    with pytest.raises(LedgerError, match=r"vllm_version: '0\.26\.0' in a\.log:1 vs '0\.25\.0' in b\.log:1"):
        compatibility_key(ledger)


def test_repeated_boots_take_each_ranks_worst_room_and_show_the_spread():
    text = (
        boot_text("0.26.0", [20 * GiB, 19 * GiB])
        + boot_text("0.26.0", [18 * GiB, 21 * GiB])
        + boot_text("0.26.0", [22 * GiB, 20 * GiB])
    )
    ledger, _ = read_vllm_log(text, source="r.log")
    assert ledger["boot"].tolist() == [0, 0, 1, 1, 2, 2]
    rooms = room_per_rank(ledger)
    # rank 0: 20, 18, 22 → worst 18 (boot 1), median 20; rank 1: 19, 21, 20 → worst 19 (boot 0)
    assert rooms[
        ["room_bytes", "room_min_bytes", "room_median_bytes", "room_max_bytes", "boots", "boot"]
    ].values.tolist() == [
        [18 * GiB, 18 * GiB, 20 * GiB, 22 * GiB, 3, 1],
        [19 * GiB, 19 * GiB, 20 * GiB, 21 * GiB, 3, 0],
    ]
    # init_free of the worst boot: every boot starts with 70.0 GiB free here
    assert rooms["init_free_bytes"].tolist() == [parse_size("70.0GiB")] * 2
    assert budget_from_ledger(ledger, GiB).uniform_budget_bytes == 17 * GiB  # 18 − 1 on rank 0


def test_a_reserve_larger_than_the_room_names_the_file():
    ledger, _ = read_vllm_log(boot_text("0.26.0", [2 * GiB, 3 * GiB]), source="small.log")
    with pytest.raises(LedgerError, match=r"small\.log:3: rank 0: reserve"):
        budget_from_ledger(ledger, 4 * GiB)


def test_empty_ledger_is_refused():
    ledger, _ = read_vllm_log("nothing to see\n")
    with pytest.raises(LedgerError, match="empty"):
        compatibility_key(ledger)


def test_cli_budget_assume_uniform_on_the_rank0_only_sample(capsys):
    sample = str(DATA_DIR / "boots" / "rank0-only")
    assert main(["budget", sample, "--reserve", "1GiB", "--json"]) == 2
    assert "local rank 0 only" in capsys.readouterr().err
    assert main(["budget", sample, "--reserve", "1GiB", "--assume-uniform", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    # rank 0's room 63.57 GiB stands for rank 1 too; budget = 63.57 − 1 GiB
    assert [rank["room_bytes"] for rank in data["ranks"]] == [parse_size("63.57GiB")] * 2
    assert data["uniform_budget_bytes"] == parse_size("63.57GiB") - GiB
    assert "rank(s) 1 show no room of their own" in captured.err
