"""The running value: a canary's vllm:cache_config_info against the approved value, in gate (issue 28)."""

import json
from pathlib import Path

import pytest

from kvplan import DATA_DIR, evidence
from kvplan.checks.canary import RUNNING_CHECK, check_running_values
from kvplan.cli import main
from kvplan.io.model_config import resolve_model_config
from kvplan.io.prometheus import RunningValue, running_values_of_metrics
from kvplan.units import parse_size

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
OVERLOAD_METRICS = DATA_DIR / "load" / "manual-canary-overload" / "metrics.prom"
APPROVED = 12_884_377_600  # make demo's value: 9,830 blocks × 1,310,720 B
BLOCK = 1_310_720  # Llama-3.1-70B at TP 4: 16 tokens × 80 layers × (K, V) × 2 KV heads × 128 × 2 B


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    layout = evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    out = tmp_path_factory.mktemp("approved")
    return evidence.approve(
        [FOUR_RANK / "boot.log"], out, evidence.Policy(parse_size("0.9GiB")), "QA", layout=layout
    )


def gate(capsys, bundle: Path, *argv) -> tuple[int, list[dict]]:
    status = main(["gate", "--approved", str(bundle), str(FOUR_RANK / "boot.log"), *map(str, argv), "--json"])
    checks = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == RUNNING_CHECK]
    return status, checks


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "canary.prom"
    text = OVERLOAD_METRICS.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_the_approved_value_passes(capsys, bundle):  # issue 28
    status, checks = gate(capsys, bundle, "--metrics", OVERLOAD_METRICS)
    assert status == 0
    # the last scrape (line 913) shows 12884377600 B and 9,830 blocks = 12884377600 // 1310720
    assert checks == [
        {
            "name": RUNNING_CHECK,
            "passed": True,
            "detail": f"{OVERLOAD_METRICS}:913 engine 0: kv_cache_memory_bytes=12884377600 = the approved "
            "12884377600; num_gpu_blocks=9830 ≥ the approved 9830",
            "applicable": True,
        }
    ]


def test_another_running_value_fails(capsys, bundle, tmp_path):  # issue 28
    canary = _edited(tmp_path, 'kv_cache_memory_bytes="12884377600"', 'kv_cache_memory_bytes="16106127360"')
    status, checks = gate(capsys, bundle, "--metrics", canary)
    assert status == 1
    assert checks[0]["passed"] is False
    assert "kv_cache_memory_bytes=16106127360 ≠ the approved 12884377600" in checks[0]["detail"]


def test_fewer_blocks_or_no_manual_value_fails(capsys, bundle, tmp_path):  # issue 28
    canary = _edited(tmp_path, 'num_gpu_blocks="9830"', 'num_gpu_blocks="9829"')
    status, checks = gate(capsys, bundle, "--metrics", canary)
    assert (status, checks[0]["passed"]) == (1, False)
    assert "num_gpu_blocks=9829 < the approved 9830" in checks[0]["detail"]
    profiled = DATA_DIR / "load" / "profiled-canary" / "federate.prom"  # kv_cache_memory_bytes="None"
    status, checks = gate(capsys, bundle, "--metrics", profiled)
    assert (status, checks[0]["passed"]) == (1, False)
    assert "runs without --kv-cache-memory-bytes" in checks[0]["detail"]


def test_no_cache_config_info_cannot_be_judged(capsys, bundle, tmp_path):  # issue 28
    bare = tmp_path / "bare.prom"
    bare.write_text('# 2026-11-27T11:03:28Z\nvllm:num_requests_running{engine="0"} 3\n')
    status, checks = gate(capsys, bundle, "--metrics", bare)
    assert (status, checks[0]["passed"]) == (2, None)
    assert checks[0]["detail"].endswith("shows no vllm:cache_config_info: the running value is unknown")


def test_the_log_line_gives_the_blocks(capsys, bundle, tmp_path):  # issue 28
    line = (
        "(APIServer pid=48500) INFO 11-29 10:00:10 [loggers.py:142] Engine 000: vllm cache_config_info with "
        "initialization after num_gpu_blocks is: {}\n"
    )
    log = tmp_path / "canary.log"
    for blocks, passed in ((9830, True), (9000, False)):
        log.write_text((FOUR_RANK / "boot.log").read_text() + line.format(blocks))
        status = main(["gate", "--approved", str(bundle), str(log), "--json"])
        checks = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == RUNNING_CHECK]
        assert [c["passed"] for c in checks] == [passed]
        assert status == (0 if passed else 1)


def test_release_without_the_label_cannot_be_judged():  # issue 28
    # vLLM before kv_cache_memory_bytes was a CacheConfig field: blocks suffice, the bytes are unknown
    [check] = check_running_values([RunningValue("m.prom:3", "0", "absent", 9830)], APPROVED, BLOCK)
    assert check.passed is None
    [value] = running_values_of_metrics([OVERLOAD_METRICS])
    assert (value.kv_cache_memory_bytes, value.num_gpu_blocks) == (APPROVED, 9830)
