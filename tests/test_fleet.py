"""Fleets on the committed sample (data/fleet/small, written by data/fleet/make_fleet.py, seed 13).

Every host: Llama-3.1-70B, TP=8, vLLM 0.26.0's arithmetic (data/fleet/make_fleet.py's docstring):
W = 17,641,562,112, P = 966,787,072, room = init_free − (W + P + NT + cg) − 150 MiB, one block = 655,360 B
(80 layers × 1 KV head per rank × 2 × 128 × 2 B × 16 tokens). Reserve 1 GiB = 1,073,741,824 throughout.
"""

from __future__ import annotations

import json
import random
import sys

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.fleet import FleetPolicy, plan_readings, read_fleet
from kvplan.fleet.inputs import list_fleet

sys.path.insert(0, str(DATA_DIR / "fleet"))
import make_fleet

GiB, MiB = 2**30, 2**20
FLEET = DATA_DIR / "fleet" / "small"
BLOCK = 655_360
H100 = "NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.26.0"
H200 = "NVIDIA H200 / 580.95.05 / vLLM 0.26.0"
OTHER = "NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.27.0"


@pytest.fixture(scope="module")
def readings():
    return read_fleet(list_fleet(str(FLEET)), scheduler="synchronous")


@pytest.fixture(scope="module")
def plan(readings):
    return plan_readings(str(FLEET), readings, FleetPolicy(GiB), ["llama-3.1-70b"]).to_dict()


def by_class(plan: dict) -> dict:
    return {item["class"]: item for item in plan["classes"]}


def test_classes_by_key(plan):
    classes = by_class(plan)
    # 22 clean + 3 co-tenant + 1 graphs + 1 non-torch H100 hosts; 8 clean + 1 co-tenant H200;
    # the 0.27.0 host alone
    assert {name: c["clean_hosts"] for name, c in classes.items()} == {H100: 27, H200: 9, OTHER: 1}
    assert classes[H100]["key"]["gpu_name"] == "NVIDIA H100 80GB HBM3"  # from the nvidia-smi snapshots
    assert classes[OTHER]["key"]["vllm_version"] == "0.27.0"


def test_h100_class_budget_limiting_host_and_capacity(plan):
    c = by_class(plan)[H100]
    # gpu-00019 rank 0 (co-tenant): init_free 78,675,705,856, NT 365 MiB, cg 942 MiB →
    # room = 78,675,705,856 − 17,641,562,112 − 966,787,072 − 382,730,240 − 987,758,592 − 157,286,400
    #      = 58,539,581,440; − 1 GiB = 57,465,839,616 → 87,685 blocks × 655,360 = 57,465,241,600
    assert (c["limiting_host"], c["limiting_rank"]) == ("gpu-00019", 0)
    assert c["uniform_budget_bytes"] == 57_465_241_600 == 87_685 * BLOCK
    assert c["flag"] == "--kv-cache-memory-bytes=57465241600"
    # tokens = 87,685 blocks × 16; concurrency = 87,685 / (32,768 / 16) = 42.81
    assert c["capacity"] == [
        {
            "seq_len": 32768,
            "blocks": 87_685,
            "tokens": 1_402_960,
            "max_concurrency": 87_685 / 2048,
            "whole_sequences": 42,
        }
    ]
    # stranded = Σ over 27 × 8 ranks of (room − 1 GiB) − 216 × 57,465,241,600
    rooms = [
        make_fleet.rank_numbers(h, r)["to_gpu"]
        for h in make_fleet.plan_hosts(make_fleet.SMALL_FLEET, 13)
        if h.name in c["hosts"]
        for r in range(8)
    ]
    assert len(rooms) == 216
    assert c["stranded_total_bytes"] == sum(room - GiB for room in rooms) - 216 * 57_465_241_600
    assert sum(c["stranded_by_host"].values()) == c["stranded_total_bytes"]
    assert c["host_budget_min_bytes"] == 57_465_241_600
    assert c["min_median_ratio"] == 57_465_241_600 / c["host_budget_median_bytes"]


