"""nvidia-smi CSV snapshots: both queries, every --format variant, the join to the ledger, and refusals.

The bundled snapshots are data/boots/four-rank/nvidia-smi-{gpu,apps}.csv (scenario A, data/README.md):
four H100s shared with a sidecar vLLM server (pids 31877–31880, 24643 MiB each) plus co-tenants on GPU 1
(1244 MiB), GPU 2 (6032 MiB) and GPU 3 (2467 MiB); the logged boot's workers are pids 48602–48605.
"""

import pandas as pd
import pytest

from kvplan.config import DATA_DIR
from kvplan.io.nvidia_smi import (
    APP_COLUMNS,
    GPU_COLUMNS,
    NvidiaSmiError,
    gpu_context,
    gpu_index_by_pid,
    join_nvidia_smi,
    read_nvidia_smi_csv,
)
from tests.conftest import MiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
WORKER_PIDS = [48602, 48603, 48604, 48605]

GPU_CSV = """\
index, uuid, name, driver_version, memory.total [MiB], memory.used [MiB], memory.free [MiB]
0, GPU-aaaa, NVIDIA L40S, 580.95.05, 46068 MiB, 30000 MiB, 15451 MiB
1, GPU-bbbb, NVIDIA L40S, 580.95.05, 46068 MiB, [N/A], 46068 MiB
"""
APPS_CSV = """\
gpu_uuid, pid, process_name, used_gpu_memory [MiB]
GPU-aaaa, 100, VLLM::Worker_TP0, 28000 MiB
GPU-aaaa, 200, python3, 2000 MiB
GPU-bbbb, 101, VLLM::Worker_TP1, 28000 MiB
"""


@pytest.fixture(scope="module")
def gpus():
    return read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-gpu.csv")


@pytest.fixture(scope="module")
def apps():
    return read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-apps.csv")


def test_query_gpu_snapshot_columns_and_bytes(gpus):
    assert gpus.attrs["kind"] == "gpus"
    assert list(gpus.columns) == [*GPU_COLUMNS, "source", "line"]
    assert gpus["gpu_index"].tolist() == [0, 1, 2, 3]
    assert set(gpus["gpu_name"]) == {"NVIDIA H100 80GB HBM3"}
    assert set(gpus["driver_version"]) == {"580.95.05"}
    # 81559 MiB = 81559 × 1,048,576 B
    assert gpus["memory_total_bytes"].tolist() == [85_520_809_984] * 4
    # GPU 2: used 78775 MiB, free 2314 MiB (81559 − 470 MiB reserved − 78775)
    assert int(gpus.loc[2, "memory_used_bytes"]) == 78775 * MiB
    assert int(gpus.loc[2, "memory_free_bytes"]) == 2314 * MiB
    assert gpus["line"].tolist() == [2, 3, 4, 5]


def test_query_compute_apps_snapshot(apps):
    assert apps.attrs["kind"] == "apps"
    assert list(apps.columns) == [*APP_COLUMNS, "source", "line"]
    assert len(apps) == 11  # 4 sidecar workers + 3 co-tenants + 4 logged workers
    row = apps[apps["pid"] == 50740].iloc[0]
    assert row["process_name"] == "/opt/conda/bin/python"
    assert row["gpu_uuid"] == "GPU-2e7b9f14-c6a0-4d83-9e5f-31c8a7d2b04e"
    assert int(row["used_memory_bytes"]) == 6032 * MiB  # 6,324,748,288 B
    assert row["line"] == 8  # header, then GPU 0's two processes, then GPU 1's three


def test_other_process_bytes_per_gpu_excludes_the_logged_workers(gpus, apps):
    context = gpu_context(gpus, apps, WORKER_PIDS)
    # GPU 0: sidecar 24643 MiB; GPU 1: + 1244; GPU 2: + 6032; GPU 3: + 2467 (MiB)
    assert context["other_process_bytes"].tolist() == [
        24643 * MiB,
        (24643 + 1244) * MiB,
        (24643 + 6032) * MiB,
        (24643 + 2467) * MiB,
    ]
    assert context["gpu_index"].tolist() == [0, 1, 2, 3]


