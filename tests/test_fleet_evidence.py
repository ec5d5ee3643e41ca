"""The fleet enforces what a single launch does (issue 25 part 2): reader, symlinks, evidence identity, GPU key,
canaries that are new boots, a host too small for one block, the verified host list.

Hosts are copies of the committed sample (data/fleet/small, data/fleet/make_fleet.py, seed 13): Llama-3.1-70B,
TP=8, vLLM 0.26.0, one KV block = 655,360 B; room = init_free − (W + P + NT + cg) − 150 MiB per rank
(make_fleet.rank_numbers(...)["to_gpu"]). Reserve 1 GiB throughout unless said.
"""

from __future__ import annotations

import json
import random
import shutil
import sys

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.fleet import FleetPolicy, plan_fleet, plan_readings, read_fleet
from kvplan.fleet.inputs import list_fleet

sys.path.insert(0, str(DATA_DIR / "fleet"))
import make_fleet

GiB = 2**30
BLOCK = 655_360
FLEET = DATA_DIR / "fleet" / "small"
SAMPLE = {h.name: h for h in make_fleet.plan_hosts(make_fleet.SMALL_FLEET, 13)}
CLEAN = ("gpu-00000", "gpu-00002", "gpu-00004", "gpu-00006")


def copy_hosts(folder, hosts, names=None):
    """Copy sample host folders into ``folder`` (renamed by ``names`` when given); returns ``folder``."""
    for host, name in zip(hosts, names or hosts):
        shutil.copytree(FLEET / host, folder / name)
    return folder


def plan_json(*args: str) -> tuple[int, dict]:
    return main(["fleet", "plan", *args, "--scheduler", "synchronous", "--json"])


def run_json(capsys, *args: str) -> tuple[int, dict]:
    status = main([*args, "--scheduler", "synchronous", "--json"])
    return status, json.loads(capsys.readouterr().out)


def room(host: str, rank: int) -> int:
    return make_fleet.rank_numbers(SAMPLE[host], rank)["to_gpu"]


def canary(folder, host: str, value: int, gpu: tuple[str, str] | None = None) -> None:
    """A boot of sample ``host`` at the manual value, with its snapshots after warm-up at that value; ``gpu``
    (name, driver) replaces the GPU type and driver the snapshot shows (same memory.total)."""
    (folder / host).mkdir(parents=True)
    log = make_fleet.boot_log(SAMPLE[host], random.Random(1), manual_bytes=value, day=30)
    (folder / host / "boot.log").write_text(log)
    gpus, apps = make_fleet.snapshots_csv(SAMPLE[host], kv_bytes=value)
    if gpu is not None:
        gpus = gpus.replace("NVIDIA H100 80GB HBM3", gpu[0]).replace("580.95.05", gpu[1])
    (folder / host / "nvidia-smi-gpu.csv").write_text(gpus)
    (folder / host / "nvidia-smi-apps.csv").write_text(apps)


@pytest.fixture(scope="module")
def approved(tmp_path_factory):
    """A plan of four clean H100 hosts with its class bundle: (fleet folder, plan JSON, bundle path)."""
    folder = copy_hosts(tmp_path_factory.mktemp("fleet") / "fleet", CLEAN)
    out = folder.parent / "ev"
    policy = FleetPolicy(GiB)
    plan = plan_fleet(str(folder), policy, ["llama-3.1-70b"], scheduler="synchronous", out=out).to_dict()
    (c,) = plan["classes"]
    assert c["approved"] and c["bundle"]
    return folder, plan, c["bundle"]


def test_class_bundle_records_gpu_type_and_driver(approved):  # issue 25
    from kvplan.evidence import read_bundle

    key = read_bundle(approved[2])["compatibility_key"]
    # every host's --query-gpu snapshot: "NVIDIA H100 80GB HBM3", driver 580.95.05 (make_fleet.SMALL_FLEET)
    assert (key["gpu_name"], key["driver_version"]) == ("NVIDIA H100 80GB HBM3", "580.95.05")


def test_fleet_gate_never_passes_a_canary_on_another_gpu_and_driver(approved, tmp_path, capsys):  # issue 25
    _, plan, bundle = approved
    value = plan["classes"][0]["uniform_budget_bytes"]
    canary(tmp_path / "same", "gpu-00002", value)
    status, data = run_json(capsys, "fleet", "gate", "--approved", bundle, str(tmp_path / "same"))
    assert (status, data["decision"]) == (0, "GO: all 1 host(s) pass")
    # the same boot on an H100 PCIe with driver 570.172.08, as kvplan gate judges it: the key changed, so the
    # canary is no evidence of the approved launch (issue 24: cannot judge, exit 2, never a pass)
    canary(tmp_path / "other", "gpu-00002", value, ("NVIDIA H100 PCIe", "570.172.08"))
    status, data = run_json(capsys, "fleet", "gate", "--approved", bundle, str(tmp_path / "other"))
    assert status == 2
    [key] = [c for c in data["hosts"][0]["checks"] if c["name"] == "compatibility key"]
    assert key["passed"] is None and key["detail"].startswith("cannot judge: ")
    assert "NVIDIA H100 PCIe" in key["detail"] and "570.172.08" in key["detail"]