def test_every_class_value_is_whole_blocks_by_the_single_launch_rule(plan):
    # each class's value is kvplan.budget.uniform_budget's (the single-launch rule): min over its hosts' ranks
    # of the generator's room − 1 GiB, rounded down to whole 655,360 B blocks; so is every host's own budget,
    # and the split advice's values (the rest's and the outliers' class values)
    hosts = {h.name: h for h in make_fleet.plan_hosts(make_fleet.SMALL_FLEET, 13)}
    for c in plan["classes"]:
        rooms = [
            make_fleet.rank_numbers(hosts[name], rank)["to_gpu"] for name in c["hosts"] for rank in range(8)
        ]
        assert c["uniform_budget_bytes"] == (min(rooms) - GiB) // BLOCK * BLOCK, c["class"]
        assert c["block_bytes"] == BLOCK
        assert all(value % BLOCK == 0 for value in c["host_budgets"].values())
        split = c["split"]
        for value in (split["rest_budget_bytes"], split["outlier_budget_bytes"]):
            assert value is None or value % BLOCK == 0


def test_h200_class(plan):
    c = by_class(plan)[H200]
    # gpu-00018 rank 7 (co-tenant): room 127,147,909,120; − 1 GiB = 126,074,167,296 → 192,373 blocks
    assert (c["limiting_host"], c["limiting_rank"]) == ("gpu-00018", 7)
    assert c["uniform_budget_bytes"] == 192_373 * BLOCK == 126_073_569_280
    assert c["outliers"] == []  # its co-tenant takes 2.2 GiB of ~120: min/median 0.98 ≥ 0.95


def test_outliers_and_likely_causes(plan):
    c = by_class(plan)[H100]
    # bound 0.95 × median; gpu-00019 (5.42 GiB co-tenant on rank 0) and gpu-00030 (4.59 GiB on rank 3)
    # are below it
    assert [(o["host"], o["budget_bytes"]) for o in c["outliers"]] == [
        ("gpu-00019", 57_465_241_600),
        ("gpu-00030", 58_351_288_320),
    ]
    # gpu-00030 rank 3: room 59,425,628,160 − 1 GiB = 58,351,886,336 → 89,037 blocks = 58,351,288,320
    assert 89_037 * BLOCK == 58_351_288_320
    for outlier in c["outliers"]:
        assert "less memory free at startup" in outlier["likely_cause"]
        assert "other processes on the GPU use" in outlier["likely_cause"]


def test_split_gain(plan):
    split = by_class(plan)[H100]["split"]
    # without the two outliers the class is held by the next weakest host: 60,915,056,640 = 92,949 blocks
    assert split["rest_budget_bytes"] == 92_949 * BLOCK
    # each of the 25 remaining hosts gains (92,949 − 87,685) × 16 = 84,224 tokens; the outliers keep theirs
    assert split["gain_split_tokens"] == 25 * 84_224 == 2_105_600
    # fixed instead: all 27 hosts at the rest's value
    assert split["gain_fixed_tokens"] == 27 * 84_224


def test_excluded_hosts_with_reasons(plan):
    reasons = {item["host"]: item["reason"] for item in plan["excluded"]}
    assert set(reasons) == {"gpu-00007", "gpu-00029", "gpu-00034", "gpu-00035"}
    assert "mix compatibility keys" in reasons["gpu-00007"] and "max_model_len" in reasons["gpu-00007"]
    assert "oom" in reasons["gpu-00029"]
    # the single-launch reader's refusal (kvplan.plan.read_evidence), naming the file
    assert reasons["gpu-00034"].startswith(f"{FLEET / 'gpu-00034' / 'boot.log'}: no vLLM boot found")
    assert "incomplete" in reasons["gpu-00035"]


def test_too_few_clean_hosts_not_approved(plan):
    other = by_class(plan)[OTHER]
    assert other["approved"] is False and other["flag"] is None
    assert "fewer than the policy's minimum of 3" in other["not_approved_reason"]
    assert all(wave["class"] != OTHER for wave in plan["waves"])


def test_waves_canaries_first(plan):
    waves = plan["waves"]
    assert [(w["kind"], w["class"]) for w in waves] == [
        ("canary", H200),
        ("canary", H100),
        ("class", H200),
        ("class", H100),
    ]
    assert waves[1]["hosts"][0] == "gpu-00019"  # the limiting host is a canary
    assert waves[1]["flag"] == "--kv-cache-memory-bytes=57465241600"
    assert waves[1]["gate"].startswith("kvplan fleet gate --approved ")
    assert len(waves[3]["hosts"]) == 27 - 2


