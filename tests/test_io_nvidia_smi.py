"""nvidia-smi CSV snapshots: both queries, every --format variant, the join to the ledger, and refusals.

The bundled snapshots are data/boots/four-rank/nvidia-smi-{gpu,apps}.csv (scenario A, data/README.md):
four H100s shared with a sidecar vLLM server (pids 31877–31880, 24643 MiB each) plus co-tenants on GPU 1
(1244 MiB), GPU 2 (6032 MiB) and GPU 3 (2467 MiB); the logged boot's workers are pids 48602–48605.
"""

import json

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.gpu_snapshot import APP_COLUMNS, GPU_COLUMNS, NvidiaSmiError, read_nvidia_smi_csv
from kvplan.io.nvidia_smi import (
    TOTAL_ROUNDING_BYTES,
    NvidiaSmiWarning,
    gpu_context,
    gpu_index_by_pid,
    gpu_index_by_rank,
    join_nvidia_smi,
    read_nvidia_smi_snapshots,
    total_bytes_match,
)
from kvplan.room import read_vllm_logs_rooms
from tests.conftest import GiB, MiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
SHARED_GPU = DATA_DIR / "boots" / "shared-gpu"
# vLLM's logged totals, parsed from 2 decimals of GiB: 79.19 × 2^30 and 94.97 × 2^30, rounded to whole bytes
H100_LOGGED_TOTAL = 85_029_615_043
RTX_PRO_LOGGED_TOTAL = 101_973_261_025
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
    return read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-gpu.csv")[0]


@pytest.fixture(scope="module")
def apps():
    return read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-apps.csv")[0]


def test_query_gpu_snapshot_columns_and_bytes(gpus):
    assert read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-gpu.csv")[1].kind == "gpus"
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
    assert read_nvidia_smi_csv(FOUR_RANK / "nvidia-smi-apps.csv")[1].kind == "apps"
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
    joined = join_nvidia_smi(ledger, gpus, apps)[0]
    assert "gpu_name" not in ledger.columns  # a new frame; the input is untouched
    assert joined["rank"].tolist() == [3, 2, 1, 0]
    assert joined["other_process_bytes"].tolist() == [27110 * MiB, 30675 * MiB, 25887 * MiB, 24643 * MiB]
    assert set(joined["gpu_name"]) == {"NVIDIA H100 80GB HBM3"}
    assert set(joined["driver_version"]) == {"580.95.05"}


def test_join_uses_the_rank_map_for_pids_not_in_the_snapshot(gpus, apps):
    # A boot from another day: its pids are gone, so only an explicit rank -> GPU map can place it.
    ledger = pd.DataFrame({"source": ["old.log"] * 2, "rank": [0, 1], "pid": [9001, 9002]})
    unplaced = join_nvidia_smi(ledger, gpus, apps)[0]
    assert unplaced["other_process_bytes"].isna().all()
    assert unplaced["gpu_name"].isna().all()
    placed = join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank={0: 2, 1: 3})[0]
    # Nothing of these pids is excluded, so the logged workers of the running boot count as others:
    # GPU 2: 24643 + 6032 + 48100 MiB; GPU 3: 24643 + 2467 + 48081 MiB
    assert placed["other_process_bytes"].tolist() == [78775 * MiB, 75191 * MiB]


def test_join_excludes_every_logged_vllm_pid():
    gpus = read_nvidia_smi_csv(GPU_CSV)[0]
    apps = read_nvidia_smi_csv(APPS_CSV)[0]
    ledger = pd.DataFrame({"source": ["x.log"], "rank": [0], "pid": [100]})
    assert int(join_nvidia_smi(ledger, gpus, apps)[0].loc[0, "other_process_bytes"]) == 2000 * MiB
    # pid 200 is another boot's rank 0 in the ledger: a vLLM worker, not another process on GPU 0
    two_boots = pd.DataFrame({"source": ["x.log"] * 2, "boot": [0, 1], "rank": [0, 0], "pid": [100, 200]})
    excluded = join_nvidia_smi(two_boots, gpus, apps)[0]
    assert excluded["other_process_bytes"].tolist() == [0, 0]


