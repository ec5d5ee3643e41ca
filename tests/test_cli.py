"""The foundation commands keep their contract: flags, JSON keys, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.units import parse_size
from tests.conftest import SAMPLE_LOG, GiB, approve_args


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_budget_four_rank_example(capsys):
    data = run_json(capsys, "budget", "--room", "18.8GiB,17.6GiB,12.9GiB,16.4GiB", "--reserve", "0.9GiB")
    assert data["uniform_budget_bytes"] == 12 * GiB  # min(17.9, 16.7, 12.0, 15.5) GiB
    assert data["limiting_rank"] == 2
    assert data["allocated_total_bytes"] == 48 * GiB
    # stranded = Σ safe − 48 GiB, with safe = room − 0.9 GiB each (parse_size to the nearest byte)
    safe = [parse_size(f"{g}GiB") - parse_size("0.9GiB") for g in ("18.8", "17.6", "12.9", "16.4")]
    assert data["stranded_total_bytes"] == sum(safe) - 48 * GiB
    assert data["min_safe_bytes"] == 12 * GiB
    assert data["max_safe_bytes"] == safe[0]
    assert data["median_safe_bytes"] == (safe[3] + safe[1]) // 2  # middle of 12.0, 15.5, 16.7, 17.9
    assert data["min_median_ratio"] == pytest.approx(12 * GiB / ((safe[3] + safe[1]) // 2))
    assert data["flag"] == "--kv-cache-memory-bytes=12884901888"
    assert data["ranks"][2] == {
        "rank": 2,
        "room_bytes": parse_size("12.9GiB"),
        "safe_bytes": 12 * GiB,
        "stranded_bytes": 0,
        "room_source": "given",
    }
    # issue 24: rooms by hand show no free memory, so only the byte flag, and a warning says what to measure
    assert data["launch_flags"] == ["--kv-cache-memory-bytes=12884901888"]
    assert data["gpu_memory_utilization"] is None
    assert len(data["warnings"]) == 1 and "memory.free,memory.total" in data["warnings"][0]


def test_budget_weak_rank_removes_a_third(capsys):
    # rooms 13, 19, 20 GiB − 1 GiB reserve → safe 12, 18, 19 GiB; min/median = 12/18 = 2/3
    data = run_json(capsys, "budget", "--room", "13GiB,19GiB,20GiB", "--reserve", "1GiB")
    assert (data["min_safe_bytes"], data["median_safe_bytes"]) == (12 * GiB, 18 * GiB)
    assert data["min_median_ratio"] == pytest.approx(2 / 3)
    assert data["weak_rank_loss_fraction"] == pytest.approx(1 / 3)


def test_budget_weakest_rank_after_capture_before_rounding(capsys):
    # 13.1 GiB room − 1 GiB reserve = 12.1 GiB, no block rounding asked for
    data = run_json(capsys, "budget", "--room", "13.1GiB,20GiB", "--reserve", "1GiB")
    assert data["uniform_budget_bytes"] == parse_size("12.1GiB") == 12_992_276_070


def test_budget_block_bytes_rounds_down(capsys):
    # 12.1 GiB = 12,992,276,070 B; 3,097 blocks of 4 MiB = 12,989,759,488 B
    data = run_json(capsys, "budget", "--room", "13.1GiB", "--reserve", "1GiB", "--block-bytes", "4194304")
    assert data["uniform_budget_bytes"] == 12_989_759_488


def test_budget_table(capsys):
    assert main(["budget", "--room", "18.8GiB,17.6GiB,12.9GiB,16.4GiB", "--reserve", "0.9GiB"]) == 0
    out = capsys.readouterr().out
    assert "--kv-cache-memory-bytes=12884901888" in out
    assert "14.1 GiB" in out
    assert "12 GiB per GPU (limiting rank 2)" in out


def test_capacity(capsys):
    data = run_json(
        capsys, "capacity", "--kv-bytes", "12GiB", "--bytes-per-token", "256KiB", "--max-model-len", "8192"
    )
    # 12 GiB / (16 × 256 KiB) = 3,072 blocks = 49,152 tokens = 6 sequences of 8,192
    keys = ("bytes_per_token", "block_bytes", "blocks", "tokens", "max_concurrency")
    assert {k: data[k] for k in keys} == {
        "bytes_per_token": 262_144,
        "block_bytes": 4_194_304,
        "blocks": 3_072,
        "tokens": 49_152,
        "max_concurrency": 6.0,
    }


def test_drift(capsys):
    data = run_json(
        capsys,
        "drift",
        "--ref-free",
        "42GiB",
        "--ref-budget",
        "30GiB",
        "--boot-free",
        "40.75GiB",
        "--guard",
        "0.5GiB",
    )
    # 30 − (42 − 40.75) − 0.5 = 28.25 GiB
    assert data["uniform_budget_bytes"] == parse_size("28.25GiB")
    assert data["reprofile_to_raise"] is False
    assert data["ranks"] == [
        {"rank": 0, "drift_bytes": parse_size("1.25GiB"), "adjusted_bytes": parse_size("28.25GiB")}
    ]


def test_drift_per_rank_lists(capsys):
    # no guard (0GiB given: the guard is policy and never defaulted): rank 2 loses 42 − 40.6 = 1.4 GiB
    data = run_json(
        capsys,
        "drift",
        "--ref-free",
        "42GiB",
        "--ref-budget",
        "30GiB",
        "--boot-free",
        "41.8GiB,42.1GiB,40.6GiB,41.9GiB",
        "--guard",
        "0GiB",
    )
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2, 3]
    assert data["limiting_rank"] == 2
    assert data["reprofile_to_raise"] is True  # rank 1 has 0.1 GiB more than at reference


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["budget", "--room", "12GiB,abc", "--reserve", "1GiB"], "'abc'"),
        (["budget", "--room", "12GiB,13GiB", "--reserve", "12.5GiB"], "rank 0"),
        (["budget", "--room", "", "--reserve", "1GiB"], "empty"),
        (
            [
                "drift",
                "--ref-free",
                "42GiB,41GiB",
                "--ref-budget",
                "30GiB",
                "--boot-free",
                "1GiB,2GiB,3GiB",
                "--guard",
                "0GiB",
            ],
            "differ in length",
        ),
        (["drift", "--ref-free", "42GiB", "--ref-budget", "30GiB", "--boot-free", "40GiB"], "--guard"),
        (["budget", "--room=12GiB,-3GiB", "--reserve", "1GiB"], "entry 1 of '12GiB,-3GiB' is negative"),
        # Llama-3.1-8B at TP 1 × PP 3 runs 3 ranks per replica: 2 rooms cannot be that layout
        (
            [
                "budget",
                "--room",
                "13GiB,13GiB",
                "--reserve",
                "1GiB",
                "--model",
                "llama-3.1-8b",
                "--tp",
                "1",
                "--pp",
                "3",
                "--max-model-len",
                "8192",
            ],
            "--room gives 2 rank(s), but --tp 1 × --pp 3 = 3",
        ),
        (
            [
                "capacity",
                "--kv-bytes",
                "12GiB",
                "--bytes-per-token",
                "256KiB",
                "--max-model-len",
                "8192",
                "--tp",
                "4",
                "--kv-cache-dtype",
                "fp8",
            ],
            "--tp, --kv-cache-dtype describe the model's layout",
        ),
        (
            ["budget", "--room", "13GiB", "--reserve", "1GiB", "--block-size", "16"],
            "--block-size needs --model",
        ),
        (
            ["capacity", "--model", "llama-3.1-8b", "--tp", "1", "--max-model-len", "8192", "--kv-bytes=-1"],
            "must be positive",
        ),
        (
            [
                "capacity",
                "--model",
                "llama-3.1-70b",
                "--tp",
                "4",
                "--block-size",
                "7",
                "--kv-bytes",
                "12GiB",
                "--max-model-len",
                "8192",
            ],
            "7 is not a block size vLLM accepts (1, 8, 16, 32, 64, 128, 256)",
        ),
        (
            [
                "capacity",
                "--model",
                "llama-3.1-70b",
                "--tp",
                "4",
                "--vllm-version",
                "0.4.0",
                "--kv-bytes",
                "12GiB",
                "--max-model-len",
                "8192",
            ],
            "from 0.5.0 on",
        ),
        # 1 GiB − (42 − 30) GiB − 0.5 GiB = −11.5 GiB: no budget left, never a negative flag
        (
            [
                "drift",
                "--ref-free",
                "42GiB",
                "--ref-budget",
                "1GiB",
                "--boot-free",
                "30GiB",
                "--guard",
                "0.5GiB",
            ],
            "rank 0: the lost startup free memory and the guard leave no KV budget (adjusted -11.5 GiB",
        ),
        (["budget", "--room", "13GiB", "--reserve", "1GiB", "--block-bytes", "0"], "must be positive"),
        (
            ["capacity", "--kv-bytes", "1KiB", "--bytes-per-token", "256KiB", "--max-model-len", "8192"],
            "holds no block",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exc_info:
        status = main(argv)
        raise SystemExit(status)
    assert exc_info.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert err.startswith("error: ")
    assert err.count("\n") == 1  # one line, no usage dump, no traceback


def test_python_dash_m_runs_as_a_process():
    result = subprocess.run(
        [sys.executable, "-m", "kvplan", "budget", "--room", "12GiB,abc", "--reserve", "1GiB"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "error:" in result.stderr
    assert "Traceback" not in result.stderr


FOUR_RANK = DATA_DIR / "boots" / "four-rank"


def test_budget_from_logs_with_model_rounds_to_blocks_and_reports_tokens(capsys):
    data = run_json(
        capsys,
        "budget",
        f"{FOUR_RANK}/boot.log",
        "--reserve",
        "0.9GiB",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "4",
    )
    # Llama-3.1-70B at TP 4: 2 KV heads × 128 × 2 (K and V) × 2 B = 1,024 B per token per layer;
    # × 80 layers × 16 tokens = 1,310,720 B per block. 12 GiB // 1,310,720 = 9,830 blocks
    # = 12,884,377,600 B (512 KiB below 12 GiB).
    assert data["block_bytes"] == 1_310_720
    assert data["num_blocks"] == 9_830
    assert data["uniform_budget_bytes"] == 12_884_377_600
    assert data["rounding_loss_bytes"] == 12 * GiB - 12_884_377_600 == 512 * 1024
    # vLLM 0.26 (the logs' release): concurrency = 9,830 / ceil(32,768 / 16) = 4.7998…;
    # tokens = int(4.7998046875 × 32,768) = 157,280
    assert data["capacity"]["tokens"] == 157_280
    assert data["capacity"]["max_concurrency"] == pytest.approx(9_830 / 2_048)


def test_budget_model_and_block_bytes_conflict(capsys):
    status = main(
        [
            "budget",
            f"{FOUR_RANK}/boot.log",
            "--reserve",
            "0.9GiB",
            "--model",
            "llama-3.1-70b",
            "--tp",
            "4",
            "--block-bytes",
            "4096",
        ]
    )
    assert status == 2
    assert "not both" in capsys.readouterr().err


def test_budget_model_with_a_tp_the_logs_contradict(capsys):
    status = main(
        ["budget", f"{FOUR_RANK}/boot.log", "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "8"]
    )
    assert status == 2
    assert "tensor_parallel_size 4" in capsys.readouterr().err


def test_ledger_joins_nvidia_smi_snapshots(capsys):
    data = run_json(
        capsys,
        "ledger",
        f"{FOUR_RANK}/boot.log",
        "--nvidia-smi",
        f"{FOUR_RANK}/nvidia-smi-gpu.csv",
        "--nvidia-smi",
        f"{FOUR_RANK}/nvidia-smi-apps.csv",
    )
    rank2 = next(row for row in data["rows"] if row["rank"] == 2)
    assert rank2["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert rank2["driver_version"] == "580.95.05"
    # GPU 2 also holds the sidecar server's worker (24,643 MiB) and a notebook (6,032 MiB)
    assert rank2["other_process_bytes"] == (24_643 + 6_032) * 1024 * 1024


def test_budget_warns_that_old_releases_have_no_flag(capsys):
    data = run_json(capsys, "budget", str(DATA_DIR / "boots" / "v0-three-line"), "--reserve", "0.9GiB")
    assert any("vLLM 0.6.6.post1 has no --kv-cache-memory-bytes" in w for w in data["warnings"])


def test_ledger_refuses_an_nvidia_smi_snapshot_of_another_launch(capsys):
    # the four-rank snapshot's pids (31877…52388) hold none of the v0.19-debug boot's workers (412, 413)
    status = main(
        [
            "ledger",
            str(DATA_DIR / "boots" / "v0.19-debug" / "boot.log"),
            "--nvidia-smi",
            str(FOUR_RANK / "nvidia-smi-gpu.csv"),
            "--nvidia-smi",
            str(FOUR_RANK / "nvidia-smi-apps.csv"),
        ]
    )
    assert status == 2
    assert "none of the logged vLLM pids (412, 413)" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"Name,Value\n1,2\n"])
def test_ledger_of_a_file_without_vllm_lines_exits_2_with_one_line(capsys, tmp_path, content):
    path = tmp_path / "not-a-log.txt"
    path.write_bytes(content)
    assert main(["ledger", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: no vLLM boot found: expected vLLM startup lines such as ")
    assert err.count("\n") == 1


def test_budget_reports_the_ledger_warnings_once_and_in_the_json(capsys, recwarn):
    # data/boots/drift holds a profiled reference boot and a manual-value canary: the canary is
    # not room evidence, which the ledger says once (a warning), the reference alone sets the budget.
    data = run_json(capsys, "budget", str(DATA_DIR / "boots" / "drift"), "--reserve", "1GiB")
    manual = [w for w in data["warnings"] if "canary.log" in w and "manual" in w]
    assert len(manual) == 1
    assert not [w for w in recwarn if "LedgerWarning" in w.category.__name__]  # no raw Python warning
    assert main(["budget", str(DATA_DIR / "boots" / "drift"), "--reserve", "1GiB"]) == 0
    err = capsys.readouterr().err
    assert err.count(manual[0]) == 1 and "LedgerWarning" not in err


def test_approve_says_when_its_guard_fails_the_approved_boot_and_what_to_run(capsys, tmp_path):
    # issue 24 (review): four-rank at 0.9 GiB reserve: rank 2's safe budget is exactly the approved 12 GiB (no
    # --model, so no rounding), 0 B above it, so a recorded guard > 0 fails a gate of this very boot (the gate's
    # own rule says so at approval, with the next step)
    assert main(approve_args(tmp_path, "--guard", "0.5GiB")) == 0
    err = capsys.readouterr().err
    assert (
        "warning: with --guard 512 MiB, recorded as kvplan gate's default, the approved boot itself fails the gate "
        "(its weakest rank keeps nothing above the approved value); next: approve again with --guard 0 and give "
        "canaries their guard with kvplan gate --guard"
    ) in err
    (bundle,) = tmp_path.iterdir()
    assert main(["gate", "--approved", str(bundle), str(SAMPLE_LOG)]) == 1  # what it says: the gate fails
    capsys.readouterr()
    assert main(approve_args(tmp_path / "again", "--guard", "0GiB")) == 0  # the next step it names
    assert "approved boot itself fails" not in capsys.readouterr().err


def test_verify_of_a_renamed_bundle_exits_0_with_the_name_as_a_note(capsys, tmp_path):
    assert main(approve_args(tmp_path / "evidence")) == 0
    capsys.readouterr()
    (bundle,) = (tmp_path / "evidence").iterdir()
    renamed = bundle.rename(tmp_path / "CHG-1234")
    assert main(["verify", str(renamed), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["ok"], data["differences"]) == (True, [])
    assert len(data["notes"]) == 1 and bundle.name in data["notes"][0]
    assert main(["verify", str(renamed)]) == 0
    assert "  note: " in capsys.readouterr().out


def test_verify_of_two_bundles_says_it_takes_one(capsys, tmp_path):
    # issue 25: `kvplan verify evidence/*/` said "error: kvplan: unrecognized arguments: evidence/…/"
    assert main(approve_args(tmp_path / "evidence")) == 0
    assert main(approve_args(tmp_path / "evidence", "--note", "second")) == 0  # a second bundle
    capsys.readouterr()
    bundles = sorted(map(str, (tmp_path / "evidence").iterdir()))
    assert len(bundles) == 2
    assert main(["verify", *bundles]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: verify takes one bundle, 2 were given ({', '.join(bundles)}): run kvplan verify once per bundle\n"
    )
    assert main(["verify", bundles[0]]) == 0  # one bundle verifies as before


def test_approve_with_nvidia_smi_then_gate_compares_the_gpu_type(capsys, tmp_path):
    snapshots = [
        "--nvidia-smi",
        str(FOUR_RANK / "nvidia-smi-gpu.csv"),
        "--nvidia-smi",
        str(FOUR_RANK / "nvidia-smi-apps.csv"),
    ]
    approved = run_json(capsys, *approve_args(tmp_path / "evidence", *snapshots))
    # with both snapshots the only note left is the missing model (no block rounding, no capacity table)
    assert [w.split(":")[0] for w in approved["warnings"]] == ["no --model"]
    bundle = approved["bundle"]
    record = json.loads((Path(bundle) / "budget.json").read_text())
    assert record["compatibility_key"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert [entry["role"] for entry in record["inputs"]] == ["log", "nvidia-smi", "nvidia-smi"]
    assert main(["verify", bundle]) == 0
    capsys.readouterr()

    def key_check(*argv):
        status = main(["gate", "--approved", bundle, str(FOUR_RANK / "boot.log"), *argv, "--json"])
        checks = json.loads(capsys.readouterr().out)["checks"]
        return status, next(check for check in checks if check["name"] == "compatibility key")

    # the approved boot with its own snapshots: 16 key fields (cudagraph_mode too) shown and equal; the block
    # size is the reader's default on both sides, so not compared (issue 25: never counted among the unchanged)
    status, check = key_check(*snapshots)
    assert (status, check["passed"], check["detail"]) == (
        0,
        True,
        "16 fields unchanged; not shown on either side (not compared): block_size",
    )
    # the same boot on another GPU type with the same memory.total (81,559 MiB): the key fails on gpu_name
    other = tmp_path / "nvidia-smi-gpu.csv"
    other.write_text((FOUR_RANK / "nvidia-smi-gpu.csv").read_text().replace("H100 80GB HBM3", "H100 NVL"))
    # issue 24: a canary of another key is no evidence of the approved launch: cannot judge (exit 2)
    status, check = key_check("--nvidia-smi", str(other), *snapshots[2:])
    assert (status, check["passed"]) == (2, None)
    assert check["detail"] == (
        "cannot judge: gpu_name: approved NVIDIA H100 80GB HBM3, boot NVIDIA H100 NVL; not shown on either "
        "side (not compared): block_size"
    )
    # without snapshots the canary shows neither field the approval recorded: the gate cannot judge
    # the GPU type (exit 2) rather than pass a canary that may run on other GPUs
    status, check = key_check()
    assert (status, check["passed"]) == (2, None)
    assert check["detail"].startswith(
        "the approval recorded driver_version, gpu_name, which this boot does not show (for gpu_name and "
        "driver_version, give the canary's --nvidia-smi snapshots); 14 fields unchanged"
    )


def test_approve_takes_the_tp_from_the_logs_and_records_the_catalogue_model_by_relative_path(
    capsys, tmp_path, monkeypatch
):
    # the four-rank log shows tensor_parallel_size 4: Llama-3.1-70B's block is 1,310,720 B at TP 4 and
    # 12 GiB // 1,310,720 B = 9,830 blocks, as with --tp 4
    monkeypatch.chdir(DATA_DIR.parent)
    assert (
        main(
            [
                "approve",
                "data/boots/four-rank/boot.log",
                "--reserve",
                "0.9GiB",
                "--model",
                "llama-3.1-70b",
                "--approver",
                "t",
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["decision"]["flag"] == "--kv-cache-memory-bytes=12884377600"
    record = json.loads((tmp_path / Path(data["bundle"]).name / "budget.json").read_text())
    assert [entry["path"] for entry in record["inputs"]] == [
        "data/boots/four-rank/boot.log",
        "kvplan/models/llama-3.1-70b.json",
    ]


def test_approve_beside_a_budget_json_that_is_not_a_bundle(capsys, tmp_path, monkeypatch):
    # `kvplan budget --json > budget.json` in a project folder does not make that folder a bundle
    monkeypatch.chdir(tmp_path)
    assert main(["budget", "--room", "13GiB", "--reserve", "1GiB", "--json"]) == 0
    (tmp_path / "budget.json").write_text(capsys.readouterr().out)
    assert main(approve_args("evidence")) == 0


def test_approve_refuses_layout_flags_without_a_model(capsys, tmp_path):
    assert main(approve_args(tmp_path, "--tp", "2", "--block-size", "32")) == 2
    assert "--tp, --block-size describe the model's layout" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        # Llama-3.1-8B at TP 1: 32 layers × 2 × 8 heads × 128 × 2 B = 131,072 B a token; × 16 = 2 MiB a block
        (["--kv-bytes", "1MiB"], "--kv-bytes 1 MiB holds no block of 2 MiB (16 tokens)"),
    ],
)
def test_capacity_with_a_model_refuses_a_budget_without_a_block(capsys, argv, fragment):
    assert main(["capacity", "--model", "llama-3.1-8b", "--tp", "1", "--max-model-len", "8192", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_an_unknown_model_config_is_named_once_with_its_json_suffix(capsys):
    assert (
        main(
            [
                "capacity",
                "--model",
                "nonexist.json",
                "--tp",
                "1",
                "--kv-bytes",
                "1GiB",
                "--max-model-len",
                "8192",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "no catalogue entry nonexist.json in" in err


def test_approve_says_what_the_bundle_lacks_without_model_and_snapshots(capsys, tmp_path):
    data = run_json(capsys, *approve_args(tmp_path))
    assert [w.split(":")[0] for w in data["warnings"]] == ["no --model", "no --nvidia-smi"]


def test_a_number_too_large_for_the_ledger_exits_2_with_one_line(capsys, tmp_path):
    # a rank of 10**26 in a log cannot be held by the ledger's 64-bit integers
    log = tmp_path / "big-rank.log"
    log.write_text(
        (DATA_DIR / "boots" / "drift" / "reference.log")
        .read_text()
        .replace("TP rank 2", "TP rank 99999999999999999999999999")
    )
    assert main(["budget", str(log), "--reserve", "1GiB"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


# issue 27: the ledger's default table fits a 120-column terminal (with ~20 to spare for one more
# column), whatever the path of the logs; --wide shows every column that has a value and whole paths
@pytest.mark.parametrize("folder", sorted(path.name for path in (DATA_DIR / "boots").iterdir()))
def test_ledger_table_fits_120_columns_even_under_a_long_path(folder, capsys, tmp_path):
    import shutil

    deep = tmp_path / ("a-long-folder-name-" * 4) / folder
    shutil.copytree(DATA_DIR / "boots" / folder, deep)
    assert main(["ledger", str(deep), "--rooms", "--assume-uniform"]) in (0, 2)  # oom/ folder: no room
    assert main(["ledger", str(deep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines) <= 100, "\n".join(lines)


def test_ledger_wide_shows_every_column_with_a_value(capsys):
    boot = str(DATA_DIR / "boots" / "four-rank" / "boot.log")
    assert main(["ledger", boot]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == [
        "file",
        "boot",
        "rank",
        "outcome",
        "free",
        "at",
        "start",
        "weights",
        "room",
        "room",
        "from",
        "reason",  # issue 26: why a row is not ok
    ]
    assert main(["ledger", boot, "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = run_json(capsys, "ledger", boot)["rows"]
    shown = {column for column in rows[0] if any(row[column] is not None for row in rows)}
    assert set(lines[0].split()) == shown
    assert lines[1].split()[list(lines[0].split()).index("source")] == boot  # the whole path
