"""Review: a rank outside TP × PP × DP refuses the budget instead of being dropped; approve judges every plan."""

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from tests.conftest import GiB
from tests.test_ledger import boot_text

RESERVE = "1GiB"


def test_a_log_whose_third_worker_lies_outside_tp_2_refuses_the_budget(tmp_path, capsys):
    # TP 2 (world 2), but a Worker_TP2 also prints its room, 1 GiB: that GPU's evidence was dropped with
    # a warning and the budget came from ranks 0 and 1 (30 GiB − 1 GiB reserve = 29 GiB), exit 0
    log = tmp_path / "tp2.log"
    log.write_text(boot_text("0.26.0", [30 * GiB, 30 * GiB, 1 * GiB], tp=2))
    assert main(["budget", str(log), "--reserve", RESERVE]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and f"{log}:" in err and "rank 2" in err and "world size is 2" in err


def test_a_ledger_csv_row_for_a_rank_outside_the_world_refuses_the_budget(tmp_path, capsys):
    # the sample's ranks 0-3 of TP 4 plus a row for rank 7 with 1 GiB of room: no such rank in world 4
    text = (DATA_DIR / "manual" / "four-rank-rooms.csv").read_text()
    csv = tmp_path / "rooms.csv"
    csv.write_text(text + "7,1GiB,manual,meta-llama/Llama-3.1-70B-Instruct,4,1,1,0.26.0\n")
    assert main(["budget", str(csv), "--reserve", "0.9GiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and f"{csv}:6" in err and "rank 7" in err and "TP × PP × DP = 4" in err


@pytest.mark.parametrize("command", ["approve", "ledger"])
def test_approve_and_ledger_rooms_refuse_it_too(tmp_path, capsys, command):
    log = tmp_path / "tp2.log"
    log.write_text(boot_text("0.26.0", [30 * GiB, 30 * GiB, 1 * GiB], tp=2))
    args = {
        "approve": [
            "approve",
            str(log),
            "--reserve",
            RESERVE,
            "--approver",
            "A",
            "--out",
            str(tmp_path / "ev"),
        ],
        "ledger": ["ledger", str(log), "--rooms"],
    }[command]
    assert main(args) == 2
    assert "world size is 2" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").iterdir())


def test_a_fleet_host_with_such_a_log_is_excluded_not_budgeted(tmp_path):
    from kvplan.fleet.inputs import HostFiles
    from kvplan.fleet.read import read_host

    log = tmp_path / "tp2.log"
    log.write_text(boot_text("0.26.0", [30 * GiB, 30 * GiB, 1 * GiB], tp=2))
    reading = read_host(HostFiles(host="h1", logs=(str(log),)))
    assert reading.rooms is None and "world size is 2" in reading.excluded


def test_a_ledger_csv_mixing_tp_names_the_row_that_differs(tmp_path, capsys):
    # line 3 (rank 1) says TP 2 while the other rows say TP 4: the message named line 2 for both values
    lines = (DATA_DIR / "manual" / "four-rank-rooms.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",4,1,1,", ",2,1,1,")
    csv = tmp_path / "rooms.csv"
    csv.write_text("\n".join(lines) + "\n")
    assert main(["budget", str(csv), "--reserve", "0.9GiB"]) == 2
    err = capsys.readouterr().err
    assert f"tensor_parallel_size: 4 in {csv}:2 vs 2 in {csv}:3" in err


def test_approve_refuses_an_admission_plan_it_cannot_judge_without_a_model(tmp_path, capsys):
    # 1,000 × 32,768 tokens = 32,768,000 tokens; the boot's own log shows 155,856 tokens of KV cache, so the
    # plan cannot fit, yet without --model its bytes are unknown (fits None): the bundle was written, exit 0
    out = tmp_path / "ev"
    log = str(DATA_DIR / "boots" / "four-rank" / "boot.log")
    args = ["approve", log, "--reserve", "0.9GiB", "--approver", "A", "--out", str(out)]
    assert main([*args, "--target-concurrency", "1000", "--seq-len", "32768"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "--model" in err
    assert not out.exists() or not any(out.iterdir())


def test_fleet_plan_without_out_does_not_approve_a_class_its_plan_does_not_fit(capsys):
    # 1,000 × 32,768 tokens: the H100 class holds 1,402,960 tokens (87,685 blocks of 16), far fewer than the
    # 2,048,000 blocks the plan needs; with --out the bundle refused it (NO) but the dry run said "yes"
    args = [
        "fleet",
        "plan",
        str(DATA_DIR / "fleet" / "small"),
        "--reserve",
        "1GiB",
        "--model",
        "llama-3.1-70b",
    ]
    args += ["--scheduler", "synchronous", "--target-concurrency", "1000", "--seq-len", "32768", "--json"]
    assert main(args) == 0
    import json

    classes = json.loads(capsys.readouterr().out)["classes"]
    assert classes and not any(c["approved"] for c in classes)
    assert all(
        "admission plan does not fit" in c["not_approved_reason"] for c in classes if c["clean_hosts"] >= 3
    )