def test_processes_with_the_same_name_are_told_apart_by_pid(gpus, apps):
    # The sidecar's workers are also called VLLM::Worker_TP<n>; only the pid says whose they are.
    context = gpu_context(gpus, apps, vllm_pids=[])
    # GPU 0 with nothing excluded: 24643 + 48090 MiB
    assert int(context.loc[0, "other_process_bytes"]) == (24643 + 48090) * MiB


def test_gpu_index_by_pid(gpus, apps):
    mapping = gpu_index_by_pid(gpus, apps)
    assert [mapping[pid] for pid in WORKER_PIDS] == [0, 1, 2, 3]
    assert mapping[50740] == 2


def test_join_fills_the_ledger_by_pid(gpus, apps):
    ledger = pd.DataFrame(
        {"source": ["boot.log"] * 4, "rank": [3, 2, 1, 0], "pid": pd.array(WORKER_PIDS[::-1], dtype="Int64")}
    )
    joined = join_nvidia_smi(ledger, gpus, apps)
    assert "gpu_name" not in ledger.columns  # a new frame; the input is untouched
    assert joined["rank"].tolist() == [3, 2, 1, 0]
    assert joined["other_process_bytes"].tolist() == [27110 * MiB, 30675 * MiB, 25887 * MiB, 24643 * MiB]
    assert set(joined["gpu_name"]) == {"NVIDIA H100 80GB HBM3"}
    assert set(joined["driver_version"]) == {"580.95.05"}


def test_join_uses_the_rank_map_for_pids_not_in_the_snapshot(gpus, apps):
    # A boot from another day: its pids are gone, so only an explicit rank -> GPU map can place it.
    ledger = pd.DataFrame({"source": ["old.log"] * 2, "rank": [0, 1], "pid": [9001, 9002]})
    unplaced = join_nvidia_smi(ledger, gpus, apps)
    assert unplaced["other_process_bytes"].isna().all()
    assert unplaced["gpu_name"].isna().all()
    placed = join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank={0: 2, 1: 3})
    # Nothing of these pids is excluded, so the logged workers of the running boot count as others:
    # GPU 2: 24643 + 6032 + 48100 MiB; GPU 3: 24643 + 2467 + 48081 MiB
    assert placed["other_process_bytes"].tolist() == [78775 * MiB, 75191 * MiB]


def test_join_excludes_extra_vllm_pids():
    gpus = read_nvidia_smi_csv(GPU_CSV)
    apps = read_nvidia_smi_csv(APPS_CSV)
    ledger = pd.DataFrame({"source": ["x.log"], "rank": [0], "pid": [100]})
    assert int(join_nvidia_smi(ledger, gpus, apps).loc[0, "other_process_bytes"]) == 2000 * MiB
    excluded = join_nvidia_smi(ledger, gpus, apps, extra_vllm_pids=[200])
    assert int(excluded.loc[0, "other_process_bytes"]) == 0


def test_join_refuses_a_pid_on_another_gpu_than_the_rank_map(gpus, apps):
    ledger = pd.DataFrame({"source": ["boot.log"], "rank": [0], "pid": [48602]})
    with pytest.raises(NvidiaSmiError, match=r"boot\.log, rank 0: pid 48602 runs on GPU 0.*says GPU 1"):
        join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank={0: 1})


def test_join_refuses_a_different_gpu_name_already_in_the_ledger(gpus, apps):
    ledger = pd.DataFrame({"source": ["boot.log"], "rank": [0], "pid": [48602], "gpu_name": ["NVIDIA A100"]})
    with pytest.raises(NvidiaSmiError, match="another machine"):
        join_nvidia_smi(ledger, gpus, apps)


def test_noheader_nounits_variants_read_the_same_values():
    gpus = read_nvidia_smi_csv("0, GPU-aaaa, NVIDIA L40S, 580.95.05, 46068, 30000, 15451\n")
    assert gpus.attrs["kind"] == "gpus"
    assert int(gpus.loc[0, "memory_total_bytes"]) == 46068 * MiB  # 48,305,799,168 B
    with_units = read_nvidia_smi_csv("GPU-aaaa, 100, python3, 2000 MiB")
    without = read_nvidia_smi_csv("GPU-aaaa, 100, python3, 2000")
    assert with_units["used_memory_bytes"].tolist() == without["used_memory_bytes"].tolist() == [2000 * MiB]
    crlf = "gpu_uuid, pid, process_name, used_gpu_memory\r\nGPU-aaaa, 7, x, 5\r\n"  # nounits header, CRLF
    nounits_header = read_nvidia_smi_csv(crlf)
    assert int(nounits_header.loc[0, "used_memory_bytes"]) == 5 * MiB