def test_join_refuses_a_pid_on_another_gpu_than_the_rank_map(gpus, apps):
    ledger = pd.DataFrame({"source": ["boot.log"], "rank": [0], "pid": [48602]})
    with pytest.raises(NvidiaSmiError, match=r"boot\.log, rank 0: pid 48602 runs on GPU 0.*says GPU 1"):
        join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank={0: 1})[0]


def test_join_refuses_a_different_gpu_name_already_in_the_ledger(gpus, apps):
    ledger = pd.DataFrame({"source": ["boot.log"], "rank": [0], "pid": [48602], "gpu_name": ["NVIDIA A100"]})
    with pytest.raises(NvidiaSmiError, match="another machine"):
        join_nvidia_smi(ledger, gpus, apps)[0]


def test_noheader_nounits_variants_read_the_same_values():
    gpus, metadata = read_nvidia_smi_csv("0, GPU-aaaa, NVIDIA L40S, 580.95.05, 46068, 30000, 15451\n")
    assert metadata.kind == "gpus"
    assert int(gpus.loc[0, "memory_total_bytes"]) == 46068 * MiB  # 48,305,799,168 B
    with_units = read_nvidia_smi_csv("GPU-aaaa, 100, python3, 2000 MiB")[0]
    without = read_nvidia_smi_csv("GPU-aaaa, 100, python3, 2000")[0]
    assert with_units["used_memory_bytes"].tolist() == without["used_memory_bytes"].tolist() == [2000 * MiB]
    crlf = "gpu_uuid, pid, process_name, used_gpu_memory\r\nGPU-aaaa, 7, x, 5\r\n"  # nounits header, CRLF
    nounits_header = read_nvidia_smi_csv(crlf)[0]
    assert int(nounits_header.loc[0, "used_memory_bytes"]) == 5 * MiB


def test_not_available_memory_is_na_not_zero():
    gpus = read_nvidia_smi_csv(GPU_CSV)[0]
    assert pd.isna(gpus.loc[1, "memory_used_bytes"])
    header = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    apps, _ = read_nvidia_smi_csv(header + "GPU-bbbb, 3, x, [N/A]\n")
    context = gpu_context(gpus, apps, vllm_pids=[])
    assert int(context.loc[0, "other_process_bytes"]) == 0  # GPU 0 has no process in this snapshot
    assert pd.isna(context.loc[1, "other_process_bytes"])  # unknown, never 0


def test_process_name_with_commas_is_kept_whole():
    apps = read_nvidia_smi_csv("GPU-aaaa, 7, python3 serve.py --a 1, --b 2, 512 MiB")[0]
    assert apps.loc[0, "process_name"] == "python3 serve.py --a 1, --b 2"
    assert int(apps.loc[0, "used_memory_bytes"]) == 512 * MiB


def test_empty_snapshots():
    header_only, metadata = read_nvidia_smi_csv("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n")
    assert header_only.empty and metadata.kind == "apps"
    assert read_nvidia_smi_csv("\n", kind="apps")[0].empty
    with pytest.raises(NvidiaSmiError, match="empty nvidia-smi snapshot; pass kind='apps'"):
        read_nvidia_smi_csv("\n\n")[0]


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
        read_nvidia_smi_csv(text)[0]


def test_kind_mismatch_and_missing_file(tmp_path):
    with pytest.raises(NvidiaSmiError, match="expected a 'apps' snapshot, found 'gpus'"):
        read_nvidia_smi_csv(GPU_CSV, kind="apps")[0]
    with pytest.raises(NvidiaSmiError, match=r"missing\.csv: cannot read nvidia-smi snapshot"):
        read_nvidia_smi_csv(tmp_path / "missing.csv")[0]