def test_cli_manifest_json_contract_labels_and_missing_file(capsys):
    assert (
        main(
            [
                "fleet",
                "plan",
                str(FLEET / "manifest.csv"),
                "--reserve",
                "1GiB",
                "--class-by",
                "zone",
                "--scheduler",
                "synchronous",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert {"classes", "excluded", "waves", "warnings"} <= set(data)
    keys = {
        "class",
        "key",
        "labels",
        "hosts",
        "clean_hosts",
        "uniform_budget_bytes",
        "flag",
        "limiting_host",
        "limiting_rank",
        "stranded_total_bytes",
        "min_median_ratio",
        "capacity",
        "outliers",
        "bundle",
    }
    assert all(keys <= set(c) for c in data["classes"])
    classes = by_class(data)
    # zone (a manifest column) splits the H100 class: us-east-1b holds the 3 co-tenants and the graphs host
    # (its mixed-key host is excluded), us-east-1a the 22 clean hosts and the non-torch one
    assert classes[H100 + " / zone=us-east-1b"]["clean_hosts"] == 4
    assert classes[H100 + " / zone=us-east-1a"]["clean_hosts"] == 23
    assert classes[H100 + " / zone=us-east-1b"]["labels"] == {"zone": "us-east-1b"}
    reasons = {item["host"]: item["reason"] for item in data["excluded"]}
    assert reasons["h-missing"] == "manifest line 126: h-missing/boot.log: no such file"
    # no --model: no block rounding, so the value is gpu-00019 rank 0's room − 1 GiB to the byte
    assert classes[H100 + " / zone=us-east-1b"]["uniform_budget_bytes"] == 58_539_581_440 - GiB
    assert classes[H100 + " / zone=us-east-1b"]["capacity"] is None


def test_cli_bad_fleet_is_one_error_line(capsys, tmp_path):
    assert (
        main(["fleet", "plan", str(tmp_path / "nowhere"), "--reserve", "1GiB", "--scheduler", "synchronous"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'nowhere'}: no such fleet folder or manifest"]


def canary_fleet(folder, plan, hosts_free):
    """Manual-value boots at exactly the H100 flag for ``{host: rank-0 startup free or None}`` (generator's
    lines): the ranks print "reserved 53.52 GiB" (format_gib), the API server's non-default args the bytes.
    A host left at its own free memory also gets its nvidia-smi snapshots after warm-up at that value (the
    bundle records GPU type and driver, so a canary shows them, as for ``kvplan gate``)."""
    value = by_class(plan)[H100]["uniform_budget_bytes"]
    hosts = {h.name: h for h in make_fleet.plan_hosts(make_fleet.SMALL_FLEET, 13)}
    for name, free in hosts_free.items():
        host = hosts[name]
        if free is not None:
            host.init_free[0] = free
        (folder / name).mkdir(parents=True)
        (folder / name / "boot.log").write_text(
            make_fleet.boot_log(host, random.Random(1), manual_bytes=value, day=30)
        )
        if free is None:
            gpus, apps = make_fleet.snapshots_csv(host, kv_bytes=value)
            (folder / name / "nvidia-smi-gpu.csv").write_text(gpus)
            (folder / name / "nvidia-smi-apps.csv").write_text(apps)


def test_fleet_gate_verdicts_and_stop(plan, readings, tmp_path, capsys):
    from kvplan.evidence import read_bundle
    from kvplan.fleet.bundles import approve_class

    h100 = next(
        d
        for d in plan_readings(str(FLEET), readings, FleetPolicy(GiB), ["llama-3.1-70b"]).classes
        if d.fleet_class.name == H100
    )
    policy = FleetPolicy(GiB, approver="Ana Planner")
    bundle = approve_class(h100.fleet_class, tmp_path / "ev", policy, h100.split["model"], None)
    # the bundle approves the class's value: 87,685 whole blocks (test_h100_class_budget_limiting_host_and_capacity)
    assert read_bundle(bundle)["decision"]["kv_cache_memory_bytes"] == 57_465_241_600
    # gpu-00020 (clean) boots with rank 0 at 70 GiB free: the approval's F_ref for rank 0 is gpu-00019's
    # 78,675,705,856 B, so B_adj = safe_ref − (F_ref − 70 GiB) is ≈ 3.3 GiB below the value: FAIL, STOP
    canary_fleet(tmp_path / "canary", plan, {"gpu-00019": None, "gpu-00020": 70 * GiB, "gpu-00021": None})
    status = main(["fleet", "gate", "--approved", str(bundle), str(tmp_path / "canary"), "--json"])
    data = json.loads(capsys.readouterr().out)
    verdicts = {h["host"]: h["passed"] for h in data["hosts"]}
    assert verdicts == {"gpu-00019": True, "gpu-00020": False, "gpu-00021": True}
    assert status == 1 and data["decision"] == "STOP: 1 of 3 host(s) failed: gpu-00020"
    failed = [
        c["name"]
        for h in data["hosts"]
        if h["host"] == "gpu-00020"
        for c in h["checks"]
        if c["passed"] is False
    ]
    assert failed == ["approved value fits every rank"]
    assert (
        main(
            [
                "fleet",
                "gate",
                "--approved",
                str(bundle),
                str(tmp_path / "canary"),
                "--hosts",
                "gpu-00019,gpu-00021",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("GO: all 2 host(s) pass")
    # gpu-00021's log without its API server's arguments line's bytes: its ranks printed "53.52 GiB" only,
    # i.e. 57,466,662,420 B, so the flag may be up to 57,466,662,420 + 5,368,710 = 57,472,031,130 B =
    # 87,695 blocks > the approved 87,685: it cannot pass as a canary of the approved value
    log = tmp_path / "canary" / "gpu-00021" / "boot.log"
    log.write_text(log.read_text().replace(", 'kv_cache_memory_bytes': 57465241600", ""))
    status = main(["fleet", "gate", "--approved", str(bundle), str(tmp_path / "canary"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert {h["host"]: h["passed"] for h in data["hosts"]}["gpu-00021"] is False
    detail = next(
        c["detail"]
        for h in data["hosts"]
        if h["host"] == "gpu-00021"
        for c in h["checks"]
        if c["passed"] is False
    )
    assert (
        "rank 0 ran a value vLLM printed as 53.52 GiB (to 0.01 GiB), so up to --kv-cache-memory-bytes=57472031130"
        in detail
    )
    assert status == 1 and data["decision"] == "STOP: 2 of 3 host(s) failed: gpu-00020, gpu-00021"


def test_progress_prints_each_twentieth_whatever_the_group_size(capsys):
    from kvplan.fleet.read import hosts_per_task, stderr_progress

    # 1,000 hosts on 2 worker threads: ceil(1,000 / (2 × 8 tasks per thread)) = 63 hosts per task, so 16
    # groups; a twentieth is 50 hosts, and every group of 63 enters a new step of 50: 16 lines, the last
    # "1,000/1,000". (The old rule, done % 50 < 8, printed only groups ending within 8 of a multiple of 50.)
    size = hosts_per_task(1_000, 2)
    assert size == 63
    report = stderr_progress()
    for done in [*range(size, 1_000, size), 1_000]:
        report(done, 1_000)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 16
    assert lines[0] == "read 63/1,000 hosts" and lines[-1] == "read 1,000/1,000 hosts"
    # 41 hosts in groups of 8 (the sample fleet): a twentieth is 2 hosts, every group prints: 6 lines
    report = stderr_progress()
    for done in (8, 16, 24, 32, 40, 41):
        report(done, 41)
    assert len(capsys.readouterr().err.splitlines()) == 6


def test_class_rows_never_show_a_budget_above_its_bytes():  # issue 27
    from kvplan.fleet.planner import class_rows

    # the sample's H100 class: 87,685 blocks × 655,360 B = 57,465,241,600 B = 53.5194 GiB: "53.51", not "53.52"
    plan = {
        "classes": [
            {
                "class": "H100",
                "clean_hosts": 27,
                "uniform_budget_bytes": 57_465_241_600,
                "limiting_host": "gpu-00019",
                "limiting_rank": 0,
                "min_median_ratio": 0.909,
                "stranded_total_bytes": 0,
                "approved": True,
            }
        ]
    }
    assert class_rows(plan)[0]["budget"] == "53.51 GiB"
