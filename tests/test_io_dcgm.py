"""GPU evidence from DCGM exporter scrapes: the same facts as nvidia-smi's GPU snapshot (issue 28)."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.fleet import FleetPolicy, plan_fleet
from kvplan.io.gpu_snapshot import NvidiaSmiError, read_dcgm_scrape, read_nvidia_smi_csv
from kvplan.units import GiB
from tests.conftest import approve_args
from tests.prometheus_server import needs_prometheus, openmetrics_of, running_prometheus, samples_of

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


def _with_totals(scrape: str, free_of_gpu_2: str = "2314", used_of_gpu_2: str = "78775") -> str:
    """``scrape`` with DCGM_FI_DEV_FB_TOTAL 81559 after each GPU's FB_FREE (the H100's memory.total), GPU 2's
    free and used set as given."""
    lines = []
    for line in scrape.splitlines():
        if line.startswith('DCGM_FI_DEV_FB_FREE{gpu="2"') or line.startswith('DCGM_FI_DEV_FB_USED{gpu="2"'):
            line = line.rsplit(" ", 1)[0] + " " + (free_of_gpu_2 if "FB_FREE" in line else used_of_gpu_2)
        lines.append(line)
        if line.startswith("DCGM_FI_DEV_FB_FREE"):
            lines.append(line.replace("FB_FREE", "FB_TOTAL").rsplit(" ", 1)[0] + " 81559")
    return "\n".join(lines) + "\n"


# GPU 2's FB_FREE sample is line 16: 3 fields × 2 lines (TYPE, sample) + 1 TOTAL line per GPU before it = 14,
# then its FREE TYPE line (15) and sample (16)
@pytest.mark.parametrize(
    ("free", "used", "message"),
    [
        ("99999", "78775", "DCGM_FI_DEV_FB_FREE 99,999 MiB, more than its total 81,559 MiB"),
        ("-5", "78775", "DCGM_FI_DEV_FB_FREE -5 is not a framebuffer size"),
        ("NaN", "78775", "DCGM_FI_DEV_FB_FREE nan is not a framebuffer size"),
        ("+Inf", "78775", "DCGM_FI_DEV_FB_FREE inf is not a framebuffer size"),
        ("1e30", "78775", "DCGM_FI_DEV_FB_FREE 1e[+]30 is not a framebuffer size"),
        # free 2,314 + used 80,000 = 82,314 MiB > total 81,559 MiB (DCGM: total = free + used + reserved)
        ("2314", "80000", "DCGM_FI_DEV_FB_FREE [+] _USED = 82,314 MiB, more than its total 81,559 MiB"),
    ],
)
def test_dcgm_memory_dcgm_cannot_report_is_refused(tmp_path, capsys, free, used, message):  # issue 28
    scrape = tmp_path / "dcgm.prom"
    text = _with_totals(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a"), free, used)
    scrape.write_text(text)
    with pytest.raises(NvidiaSmiError, match=rf"dcgm\.prom, line 16: (GPU \S+ has )?{message}"):
        read_dcgm_scrape(scrape)
    assert main(["budget", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--dcgm", str(scrape)]) == 2
    assert capsys.readouterr().err.count("error:") == 1
    # the same scrape with GPU 2's true figures reads: 2,314 + 78,775 = 81,089 ≤ 81,559 MiB
    scrape.write_text(_with_totals(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a")))
    assert int(read_dcgm_scrape(scrape)[0]["memory_free_bytes"][2]) == 2314 * 2**20


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


AT = "2026-12-01T10:00:00Z"  # when the DCGM samples below were scraped


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus holding the DCGM series of the four-rank launch's host (node-a) and of every host of
    the sample fleet, scraped at :data:`AT` (backfilled by promtool)."""
    tmp = tmp_path_factory.mktemp("dcgm-prometheus")
    hosts = {"node-a": FOUR_RANK / "nvidia-smi-gpu.csv"}
    hosts |= {host.name: host / "nvidia-smi-gpu.csv" for host in FLEET.iterdir() if host.is_dir()}
    series = None
    for host, csv in hosts.items():
        scrape = tmp / f"{host}.prom"
        samples = [line for line in dcgm_of(csv, host).splitlines() if not line.startswith("#")]
        scrape.write_text("\n".join([f"# {AT}", *samples, ""]))  # one scrape at AT
        series = samples_of([scrape], {"job": "dcgm"}, series)
    with running_prometheus(openmetrics_of(series), tmp) as url:
        yield url