def test_a_process_on_a_gpu_the_gpu_snapshot_lacks_is_refused():
    gpus = read_nvidia_smi_csv(GPU_CSV)[0]
    apps = read_nvidia_smi_csv("GPU-cccc, 5, python3, 10 MiB")[0]
    with pytest.raises(NvidiaSmiError, match=r"<text>, line 1: process 5 runs on GPU-cccc"):
        gpu_context(gpus, apps, vllm_pids=[])


def test_shared_gpu_snapshot_of_scenario_b():
    folder = DATA_DIR / "boots" / "shared-gpu"
    gpus = read_nvidia_smi_csv(folder / "nvidia-smi-gpu.csv")[0]
    apps = read_nvidia_smi_csv(folder / "nvidia-smi-apps.csv")[0]
    ledger = pd.DataFrame({"source": ["boot.log"] * 3, "rank": [0, 1, 2], "pid": [61305, 61306, 61307]})
    joined = join_nvidia_smi(ledger, gpus, apps)[0]
    # GPU 0 hosts a second vLLM server (pid 20931, 17152 MiB = 17,985,175,552 B); GPUs 1 and 2 nothing else
    assert joined["other_process_bytes"].tolist() == [17_985_175_552, 0, 0]
    assert set(joined["gpu_name"]) == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    # 97887 MiB total, 638 MiB reserved: free = 97887 − 638 − used; GPU 0 used 94195 MiB → 3054 MiB free
    assert int(gpus.loc[0, "memory_free_bytes"]) == 3054 * MiB


def test_without_a_process_snapshot_other_process_bytes_is_unknown_not_zero(gpus):
    snapshot, apps = read_nvidia_smi_snapshots([FOUR_RANK / "nvidia-smi-gpu.csv"])
    assert apps is None  # no process snapshot, unlike an empty one
    ledger = pd.DataFrame({"source": ["boot.log"] * 4, "rank": [0, 1, 2, 3], "pid": WORKER_PIDS})
    with pytest.warns(NvidiaSmiWarning, match="memory of other processes on each GPU is unknown"):
        joined, metadata = join_nvidia_smi(ledger, snapshot, apps, gpu_index_by_rank={0: 0, 1: 1, 2: 2, 3: 3})
    assert joined["other_process_bytes"].isna().all()  # was 0 on every rank: a sum over no processes
    assert set(joined["gpu_name"]) == {"NVIDIA H100 80GB HBM3"}  # the GPU snapshot still joins
    assert "--query-compute-apps" in metadata.warnings[0]
    assert gpu_context(gpus, None, vllm_pids=[])["other_process_bytes"].isna().all()
    # a process snapshot with no process in it does say "nothing else": 0
    nobody = read_nvidia_smi_csv("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n")[0]
    assert gpu_context(gpus, nobody, vllm_pids=[])["other_process_bytes"].tolist() == [0] * 4


