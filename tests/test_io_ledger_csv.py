"""Ledger CSVs: `kvplan ledger --csv` output reads back, a hand-made CSV works, bad ones are refused.

The sample data/manual/four-rank-rooms.csv is the founding example typed by hand (data/README.md): ranks 0–3
with room 18.8, 17.6, 12.9 and 16.4 GiB as sizes, room_source manual, Llama-3.1-70B-Instruct at TP 4, PP 1,
DP 1.
"""

import json

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.columns import LEDGER_COLUMNS
from kvplan.io import LedgerCsvError
from kvplan.room import read_ledger_csv_rooms, read_vllm_log_rooms, read_vllm_logs_rooms
from kvplan.units import parse_size
from tests.conftest import GiB

FOUR_RANK_LOG = DATA_DIR / "boots" / "four-rank" / "boot.log"
ROOMS = DATA_DIR / "manual" / "four-rank-rooms.csv"
HEADER = "rank,room_bytes,model,tensor_parallel_size,pipeline_parallel_size,data_parallel_size,outcome\n"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def write(tmp_path, text, name="ledger.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_round_trip_of_kvplan_ledger_csv(capsys, tmp_path):
    assert main(["ledger", str(FOUR_RANK_LOG), "--csv"]) == 0
    path = write(tmp_path, capsys.readouterr().out)
    expected, _ = read_vllm_log_rooms(FOUR_RANK_LOG, source=str(FOUR_RANK_LOG))
    ledger, meta = read_ledger_csv_rooms(path)
    pd.testing.assert_frame_equal(ledger, expected)  # values and dtypes, column order included
    assert meta["warnings"] == []
    # provenance: the CSV file and its line for every value read
    assert set(meta["provenance"]["source"]) == {str(path)}
    assert meta["provenance"].query("rank == 2 and column == 'room_bytes'")["line"].tolist() == [4]
    # read_vllm_logs_rooms dispatches on .csv, given directly or matched by a glob
    for given in (path, str(tmp_path / "*.csv"), [path]):
        again, _ = read_vllm_logs_rooms(given)
        pd.testing.assert_frame_equal(again, expected)


def test_every_sample_log_round_trips(tmp_path):
    for log in sorted((DATA_DIR / "boots").glob("*/*.log")):
        expected, _ = read_vllm_log_rooms(log)
        path = tmp_path / f"{log.parent.name}-{log.stem}.csv"
        expected.to_csv(path, index=False)
        pd.testing.assert_frame_equal(read_ledger_csv_rooms(path)[0], expected, obj=str(log))


def test_sample_csv_budget_is_the_founding_example(capsys):
    assert main(["budget", str(ROOMS), "--reserve", "0.9GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # rank 2: 12.9 GiB − 0.9 GiB = parse_size("12.9GiB") − parse_size("0.9GiB")
    #       = 13,851,269,530 − 966,367,642 = 12,884,901,888 B = 12 × 2^30 = 12 GiB exactly
    assert data["uniform_budget_bytes"] == 12_884_901_888 == 12 * GiB
    assert data["limiting_rank"] == 2
    assert data["flag"] == "--kv-cache-memory-bytes=12884901888"
    assert [rank["room_bytes"] for rank in data["ranks"]] == [
        parse_size(size) for size in ("18.8GiB", "17.6GiB", "12.9GiB", "16.4GiB")
    ]
    assert {rank["room_source"] for rank in data["ranks"]} == {"manual"}
    assert len(data["warnings"]) == 2 and "states no outcome" in data["warnings"][0]
    # issue 24: the CSV shows no free memory, so no companion --gpu-memory-utilization: a warning says so
    assert "memory.free,memory.total" in data["warnings"][1] and data["gpu_memory_utilization"] is None


def test_sample_csv_ledger_and_metadata():
    ledger, meta = read_vllm_logs_rooms(str(ROOMS))
    assert list(ledger.columns) == LEDGER_COLUMNS
    assert ledger["source"].tolist() == [str(ROOMS)] * 4 and ledger["boot"].tolist() == [0] * 4
    assert ledger["outcome"].tolist() == ["ok"] * 4
    assert str(ledger["room_bytes"].dtype) == "Int64" and ledger["init_free_bytes"].isna().all()
    assert meta["boots"][0]["compatibility_key"]["model"] == MODEL
    assert meta["boots"][0]["ranks"] == [0, 1, 2, 3]
    assert meta["lines"][(str(ROOMS), 0, 2, "room_bytes")] == 4
    assert meta["warnings"] == [
        f"{ROOMS}:2: the CSV states no outcome for 4 row(s) (line(s) 2, 3, 4, 5): a row with a room is "
        "taken as ok (the rank booted), one without as incomplete; add an 'outcome' column (ok, oom, error, "
        "incomplete) to state it"
    ]
    raw = meta["provenance"].query("rank == 2 and column == 'room_bytes'")
    assert raw[["line", "value", "raw"]].values.tolist() == [
        [4, parse_size("12.9GiB"), f"2,12.9GiB,manual,{MODEL},4,1,1,0.26.0"]
    ]


def test_room_computed_from_parts_without_a_room_column(tmp_path):
    # no room_bytes column: the room is computed as the log reader does (suggestion first, else the parts:
    # init_free − (weights + activation + non-torch + graphs) − 150 MiB = 40 − 30 − 150 MiB)
    path = write(
        tmp_path,
        "rank,suggested_full_bytes,init_free_bytes,weights_bytes,activation_peak_bytes,"
        "non_torch_bytes,cuda_graph_bytes,outcome\n"
        "0,20GiB,,,,,,ok\n1,,40GiB,25GiB,3GiB,1GiB,1GiB,ok\n",
    )
    ledger, _ = read_ledger_csv_rooms(path)
    assert ledger["room_bytes"].tolist() == [20 * GiB, 10 * GiB - parse_size("150MiB")]
    assert ledger["room_source"].tolist() == ["suggestion", "parts"]


ROW = f"{MODEL},4,1,1"


@pytest.mark.parametrize(
    "text, expected",
    [
        # an unknown column: the file, the header line, the column and the closest glossary names
        (
            "rank,room_byte,tensor_paralel_size\n0,12GiB,4\n",
            "{path}:1: unknown column 'room_byte': not a ledger glossary name (closest glossary names: room_bytes, "
            "total_bytes, room_source)",
        ),
        # a size parse_size does not accept: the file, the line and the column
        (
            HEADER + f"0,12GiB,{ROW},ok\n1,twelve,{ROW},ok\n",
            "{path}:3: column 'room_bytes': not a size: 'twelve' (expected e.g. 12GiB, 512MiB, 12GB, 12G or bytes)",
        ),
        # a row without rank: the file and the line
        (
            HEADER + f"0,12GiB,{ROW},ok\n,12GiB,{ROW},ok\n",
            "{path}:3: no rank: every row of a ledger CSV is one rank (column 'rank')",
        ),
        # no rank column at all: the header line
        (
            "room_bytes\n12GiB\n",
            "{path}:1: no 'rank' column: a ledger CSV has one row per rank, numbered in column 'rank'",
        ),
        # an outcome that is not one of OUTCOMES: the file, the line and the column
        (
            HEADER + f"0,12GiB,{ROW},fine\n",
            "{path}:2: column 'outcome': 'fine' is not an outcome (one of ok, oom, error, incomplete)",
        ),
        # a room_source that is not one of ROOM_SOURCES
        (
            "rank,room_bytes,room_source\n0,12GiB,guessed\n",
            "{path}:2: column 'room_source': 'guessed' is not a room source (one of suggestion, available_kv, "
            "parts, manual)",
        ),
    ],
    ids=[
        "unknown-column",
        "bad-size",
        "row-without-rank",
        "no-rank-column",
        "bad-outcome",
        "bad-room-source",
    ],
)
def test_bad_csv_is_a_one_line_error_naming_file_and_line(capsys, tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(LedgerCsvError) as info:
        read_ledger_csv_rooms(path)
    assert str(info.value) == expected.format(path=path)
    assert main(["budget", str(path), "--reserve", "0.9GiB"]) == 2
    assert capsys.readouterr().err == f"error: {expected.format(path=path)}\n"


def test_row_without_outcome_or_room_is_incomplete_and_refused(capsys, tmp_path):
    header = "rank,room_bytes,model,tensor_parallel_size,pipeline_parallel_size,data_parallel_size\n"
    path = write(tmp_path, header + f"0,12GiB,{MODEL},2,1,1\n1,,{MODEL},2,1,1\n")
    ledger, meta = read_ledger_csv_rooms(path)
    assert ledger["outcome"].tolist() == ["ok", "incomplete"]
    assert "states no outcome for 2 row(s)" in meta["warnings"][0]
    assert main(["budget", str(path), "--reserve", "1GiB"]) == 2
    assert f"{path}:3: boot 0 rank 1 did not boot cleanly" in capsys.readouterr().err


def test_nvidia_smi_snapshot_given_as_log_points_to_the_flag(capsys):
    snapshot = DATA_DIR / "boots" / "four-rank" / "nvidia-smi-gpu.csv"
    assert main(["ledger", str(snapshot)]) == 2
    err = capsys.readouterr().err
    assert "an nvidia-smi snapshot" in err and f"--nvidia-smi {snapshot}" in err


def test_approve_and_verify_with_the_csv(capsys, tmp_path):
    approved = json.loads(
        _run(
            capsys,
            "approve",
            str(ROOMS),
            "--reserve",
            "0.9GiB",
            "--approver",
            "t",
            "--out",
            str(tmp_path / "evidence"),
            "--json",
        )
    )
    assert approved["decision"]["flag"] == "--kv-cache-memory-bytes=12884901888"
    bundle = approved["bundle"]
    record = json.loads((tmp_path / "evidence" / bundle.split("/")[-1] / "budget.json").read_text())
    assert [(entry["bundle_path"], entry["role"]) for entry in record["inputs"]] == [
        ("inputs/four-rank-rooms.csv", "log")
    ]
    assert (
        "inputs/four-rank-rooms.csv:4"
        in (tmp_path / "evidence" / bundle.split("/")[-1] / "evidence.log").read_text()
    )
    assert main(["verify", bundle, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["ok"], data["differences"]) == (True, [])


def _run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_rank_twice_in_one_boot_names_both_lines(tmp_path):
    path = write(tmp_path, HEADER + f"0,12GiB,{ROW},ok\n0,13GiB,{ROW},ok\n")
    expected = rf"^{path}:3: rank 0 of {path} boot 0 already has a row \(line 2\)$"
    with pytest.raises(LedgerCsvError, match=expected):
        read_ledger_csv_rooms(path)


def test_a_folder_still_reads_its_logs_only(tmp_path):
    write(tmp_path, HEADER + f"0,12GiB,{ROW},ok\n")
    with pytest.raises(FileNotFoundError, match="no log files"):
        read_vllm_logs_rooms(tmp_path)