def test_wave_gate_names_canary_logs_and_the_gate_refuses_the_plans_own_inputs(approved, capsys):  # issue 25
    folder, plan, bundle = approved
    canaries = plan["waves"][0]
    assert f" CANARY_FLEET --hosts {','.join(canaries['hosts'])}" in canaries["gate"]
    assert str(folder) not in canaries["gate"]
    # run on the planning fleet itself (before any canary booted): those logs are the bundle's inputs
    status, data = run_json(
        capsys, "fleet", "gate", "--approved", bundle, str(folder), "--hosts", ",".join(canaries["hosts"])
    )
    assert status == 2 and data["decision"].startswith("HOLD: 2 host(s) cannot be judged")
    assert all("is the approval's own input" in h["reason"] for h in data["hosts"])


def test_fleet_gate_judges_the_host_list_it_verified(approved, tmp_path, capsys, monkeypatch):  # issue 25
    from kvplan.fleet.bundles import class_note

    _, plan, bundle = approved
    value = plan["classes"][0]["uniform_budget_bytes"]
    canary(tmp_path / "canary", "gpu-00019", value)  # gpu-00019 is in no class of this plan
    # a budget.json read again after verification would list gpu-00019 (as if swapped in meanwhile)
    forged = {"note": class_note("forged", {}, ["gpu-00019"])}
    monkeypatch.setattr("kvplan.fleet.bundles.read_bundle", lambda _: forged, raising=False)
    status, data = run_json(capsys, "fleet", "gate", "--approved", bundle, str(tmp_path / "canary"))
    assert status == 2
    assert data["hosts"][0]["reason"].startswith("no approved bundle lists it")


def test_symlinked_restart_log_lowers_the_host(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", CLEAN)
    restarted = make_fleet.plan_hosts(make_fleet.SMALL_FLEET, 13)[0]  # gpu-00000
    restarted.init_free[3] -= 9 * GiB  # a restart with 9 GiB less free on rank 3
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "restart.log").write_text(
        make_fleet.boot_log(restarted, random.Random(2), day=29)
    )
    (folder / "gpu-00000" / "restart.log").symlink_to(tmp_path / "elsewhere" / "restart.log")
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    # the host's budget is its worst boot's: rank 3 of the restart, room − 9 GiB − 1 GiB reserve (no model:
    # no block rounding)
    assert plan["classes"][0]["host_budgets"]["gpu-00000"] == room("gpu-00000", 3) - 9 * GiB - GiB
    assert plan["classes"][0]["limiting_host"] == "gpu-00000"