def test_cli_ledger_without_the_apps_snapshot_leaves_other_processes_unknown(capsys):
    argv = ["ledger", f"{FOUR_RANK}/boot.log", "--nvidia-smi", f"{FOUR_RANK}/nvidia-smi-gpu.csv", "--json"]
    assert main(argv) == 0  # the CLI reports the warning in its JSON, not as a Python warning
    data = json.loads(capsys.readouterr().out)
    assert [row["other_process_bytes"] for row in data["rows"]] == [None] * 4
    assert [w for w in data["warnings"] if "no nvidia-smi --query-compute-apps snapshot" in w]
    assert main([*argv[:-1], "--nvidia-smi", f"{FOUR_RANK}/nvidia-smi-apps.csv", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    # with it: sidecar 24643 MiB on each GPU, + 1244 / 6032 / 2467 MiB on GPUs 1–3 (24.1–30.0 GiB)
    assert [row["other_process_bytes"] for row in rows] == [
        24643 * MiB,
        25887 * MiB,
        30675 * MiB,
        27110 * MiB,
    ]


def test_total_bytes_match_accepts_the_bundled_samples_and_rounding_only():
    assert (round(79.19 * GiB), round(94.97 * GiB)) == (H100_LOGGED_TOTAL, RTX_PRO_LOGGED_TOTAL)
    # H100: 81,559 MiB = 85,520,809,984 B; − 85,029,615,043 B logged = 491,194,941 B (468.4 MiB reserved)
    assert total_bytes_match(H100_LOGGED_TOTAL, 81_559 * MiB)
    # RTX PRO 6000: 97,887 MiB = 102,641,958,912 B; − 101,973,261,025 B = 668,697,887 B (637.7 MiB)
    assert total_bytes_match(RTX_PRO_LOGGED_TOTAL, 97_887 * MiB)
    # crossed: 102,641,958,912 − 85,029,615,043 = 17,612,343,869 B (16.4 GiB) more than logged
    assert not total_bytes_match(H100_LOGGED_TOTAL, 97_887 * MiB)
    # crossed the other way: the log says 101,973,261,025 B, more than the snapshot's 85,520,809,984 B
    assert not total_bytes_match(RTX_PRO_LOGGED_TOTAL, 81_559 * MiB)
    # rounding: 0.005 GiB (5,368,709 B) + 1 MiB (1,048,576 B) = 6,417,285 B either way; reserved ≤ 1 GiB
    assert TOTAL_ROUNDING_BYTES == 6_417_285
    smi = 81_559 * MiB
    assert total_bytes_match(smi + 6_417_285, smi) and not total_bytes_match(smi + 6_417_286, smi)
    # the driver may keep max(1 GiB, 3 % of memory.total): 3 % of 85,520,809,984 B = 2,565,624,299 B
    # (int), + 6,417,285 B rounding = 2,572,041,584 B below the snapshot's total is the most accepted
    assert total_bytes_match(smi - 2_572_041_584, smi) and not total_bytes_match(smi - 2_572_041_585, smi)
    # a 24 GiB GPU: 3 % is 0.72 GiB, so the 1 GiB floor holds: 1,073,741,824 + 6,417,285 = 1,080,159,109 B
    small = 24 * GiB
    assert total_bytes_match(small - 1_080_159_109, small)
    assert not total_bytes_match(small - 1_080_159_110, small)


@pytest.mark.parametrize("folder", [FOUR_RANK, SHARED_GPU])
def test_the_bundled_snapshots_join_their_own_logs(folder):
    ledger, _ = read_vllm_logs_rooms(folder / "boot.log")
    gpus, apps = read_nvidia_smi_snapshots([folder / "nvidia-smi-gpu.csv", folder / "nvidia-smi-apps.csv"])
    by_rank = gpu_index_by_rank(ledger, gpus, apps)
    assert by_rank == {rank: rank for rank in range(len(gpus))}
    assert join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank=by_rank)[0]["gpu_name"].notna().all()


def test_a_gpu_whose_total_differs_from_the_logged_total_is_refused():
    ledger, _ = read_vllm_logs_rooms(FOUR_RANK / "boot.log")  # 4 × H100, 79.19 GiB logged on each rank
    gpus, apps = read_nvidia_smi_snapshots([SHARED_GPU / "nvidia-smi-gpu.csv"])  # 3 × 97,887 MiB
    # 97,887 MiB = 95.59 GiB: 16.4 GiB more than 79.19 GiB (see the test above)
    message = (
        r"shared-gpu/nvidia-smi-gpu\.csv, line 2: GPU 0 has memory\.total 97,887 MiB \(95\.59 GiB\), but "
        r".*four-rank/boot\.log, rank 0 logged 79\.19 GiB total GPU memory.*another machine"
    )
    with pytest.raises(NvidiaSmiError, match=message):
        gpu_index_by_rank(ledger, gpus, apps)
    with pytest.raises(NvidiaSmiError, match=message):  # an explicit rank map is checked as well
        join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank={0: 0})[0]
    with pytest.raises(NvidiaSmiError, match=r"line 3: GPU 1 .* rank 2 logged"):  # rank 2 on GPU 1 by pid
        other, _ = read_nvidia_smi_csv(f"{gpus.loc[1, 'gpu_uuid']}, 48604, x, 1")
        join_nvidia_smi(ledger[ledger["rank"] == 2], gpus, other)


