"""Ledger checks, worst room per rank, and the budget from logs (library and CLI)."""

import json

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.ledger import LedgerError, LedgerWarning, compatibility_key, room_per_rank
from kvplan.room import budget_from_rooms, read_vllm_log_rooms, read_vllm_logs_rooms, refuse_failed_boots
from kvplan.units import parse_size
from tests.conftest import TESTS_DATA_DIR, GiB, approve_args

LOGS = TESTS_DATA_DIR / "logs"
FOUR_RANK = DATA_DIR / "boots" / "four-rank"
RESERVE = parse_size("0.9GiB")
HEAD = "INFO 08-14 14:07:22 [gpu_worker.py:227] "


def budget_from_ledger(ledger, reserve_bytes, block_bytes=None, assume_uniform=False, lines=None):
    """The uniform budget of a ledger as the pipeline computes it: refusals, worst room per rank, budget."""
    refuse_failed_boots(ledger, lines)
    rooms = room_per_rank(ledger, assume_uniform=assume_uniform, lines=lines)
    return budget_from_rooms(rooms, reserve_bytes, block_bytes, lines)


def boot_text(version, rooms, tp=None):
    """One boot: engine config, then one suggestion line per rank with the given room bytes."""
    tp = tp or len(rooms)
    lines = [
        f"vLLM API server version {version}",
        f"(EngineCore_DP0 pid=9) Initializing a V1 LLM engine (v{version}) with config: model='m', "
        f"tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1",
    ]
    for rank, room in enumerate(rooms):
        # the line adds up (issue 26: the reader refuses a suggestion above what its parts give): weight =
        # free 70.0 − the other parts 2.0 + 1.0 + 0.5 − vLLM's 150 MiB − room, printed to 0.01 GiB
        weight = 70.0 - 3.5 - 150 / 1024 - room / GiB
        lines.append(
            f"(Worker_TP{rank} pid={100 + rank}) {HEAD}Free memory on device (70.0/79.19 GiB) on startup. "
            f"Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is {weight:.2f} GiB for weight, "
            "2.0 GiB "
            "for peak activation, 1.0 GiB for non-torch memory, and 0.5 GiB for CUDAGraph memory. Replace "
            "gpu_memory_utilization config with `--kv-cache-memory=1` (0.0 GiB) to fit into requested "
            "memory, "
            f"or `--kv-cache-memory={room}` ({room / GiB:.2f} GiB) to fully utilize gpu memory. Current kv "
            "cache memory in use is 30.0 GiB."
        )
    # startup completes: without this line the boot is incomplete, and refused
    lines.append(
        f"(EngineCore_DP0 pid=9) {HEAD}init engine (profile, create kv cache, warmup model) took 9.00 seconds"
    )
    return "\n".join(lines) + "\n"


def ledger_of_texts(texts):
    """Several in-memory logs as one ledger, as read_vllm_logs_rooms makes of files."""
    frames = [read_vllm_log_rooms(text, source=name) for name, text in texts.items()]
    ledger = pd.concat([frame for frame, _ in frames], ignore_index=True)
    return ledger, {k: v for _, meta in frames for k, v in meta["lines"].items()}