def test_not_available_memory_is_na_not_zero():
    gpus = read_nvidia_smi_csv(GPU_CSV)
    assert pd.isna(gpus.loc[1, "memory_used_bytes"])
    apps = read_nvidia_smi_csv("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-bbbb, 3, x, [N/A]\n")
    context = gpu_context(gpus, apps, vllm_pids=[])
    assert int(context.loc[0, "other_process_bytes"]) == 0  # GPU 0 has no process in this snapshot
    assert pd.isna(context.loc[1, "other_process_bytes"])  # unknown, never 0


def test_process_name_with_commas_is_kept_whole():
    apps = read_nvidia_smi_csv("GPU-aaaa, 7, python3 serve.py --a 1, --b 2, 512 MiB")
    assert apps.loc[0, "process_name"] == "python3 serve.py --a 1, --b 2"
    assert int(apps.loc[0, "used_memory_bytes"]) == 512 * MiB


def test_empty_snapshots():
    header_only = read_nvidia_smi_csv("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n")
    assert header_only.empty and header_only.attrs["kind"] == "apps"
    assert read_nvidia_smi_csv("\n", kind="apps").empty
    with pytest.raises(NvidiaSmiError, match="empty nvidia-smi snapshot; pass kind='apps'"):
        read_nvidia_smi_csv("\n\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("index, uuid, name\n0, GPU-a, x\n", "header 'index, uuid, name' is neither"),
        ("hello, world\n", r"line 1: expected an nvidia-smi CSV header.*got 2 fields"),
        (GPU_CSV.replace("30000 MiB", "lots"), r"line 2: memory_used_bytes 'lots' is not a valid value"),
        (APPS_CSV.replace("200,", "two hundred,"), r"line 3: pid 'two hundred' is not a valid value"),
        (GPU_CSV.replace("46068 MiB, [N/A]", "[N/A]"), "line 3: expected 7 comma-separated"),
    ],
)
def test_bad_snapshots_name_the_line(text, message):
    with pytest.raises(NvidiaSmiError, match=message):
        read_nvidia_smi_csv(text)


def test_kind_mismatch_and_missing_file(tmp_path):
    with pytest.raises(NvidiaSmiError, match="expected a 'apps' snapshot, found 'gpus'"):
        read_nvidia_smi_csv(GPU_CSV, kind="apps")
    with pytest.raises(NvidiaSmiError, match=r"missing\.csv: cannot read nvidia-smi snapshot"):
        read_nvidia_smi_csv(tmp_path / "missing.csv")


def test_a_process_on_a_gpu_the_gpu_snapshot_lacks_is_refused():
    gpus = read_nvidia_smi_csv(GPU_CSV)
    apps = read_nvidia_smi_csv("GPU-cccc, 5, python3, 10 MiB")
    with pytest.raises(NvidiaSmiError, match=r"<text>, line 1: process 5 runs on GPU-cccc"):
        gpu_context(gpus, apps, vllm_pids=[])


def test_shared_gpu_snapshot_of_scenario_b():
    folder = DATA_DIR / "boots" / "shared-gpu"
    gpus = read_nvidia_smi_csv(folder / "nvidia-smi-gpu.csv")
    apps = read_nvidia_smi_csv(folder / "nvidia-smi-apps.csv")
    ledger = pd.DataFrame({"source": ["boot.log"] * 3, "rank": [0, 1, 2], "pid": [61305, 61306, 61307]})
    joined = join_nvidia_smi(ledger, gpus, apps)
    # GPU 0 hosts a second vLLM server (pid 20931, 17152 MiB = 17,985,175,552 B); GPUs 1 and 2 nothing else
    assert joined["other_process_bytes"].tolist() == [17_985_175_552, 0, 0]
    assert set(joined["gpu_name"]) == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    # 97887 MiB total, 638 MiB reserved: free = 97887 − 638 − used; GPU 0 used 94195 MiB → 3054 MiB free
    assert int(gpus.loc[0, "memory_free_bytes"]) == 3054 * MiB