def test_cli_ledger_refuses_the_snapshot_of_another_machine(capsys):
    status = main(["ledger", f"{FOUR_RANK}/boot.log", "--nvidia-smi", f"{SHARED_GPU}/nvidia-smi-gpu.csv"])
    assert status == 2
    assert "GPU 0 has memory.total 97,887 MiB (95.59 GiB), but " in capsys.readouterr().err


def test_a_snapshot_with_fewer_gpus_than_ranks_is_refused(tmp_path):
    three = tmp_path / "three-gpus.csv"  # the four-rank snapshot without GPU 3 (its last line)
    three.write_text("".join((FOUR_RANK / "nvidia-smi-gpu.csv").read_text().splitlines(True)[:4]))
    ledger, _ = read_vllm_logs_rooms(FOUR_RANK / "boot.log")  # ranks 0–3, totals that fit GPUs 0–2
    gpus, apps = read_nvidia_smi_snapshots([three])
    message = r"three-gpus\.csv: the snapshot lists 3 GPU\(s\) \(index 0, 1, 2\), none for rank\(s\) 3 of"
    with pytest.raises(NvidiaSmiError, match=message):
        gpu_index_by_rank(ledger, gpus, apps)
    # with a process snapshot of the same node the ranks are placed by pid: only GPUs 0–2 matter
    lines = (FOUR_RANK / "nvidia-smi-apps.csv").read_text().splitlines(True)
    apps = read_nvidia_smi_csv("".join(lines[:9]))[0]  # header + the 8 processes on GPUs 0–2
    assert gpu_index_by_rank(ledger, gpus, apps) == {0: 0, 1: 1, 2: 2}


def test_two_snapshots_of_one_kind_are_refused():
    # which of two GPU snapshots describes the boot? kvplan does not pick one silently
    gpu = FOUR_RANK / "nvidia-smi-gpu.csv"
    with pytest.raises(NvidiaSmiError, match="a second --query-gpu snapshot"):
        read_nvidia_smi_snapshots([gpu, FOUR_RANK / "nvidia-smi-apps.csv", gpu])


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # issue 11 item 21: nvidia-smi's free and used are parts of the total (used = total − free − reserved):
        # never above it
        ("46068 MiB, 2048 MiB, 46069 MiB", r"line 2: memory\.free 46,069 MiB is more than memory\.total"),
        ("46068 MiB, 46100 MiB, 0 MiB", r"line 2: memory\.used 46,100 MiB is more than memory\.total"),
        # 30,000 + 16,069 = 46,069 MiB: 1 MiB over the total passes as rounding; 24,000 + 24,000 does not
        ("46068 MiB, 24000 MiB, 24000 MiB", r"line 2: memory\.used \+ memory\.free = 48,000 MiB is more"),
        ("46068 MiB, -5 MiB, 43403 MiB", r"line 2: memory_used_bytes '-5 MiB' is not a valid value"),
    ],
)
def test_memory_nvidia_smi_cannot_print_is_refused_with_file_and_line(tmp_path, row, message):
    path = tmp_path / "gpu.csv"
    path.write_text(GPU_CSV.splitlines()[0] + f"\n0, GPU-aaaa, NVIDIA L40S, 580.95.05, {row}\n")
    with pytest.raises(NvidiaSmiError, match=rf"{path}, {message}"):
        read_nvidia_smi_csv(path)[0]
    rounding = GPU_CSV.replace("15451 MiB", "16069 MiB")  # used + free = total + 1 MiB: whole-MiB rounding
    assert int(read_nvidia_smi_csv(rounding)[0].loc[0, "memory_free_bytes"]) == 16069 * MiB