def test_four_rank_sample_gives_12_gib_with_rank_2_limiting():
    ledger, meta = read_vllm_logs_rooms(FOUR_RANK)
    assert meta["warnings"] == []
    # the sample's rooms are parse_size of 18.8, 17.6, 12.9 and 16.4 GiB (suggested_full, every rank)
    assert ledger["room_bytes"].tolist() == [parse_size(f"{x}GiB") for x in ("18.8", "17.6", "12.9", "16.4")]
    assert ledger["room_source"].tolist() == ["suggestion"] * 4
    budget = budget_from_ledger(ledger, RESERVE, lines=meta.lines)
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
    # issue 24: only the logs show free memory, so only they give the companion utilization (0.61)
    assert from_logs.pop("launch_flags")[1] == "--gpu-memory-utilization=0.61"
    assert from_room.pop("launch_flags") == [from_room["flag"]]
    assert (from_logs.pop("gpu_memory_utilization"), from_room.pop("gpu_memory_utilization")) == (0.61, None)
    assert len(from_room.pop("warnings")) == 1 and from_logs.pop("warnings") == []
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
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.14.0-tp2-rank0-only.log")
    with pytest.raises(LedgerError, match=r"rank0-only\.log:7: the logs show the room of local rank 0 only"):
        budget_from_ledger(ledger, GiB, lines=meta.lines)
    rooms = room_per_rank(ledger, assume_uniform=True, lines=meta.lines)
    assert rooms["room_source"].tolist() == ["available_kv", "assumed_uniform"]
    assert rooms["room_bytes"].tolist() == [parse_size("52.3GiB") - parse_size("0.62GiB")] * 2


def test_missing_rank_is_refused_naming_the_file_and_line(tmp_path):
    ledger, meta = read_vllm_log_rooms(boot_text("0.26.0", [20 * GiB, 19 * GiB], tp=4), source="two.log")
    with pytest.raises(
        LedgerError, match=r"two\.log:1: rank\(s\) 2, 3 missing from boot 0: TP × PP × DP = 4 \(two\.log:2\)"
    ):
        room_per_rank(ledger, lines=meta.lines)


def test_failed_boot_is_refused_naming_the_error_line():
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.9.2-tp2-oom-then-restart.log")
    # rank 1's own OOM (line 8) comes first; rank 0 only carries the API server's error (line 10), said so
    with pytest.raises(
        LedgerError,
        match=r"restart\.log:8: boot 0 rank 1 did not boot cleanly \(oom: torch\.OutOfMemoryError: .*\); "
        r".*restart\.log:10: boot 0 rank 0 did not boot cleanly \(error: not this rank's own failure: "
        r"APIServer failed, at .*restart\.log:10: RuntimeError: Engine core",
    ):
        budget_from_ledger(ledger, GiB, lines=meta.lines)
    good = ledger[ledger["boot"] == 1]
    # 57.5 − 0.53 GiB (rank 1) − 1 GiB reserve
    assert (
        budget_from_ledger(good, GiB, lines=meta.lines).uniform_budget_bytes
        == parse_size("57.5GiB") - parse_size("0.53GiB") - GiB
    )


def test_mixed_keys_are_refused_field_by_field():
    ledger, lines = ledger_of_texts(
        {
            "a.log": boot_text("0.26.0", [20 * GiB, 19 * GiB]),
            "b.log": boot_text("0.25.0", [20 * GiB, 19 * GiB]),
        }
    )
    with pytest.raises(LedgerError, match=r"vllm_version: '0\.26\.0' in a\.log:1 vs '0\.25\.0' in b\.log:1"):
        compatibility_key(ledger, lines)


def test_repeated_boots_take_each_ranks_worst_room_and_show_the_spread():
    text = (
        boot_text("0.26.0", [20 * GiB, 19 * GiB])
        + boot_text("0.26.0", [18 * GiB, 21 * GiB])
        + boot_text("0.26.0", [22 * GiB, 20 * GiB])
    )
    ledger, meta = read_vllm_log_rooms(text, source="r.log")
    assert ledger["boot"].tolist() == [0, 0, 1, 1, 2, 2]
    rooms = room_per_rank(ledger, lines=meta.lines)
    # rank 0: 20, 18, 22 → worst 18 (boot 1), median 20; rank 1: 19, 21, 20 → worst 19 (boot 0)
    assert rooms[
        ["room_bytes", "room_min_bytes", "room_median_bytes", "room_max_bytes", "boots", "boot"]
    ].values.tolist() == [
        [18 * GiB, 18 * GiB, 20 * GiB, 22 * GiB, 3, 1],
        [19 * GiB, 19 * GiB, 20 * GiB, 21 * GiB, 3, 0],
    ]
    # init_free of the worst boot: every boot starts with 70.0 GiB free here
    assert rooms["init_free_bytes"].tolist() == [parse_size("70.0GiB")] * 2
    assert (
        budget_from_ledger(ledger, GiB, lines=meta.lines).uniform_budget_bytes == 17 * GiB
    )  # 18 − 1 on rank 0