@needs_prometheus
def test_budget_from_prometheus_dcgm_equals_the_scrape(prometheus, tmp_path, capsys):  # issue 28
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a"))
    budget = ["budget", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--json"]
    assert main([*budget, "--dcgm", str(scrape)]) == 0
    from_file = capsys.readouterr().out.replace(str(scrape), "SNAPSHOT")
    assert main([*budget, "--prometheus", prometheus, "--at", AT, "--gpu-host", "node-a"]) == 0
    served = re.sub(r"/\S*/dcgm\.prom", "SNAPSHOT", capsys.readouterr().out)
    assert served == from_file
    # the GPUs were read (DCGM shows no process: other processes' memory unknown, as the warning says)
    assert any(
        w.startswith("SNAPSHOT: no nvidia-smi --query-compute-apps") for w in json.loads(served)["warnings"]
    )
    # several hosts and none chosen, or none at that time: refused with one line
    assert main([*budget, "--prometheus", prometheus, "--at", AT]) == 2
    assert main([*budget, "--prometheus", prometheus, "--at", "2020-01-01T00:00:00Z"]) == 2
    assert main([*budget, "--prometheus", prometheus]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith(f"error: prometheus {prometheus}: DCGM series of ")
    assert errors[0].endswith("choose the launch's host with --gpu-host")
    assert errors[1] == (
        f"error: prometheus {prometheus} shows no DCGM framebuffer series (DCGM_FI_DEV_FB_FREE, _USED) at "
        "1577836800 (Unix s)"
    )
    assert errors[2] == "error: --prometheus needs --at TIME here: when to read the GPUs' DCGM series"


@needs_prometheus
def test_fleet_classes_from_prometheus_dcgm_equal_nvidia_smi(prometheus, tmp_path, capsys):  # issue 28
    plans = []
    for name, extra in (("smi", []), ("prometheus", ["--prometheus", prometheus, "--at", AT])):
        fleet = _fleet(tmp_path, name, dcgm=False)
        if extra:  # the hosts' logs alone: their GPUs come from Prometheus, by the DCGM Hostname label
            for snapshot in fleet.glob("*/nvidia-smi-gpu.csv"):
                snapshot.unlink()
        argv = [
            "fleet",
            "plan",
            str(fleet),
            "--reserve",
            "1GiB",
            "--model",
            "llama-3.1-70b",
            "--json",
            *extra,
        ]
        assert main(argv) == 0
        plans.append(json.loads(capsys.readouterr().out))
    classes = [
        {c["class"]: {k: v for k, v in c.items() if k != "hosts"} for c in p["classes"]} for p in plans
    ]
    assert classes[0] == classes[1]
    assert len(classes[0]) >= 2 and all(name.startswith("NVIDIA H") for name in classes[0])  # GPU type known


@needs_prometheus
def test_approve_and_gate_take_prometheus_dcgm(prometheus, tmp_path, capsys):  # issue 28
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(dcgm_of(FOUR_RANK / "nvidia-smi-gpu.csv", "node-a"))
    served = ["--prometheus", prometheus, "--at", AT, "--gpu-host", "node-a"]
    records, gates = [], []
    for name, gpus in (("file", ["--dcgm", str(scrape)]), ("prometheus", served)):
        assert main([*approve_args(tmp_path / name, *gpus), "--json"]) == 0
        [bundle] = (tmp_path / name).iterdir()
        record = json.loads((bundle / "budget.json").read_text())
        assert main(["verify", str(bundle)]) == 0  # the bundle keeps DCGM's series as its GPU snapshot
        capsys.readouterr()
        records.append((record["decision"], record["compatibility_key"]))
        main(["gate", "--approved", str(bundle), str(FOUR_RANK / "boot.log"), *gpus, "--json"])
        gates.append([(c["name"], c["passed"]) for c in json.loads(capsys.readouterr().out)["checks"]])
    assert records[0] == records[1] and records[0][1]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    # the same checks, and at --at Prometheus also shows the running value (none here: cannot be judged)
    assert gates[1] == [*gates[0], ("running value", None)]