def test_symlinked_weakest_host_folder_stays_in_the_plan(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", CLEAN[:3])
    copy_hosts(tmp_path / "elsewhere", ["gpu-00019"])
    (folder / "gpu-00019").symlink_to(tmp_path / "elsewhere" / "gpu-00019")
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    (c,) = plan["classes"]
    # gpu-00019 rank 0 (co-tenant) is the weakest: 58,539,581,440 − 1 GiB (tests/test_fleet.py)
    assert (c["limiting_host"], c["limiting_rank"]) == ("gpu-00019", 0)
    assert c["uniform_budget_bytes"] == 58_539_581_440 - GiB == room("gpu-00019", 0) - GiB


def test_dangling_symlink_excludes_its_host_by_name(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", CLEAN)
    (folder / "gpu-00004" / "restart.log").symlink_to(tmp_path / "gone.log")
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    assert plan["excluded"] == [
        {"host": "gpu-00004", "reason": f"{folder / 'gpu-00004' / 'restart.log'}: a dangling symbolic link"}
    ]


def test_one_boot_copied_under_three_hosts_is_refused_naming_them(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", ["gpu-00006"] * 3, ["h-a", "h-b", "h-c"])
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    assert plan["classes"] == [] and plan["waves"] == []
    reasons = {item["host"]: item["reason"] for item in plan["excluded"]}
    assert set(reasons) == {"h-a", "h-b", "h-c"}
    assert reasons["h-a"].startswith("the same boot (sha256 ")
    assert reasons["h-a"].endswith("is also under host(s) h-b, h-c: a boot is the evidence of one host")
    # the log alone (no snapshot, so no GPU UUID to share) is the same boot too
    for name in ("h-a", "h-b", "h-c"):
        for snapshot in (folder / name).glob("nvidia-smi*"):
            snapshot.unlink()
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    assert {item["host"] for item in plan["excluded"]} == {"h-a", "h-b", "h-c"}


def test_one_gpu_under_two_hosts_is_refused(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", CLEAN)
    # gpu-00004's snapshots copied beside gpu-00006's log: its GPUs' UUIDs now appear under two hosts
    for name in ("nvidia-smi-gpu.csv", "nvidia-smi-apps.csv"):
        shutil.copy(folder / "gpu-00004" / name, folder / "gpu-00006" / name)
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    reasons = {item["host"]: item["reason"] for item in plan["excluded"]}
    # gpu-00006's log pids are not in gpu-00004's process snapshot: the join refuses it first
    assert "shows none of the logged vLLM pids" in reasons["gpu-00006"]
    gpus = (folder / "gpu-00004" / "nvidia-smi-gpu.csv").read_text()
    (folder / "gpu-00006" / "nvidia-smi-apps.csv").unlink()
    (folder / "gpu-00006" / "nvidia-smi-gpu.csv").write_text(gpus)
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    reasons = {item["host"]: item["reason"] for item in plan["excluded"]}
    assert set(reasons) == {"gpu-00004", "gpu-00006"}
    assert reasons["gpu-00006"].startswith("the same GPU (GPU-")
    assert reasons["gpu-00006"].endswith("is also under host(s) gpu-00004: a gpu is the evidence of one host")


def test_host_without_room_for_one_block_is_excluded_by_name(tmp_path):  # issue 25
    readings = read_fleet(list_fleet(str(FLEET)), scheduler="synchronous")
    # reserve 1,000 B below gpu-00019 rank 0's room 58,539,581,440: that rank keeps 1,000 B, less than one
    # 655,360 B block; every other H100 rank keeps more than a block
    reserve = 58_539_581_440 - 1_000
    plan = plan_readings(str(FLEET), readings, FleetPolicy(reserve), ["llama-3.1-70b"]).to_dict()
    reasons = {item["host"]: item["reason"] for item in plan["excluded"]}
    assert (
        reasons["gpu-00019"]
        == "rank 0: safe budget 1000 B is less than one block (640 KiB) (at the fleet's reserve)"
    )
    h100 = next(c for c in plan["classes"] if c["class"] == "NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.26.0")
    # the class plans without it: gpu-00030 rank 3 (room 59,425,628,160) limits, 886,047,720 B → 1,352
    # blocks (886,046,720 B)
    assert (h100["limiting_host"], h100["limiting_rank"]) == ("gpu-00030", 3)
    assert h100["uniform_budget_bytes"] == (59_425_628_160 - reserve) // BLOCK * BLOCK == 1_352 * BLOCK


def test_class_without_snapshots_is_warned_that_no_gate_can_compare_its_gpu(tmp_path):  # issue 25
    folder = copy_hosts(tmp_path / "fleet", CLEAN)
    for snapshot in folder.glob("*/nvidia-smi*"):
        snapshot.unlink()
    plan = plan_fleet(str(folder), FleetPolicy(GiB), scheduler="synchronous").to_dict()
    (detail,) = [d for d in plan["warning_details"] if d["code"] == "fleet-no-nvidia-smi"]
    assert "has no GPU type or driver, so a gate cannot compare them" in detail["message"]


def test_waves_carry_the_class_bundles_whole_launch_flags(approved, tmp_path, capsys):  # issue 24
    from kvplan.evidence import read_bundle

    folder, plan, bundle = approved
    # the bundle's launch_flags: the value and its companion utilization (vLLM refuses to start at the default
    # 0.92 when a rank's free memory is below ceil(total × 0.92); the flags travel together)
    flags = read_bundle(bundle)["decision"]["launch_flags"]
    assert flags[0] == plan["classes"][0]["flag"] and flags[1].startswith("--gpu-memory-utilization=")
    assert plan["classes"][0]["launch_flags"] == flags
    assert [wave["launch_flags"] for wave in plan["waves"]] == [flags, flags]  # canaries, then the class
    assert [wave["flag"] for wave in plan["waves"]] == [flags[0], flags[0]]  # the key pipelines read stays
    # the text wave lines operators read, from a plan that writes the bundle (another --out: never overwritten)
    argv = ["fleet", "plan", str(folder), "--reserve", "1GiB", "--model", "llama-3.1-70b"]
    assert main([*argv, "--scheduler", "synchronous", "--out", str(tmp_path / "ev"), "--approver", "QA"]) == 0
    waves = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wave ")]
    assert len(waves) == 2 and all(line.endswith(f"host(s)  {' '.join(flags)}") for line in waves)
    # without --out no bundle gives the companion: a note after the waves says where it comes from
    assert main([*argv, "--scheduler", "synchronous"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.endswith(f"host(s)  {flags[0]}") for line in lines if line.startswith("wave "))
    assert lines[-1].startswith("note     each class bundle's launch_flags add --gpu-memory-utilization")