def test_a_reserve_larger_than_the_room_names_the_file():
    ledger, meta = read_vllm_log_rooms(boot_text("0.26.0", [2 * GiB, 3 * GiB]), source="small.log")
    with pytest.raises(LedgerError, match=r"small\.log:3: rank 0: reserve"):
        budget_from_ledger(ledger, 4 * GiB, lines=meta.lines)


def test_empty_ledger_is_refused():
    ledger, meta = read_vllm_log_rooms("nothing to see\n")
    with pytest.raises(LedgerError, match="empty"):
        compatibility_key(ledger, meta.lines)


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


def test_oom_sample_refusal_names_the_oom_rank_first_and_the_engines_error_as_the_engines():
    ledger, meta = read_vllm_logs_rooms(DATA_DIR / "boots" / "oom")
    with pytest.raises(LedgerError) as refused:
        budget_from_ledger(ledger, RESERVE, lines=meta.lines)
    first, second = str(refused.value).split("; ", 1)
    # rank 1's own OOM is line 65; rank 0's row holds EngineCore_DP0's RuntimeError of line 84
    assert first.startswith(
        "data/boots/oom/boot.log:65: boot 0 rank 1 did not boot cleanly (oom: ".replace(
            "data/boots", str(DATA_DIR / "boots")
        )
    )
    assert second.startswith(
        f"{DATA_DIR / 'boots' / 'oom' / 'boot.log'}:84: boot 0 rank 0 did not boot cleanly "
        "(error: not this rank's own failure: EngineCore_DP0 failed, at "
    )


