"""GPU evidence from DCGM exporter scrapes: the same facts as nvidia-smi's GPU snapshot (issue 28)."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.fleet import FleetPolicy, plan_fleet
from kvplan.io.dcgm import read_dcgm_scrape
from kvplan.io.nvidia_smi_csv import NvidiaSmiError, read_nvidia_smi_csv
from kvplan.units import GiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
FLEET = DATA_DIR / "fleet" / "small"


def dcgm_of(csv: Path, hostname: str) -> str:
    """The DCGM exporter scrape of the GPUs of an nvidia-smi --query-gpu snapshot (MiB, as DCGM reports):
    reserved = total − used − free (nvidia-smi's used is total − free − reserved)."""
    gpus, _ = read_nvidia_smi_csv(csv)
    lines = []
    for gpu in gpus.to_dict("records"):
        labels = (
            f'gpu="{gpu["gpu_index"]}",UUID="{gpu["gpu_uuid"]}",device="nvidia{gpu["gpu_index"]}",'
            f'modelName="{gpu["gpu_name"]}",Hostname="{hostname}",DCGM_FI_DRIVER_VERSION="{gpu["driver_version"]}"'
        )
        mib = {k: gpu[f"memory_{k}_bytes"] // 2**20 for k in ("total", "used", "free")}
        fields = {
            "FREE": mib["free"],
            "USED": mib["used"],
            "RESERVED": mib["total"] - mib["used"] - mib["free"],
        }
        for field, value in fields.items():
            lines += [f"# TYPE DCGM_FI_DEV_FB_{field} gauge", f"DCGM_FI_DEV_FB_{field}{{{labels}}} {value}"]
    return "\n".join(lines) + "\n"


def test_dcgm_reads_as_the_gpu_snapshot(tmp_path):  # issue 28
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a"))
    from_csv, _ = read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-gpu.csv")
    from_dcgm, metadata = read_dcgm_scrape(scrape)
    facts = ["gpu_index", "gpu_uuid", "gpu_name", "driver_version", "memory_total_bytes", "memory_used_bytes",
             "memory_free_bytes"]  # fmt: skip
    pd.testing.assert_frame_equal(from_dcgm[facts], from_csv[facts])
    assert metadata.kind == "gpus"


def test_budget_and_gate_take_a_dcgm_scrape(tmp_path, capsys):  # issue 28
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a"))
    outputs = []
    for snapshot in (FOUR_RANK / "nvidia-smi-gpu.csv", scrape):
        assert main(["budget", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--nvidia-smi", str(snapshot),
                     "--json"]) == 0  # fmt: skip
        outputs.append(capsys.readouterr().out.replace(str(snapshot), "SNAPSHOT"))
    assert outputs[0] == outputs[1]


def test_dcgm_refusals(tmp_path):  # issue 28
    two = tmp_path / "two.prom"
    two.write_text(
        dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a")
        + dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-b")
    )
    with pytest.raises(NvidiaSmiError, match="2 hosts"):
        read_dcgm_scrape(two)
    assert len(read_dcgm_scrape(two, hostname="node-b")[0]) == 4
    free_only = tmp_path / "free.prom"
    free_only.write_text('DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1",Hostname="h"} 100\n')
    with pytest.raises(NvidiaSmiError, match=r"free\.prom, line 1: GPU GPU-1 needs"):
        read_dcgm_scrape(free_only)


def _fleet(tmp_path: Path, name: str, dcgm: bool) -> Path:
    """The sample fleet's boot logs with each host's GPU snapshot, as nvidia-smi's CSV or a DCGM scrape."""
    root = tmp_path / name
    for host in sorted(p for p in FLEET.iterdir() if p.is_dir()):
        (root / host.name).mkdir(parents=True)
        shutil.copy(host / "boot.log", root / host.name / "boot.log")
        if dcgm:
            (root / host.name / "dcgm.prom").write_text(dcgm_of(host / "nvidia-smi-gpu.csv", host.name))
        else:
            shutil.copy(host / "nvidia-smi-gpu.csv", root / host.name / "nvidia-smi-gpu.csv")
    return root


def test_fleet_classes_from_dcgm_equal_nvidia_smi(tmp_path):  # issue 28
    plans = []
    for name, dcgm in (("smi", False), ("dcgm", True)):
        plan = plan_fleet(
            str(_fleet(tmp_path, name, dcgm)), FleetPolicy(GiB), models=["llama-3.1-70b"]
        ).to_dict()
        plans.append(plan)
    classes = [
        {c["class"]: {k: v for k, v in c.items() if k != "hosts"} for c in p["classes"]} for p in plans
    ]
    assert classes[0] == classes[1]
    assert len(classes[0]) >= 2  # H100 and H200 classes at least