def test_an_oom_after_startup_refuses_the_budget():
    # the four-rank sample (87 lines) with Worker_TP2's OOM appended as line 88
    text = (FOUR_RANK / "boot.log").read_text() + (
        "(Worker_TP2 pid=48604) ERROR 11-24 10:31:02 [core.py:900] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB.\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="late.log")
    with pytest.raises(
        LedgerError,
        match=r"^late\.log:88: boot 0 rank 2 did not boot cleanly \(oom: after "
        r"startup completed, at late\.log:88: torch\.OutOfMemoryError",
    ):
        budget_from_ledger(ledger, RESERVE, lines=meta.lines)


def debug_and_info_boots():
    """0.23, TP=2: boot 0 at DEBUG (suggestion 60 GiB on both ranks: 70.0 − 7.52 − 1.65 − 0.15 − 0.53 GiB −
    150 MiB = 59.9935 GiB, within the 0.025 GiB its five printed figures allow), boot 1 at INFO (rank 0's
    'Available KV cache memory: 40.0 GiB' only). Lines: boot 0 is 1–6, boot 1 is 7–11."""

    def boot(debug):
        lines = [
            "vLLM API server version 0.23.0",
            "(EngineCore pid=9) INFO 08-14 14:07:22 [core.py:1] Initializing a V1 LLM engine (v0.23.0) with "
            "config: model='m', tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1",
            f"(Worker_TP0 pid=100) {HEAD}Available KV cache memory: 40.0 GiB",
        ]
        if debug:
            lines += [
                f"(Worker_TP{rank} pid={100 + rank}) {HEAD.replace('INFO', 'DEBUG')}Free memory on device "
                "(70.0/79.19 GiB) on startup. Desired GPU memory utilization is (0.92, 72.85 GiB). Actual usage "
                "is 7.52 GiB for weight, 1.65 GiB for peak activation, 0.15 GiB for non-torch memory, and 0.53 "
                "GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=1` "
                f"(0.0 GiB) to fit into requested memory, or `--kv-cache-memory={60 * GiB}` (60.0 GiB) to fully "
                "utilize gpu memory. Current kv cache memory in use is 40.0 GiB."
                for rank in (0, 1)
            ]
        lines.append(
            "(EngineCore pid=9) INFO 08-14 14:07:30 [core.py:1] init engine (profile, create kv cache, "
            "warmup model) took 8.00 seconds"
        )
        return "\n".join(lines) + "\n"

    return boot(True) + boot(False)


def test_a_boot_lacking_a_ranks_room_is_refused_rather_than_mixed_with_other_boots():
    ledger, meta = read_vllm_log_rooms(debug_and_info_boots(), source="mix.log")
    # boot 1 (from line 7) has rank 0's room (line 9) only; boot 0's suggestion for rank 1 does not fill in
    with pytest.raises(
        LedgerError,
        match=r"^mix\.log:9: the logs show the room of local rank 0 only \(boot 1\); "
        r"rank\(s\) 1 show none",
    ):
        budget_from_ledger(ledger, GiB, lines=meta.lines)
    rooms = room_per_rank(ledger, assume_uniform=True, lines=meta.lines)
    # rank 0: 60 (boot 0 suggestion), 40 (boot 1 available KV; 0.23 subtracts the graph estimate first and no
    # pool line exceeds it, so no correction) → worst 40, spread 20; rank 1: 60 own, 40 assumed in boot 1
    assert rooms[["room_bytes", "room_spread_bytes", "boots", "boot"]].values.tolist() == [
        [40 * GiB, 20 * GiB, 2, 1],
        [40 * GiB, 20 * GiB, 1, 1],
    ]
    assert rooms["room_source"].tolist() == ["available_kv", "assumed_uniform"]


def test_rooms_from_different_evidence_are_named_in_a_warning():
    key = {"model": "m", "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1}
    frame = pd.DataFrame(
        {
            "source": ["a.log"] * 4,
            "boot": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "room_bytes": [20 * GiB, 19 * GiB, 18 * GiB, 21 * GiB],
            "room_source": ["suggestion", "suggestion", "parts", "suggestion"],
            **key,
        }
    )
    # rank 0: 20, 18 → 18 from parts (boot 1); rank 1: 19, 21 → 19 from the suggestion (boot 0)
    with pytest.warns(
        LedgerWarning,
        match=r"different evidence per rank \(rank 0: parts \(a\.log\); "
        r"rank 1: suggestion \(a\.log\)\)",
    ):
        rooms = room_per_rank(frame)
    notes = rooms.attrs["notes"]
    assert rooms["room_bytes"].tolist() == [18 * GiB, 19 * GiB]
    assert len(notes) == 1


def test_a_manual_canary_is_named_not_silently_dropped():
    ledger, meta = read_vllm_logs_rooms(DATA_DIR / "boots" / "drift")
    with pytest.warns(
        LedgerWarning,
        match=r"canary\.log:1: boot 0 is a manual-value boot \(--kv-cache-memory-bytes "
        r"30 GiB\).*`kvplan drift` or `kvplan gate`",
    ):
        budget = budget_from_ledger(ledger, GiB, lines=meta.lines)
    assert budget.uniform_budget_bytes == 30 * GiB  # reference rooms 31 GiB on every rank − 1 GiB


def test_a_failed_boot_without_room_is_refused_by_room_per_rank():
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.9.2-tp2-oom-then-restart.log", source="r.log")
    with pytest.raises(
        LedgerError, match=r"^r\.log:1: boot 0 shows no room on any rank \(rank 0 error, rank 1 oom\)"
    ):
        room_per_rank(ledger, lines=meta.lines)


V019 = DATA_DIR / "boots" / "v0.19-debug" / "boot.log"


def without_key_lines(text):
    """A log with its version, non-default args and engine-config lines cut away."""
    cut = ("vLLM API server version", "non-default args", "with config:")
    return "".join(line for line in text.splitlines(keepends=True) if not any(c in line for c in cut))


def test_logs_without_model_or_layout_refuse_a_budget_and_do_not_merge():
    nokey, nokey_meta = read_vllm_log_rooms(without_key_lines(V019.read_text()), source="nokey.log")
    with pytest.raises(
        LedgerError,
        match=r"^nokey\.log: the logs do not show model, tensor_parallel_size, "
        r"pipeline_parallel_size, data_parallel_size",
    ):
        budget_from_ledger(nokey, GiB, lines=nokey_meta.lines)
    reference, reference_meta = read_vllm_log_rooms(
        DATA_DIR / "boots" / "drift" / "reference.log", source="ref.log"
    )
    merged = pd.concat([reference, nokey], ignore_index=True)
    lines = {**reference_meta.lines, **nokey_meta.lines}
    with pytest.raises(
        LedgerError, match=r"model: '.*' shown, but not logged in nokey\.log boot 0 \(nokey\.log:\d+\)"
    ):
        compatibility_key(merged, lines)


def test_non_default_args_without_a_size_mean_size_one():
    text = (
        "(APIServer pid=1) INFO 08-14 14:00:01 [utils.py:1] non-default args: {'model': 'm'}\n"
        f"{HEAD}Available KV cache memory: 5.0 GiB\n"
    )
    ledger, _ = read_vllm_log_rooms(text)
    # vLLM lists only what differs from the defaults: no tensor_parallel_size there means TP = 1
    assert ledger.loc[
        0, ["tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"]
    ].tolist() == [1, 1, 1]


def test_cli_ledger_rooms_shows_each_ranks_spread(tmp_path, capsys):
    log = tmp_path / "r.log"
    log.write_text(boot_text("0.26.0", [20 * GiB, 19 * GiB]) + boot_text("0.26.0", [18 * GiB, 21 * GiB]))
    assert main(["ledger", str(log), "--rooms", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"rows", "warnings", "rooms"}
    # rank 0: 20, 18 → worst 18 (boot 1), spread 2; rank 1: 19, 21 → worst 19 (boot 0), spread 2
    assert [
        (r["rank"], r["room_bytes"], r["room_max_bytes"], r["room_spread_bytes"], r["boot"])
        for r in data["rooms"]
    ] == [(0, 18 * GiB, 20 * GiB, 2 * GiB, 1), (1, 19 * GiB, 21 * GiB, 2 * GiB, 0)]
    assert main(["ledger", str(log), "--rooms"]) == 0
    assert (
        "spread" in capsys.readouterr().out.splitlines()[-3].split()
    )  # the --rooms header (issue 27: short)
    assert main(["ledger", str(log), "--rooms", "--wide"]) == 0
    assert "room_spread_bytes" in capsys.readouterr().out
    assert main(["ledger", str(log), "--assume-uniform"]) == 2


def test_an_oom_after_startup_is_refused_by_approve_and_fails_the_gate(tmp_path, capsys):
    # the four-rank sample (87 lines) with Worker_TP2's serving OOM appended as line 88
    late = tmp_path / "late.log"
    late.write_text(
        (FOUR_RANK / "boot.log").read_text()
        + (
            "(Worker_TP2 pid=48604) ERROR 11-24 10:31:02 [core.py:900] torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB.\n"
        )
    )
    out = tmp_path / "evidence"
    assert main(["approve", str(late), "--reserve", "0.9GiB", "--approver", "t", "--out", str(out)]) == 2
    assert (
        f"{late}:88: boot 0 rank 2 did not boot cleanly (oom: after startup completed"
        in capsys.readouterr().err
    )
    assert main(approve_args(out, "--json")) == 0
    bundle = json.loads(capsys.readouterr().out)["bundle"]
    assert main(["gate", "--approved", bundle, str(late)]) == 1
    assert f"rank 2: oom: after startup completed, at {late}:88" in capsys.readouterr().out
