"""kvplan's Prometheus alert rules, checked and unit-tested by Debian's promtool (issue 28).

Each case is a ``promtool test rules`` file (JSON, which YAML reads): series that fire and series that do not,
with the alerts expected at an evaluation time, labels and annotations exact.
"""

import json
import subprocess
from pathlib import Path

import pytest

from kvplan.io.prometheus import alert_rules
from tests.prometheus_server import PROMTOOL, needs_prometheus

pytestmark = needs_prometheus
DIGEST = "d974eb240843" + "0" * 52
APPROVED, RESERVE = 12_884_377_600, 966_367_641  # make demo's value; 0.9 GiB = 0.9 × 2^30 B, rounded down
CONFIG = '{{engine="0",kv_cache_memory_bytes="{}",num_gpu_blocks="9830"}}'


def _annotations(summary: str) -> dict:
    return {"summary": summary, "kvplan_bundle_digest": f"sha256:{DIGEST}"}


def _promtool(tmp_path: Path, rules: str, tests: list[dict]) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yml").write_text(rules)
    (tmp_path / "tests.yml").write_text(
        json.dumps({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests})
    )
    check = subprocess.run(
        [PROMTOOL, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    return subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )


def _case(series: list[tuple[str, str]], alert: str, fired: list[dict]) -> dict:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [{"eval_time": "20m", "alertname": alert, "exp_alerts": fired}],
    }


def test_rules_fire_and_stay_quiet(tmp_path):  # issue 28
    rules = alert_rules(DIGEST, APPROVED, RESERVE, max_preemptions=0, kv_usage_pct=95)
    reserve = "a GPU has less free memory than the approved reserve of 966367641 bytes"
    gpu = {"gpu": "2", "Hostname": "node-a", "severity": "critical"}
    # fmt: off
    tests = [
        # the approved value: quiet; 16106127360 B (15 GiB): fires for that engine
        _case([(f"vllm:cache_config_info{CONFIG.format(APPROVED)}", "1x30")], "KvplanRunningValueDiffers", []),
        _case(
            [(f"vllm:cache_config_info{CONFIG.format(16_106_127_360)}", "1x30")],
            "KvplanRunningValueDiffers",
            [
                {
                    "exp_labels": {"engine": "0", "kv_cache_memory_bytes": "16106127360",
                                   "num_gpu_blocks": "9830", "severity": "critical"},
                    "exp_annotations": _annotations(
                        "an engine runs another KV value than the approved --kv-cache-memory-bytes=12884377600"
                    ),
                }
            ],
        ),
        # 921 MiB free = 965,738,496 B < 966,367,641 B for 20 min: fires; 922 MiB = 966,787,072 B: quiet
        _case([('DCGM_FI_DEV_FB_FREE{gpu="2",Hostname="node-a"}', "921x30")], "KvplanGpuFreeBelowReserve",
              [{"exp_labels": gpu, "exp_annotations": _annotations(reserve)}]),
        _case([('DCGM_FI_DEV_FB_FREE{gpu="2",Hostname="node-a"}', "922x30")], "KvplanGpuFreeBelowReserve", []),
        # below the reserve for only 5 minutes (warm-up), then back: quiet at 20 min
        _case([('DCGM_FI_DEV_FB_FREE{gpu="2",Hostname="node-a"}', "500x5 2000x25")],
              "KvplanGpuFreeBelowReserve", []),
        # one preemption a minute: increase over 15 min ≈ 15 > 0 fires; a flat counter is quiet
        _case([('vllm:num_preemptions_total{engine="0"}', "0+1x30")], "KvplanPreemptions",
              [{"exp_labels": {"engine": "0", "severity": "critical"}, "exp_annotations": _annotations(
                  "more than 0 preemption(s) in 15m, beyond the approved load policy")}]),
        _case([('vllm:num_preemptions_total{engine="0"}', "7x30")], "KvplanPreemptions", []),
        # 99 % KV usage for 20 min fires; 90 % does not
        _case([('vllm:kv_cache_usage_perc{engine="0"}', "0.99x30")], "KvplanKvCacheUsageHigh",
              [{"exp_labels": {"engine": "0", "severity": "critical"},
                "exp_annotations": _annotations("KV cache usage above 95% for 15m")}]),
        _case([('vllm:kv_cache_usage_perc{engine="0"}', "0.9x30")], "KvplanKvCacheUsageHigh", []),
    ]
    # fmt: on
    result = _promtool(tmp_path, rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_another_approved_value_makes_the_running_value_rule_fire(tmp_path):  # issue 28
    # the same running engine at 12884377600 B; rules exported for an approval of 11 GiB = 11,811,160,064 B
    quiet = [
        _case([(f"vllm:cache_config_info{CONFIG.format(APPROVED)}", "1x30")], "KvplanRunningValueDiffers", [])
    ]
    assert _promtool(tmp_path, alert_rules(DIGEST, APPROVED, RESERVE), quiet).returncode == 0
    result = _promtool(tmp_path, alert_rules(DIGEST, 11_811_160_064, RESERVE), quiet)
    assert result.returncode == 1
    assert "KvplanRunningValueDiffers" in result.stdout + result.stderr
    assert "12884377600" in result.stdout + result.stderr  # the firing engine's label


@pytest.mark.parametrize("matchers", ['job="vllm-70b"', ""])
def test_rules_scoped_by_matchers_pass_promtool_check(tmp_path, matchers):  # issue 28
    rules = alert_rules(DIGEST, APPROVED, RESERVE, matchers=matchers)
    (tmp_path / "rules.yml").write_text(rules)
    check = subprocess.run(
        [PROMTOOL, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0 and "SUCCESS: 4 rules found" in check.stdout
    assert ('{job=\\"vllm-70b\\"}' in rules) is bool(matchers)  # JSON-escaped quotes in the YAML


def test_exported_rules_of_a_bundle_fire_for_another_running_value(tmp_path, capsys):  # issue 28
    # `kvplan export prometheus-rules` of make demo's approval (four-rank sample, Llama-3.1-70B TP4, reserve
    # 0.9 GiB = 966,367,642 B, rounded up to the safe side): the approved 12,884,377,600 B running is quiet, 16,106,127,360 B (15 GiB) fires
    from kvplan import DATA_DIR, evidence
    from kvplan.cli import main
    from kvplan.io.model_config import resolve_model_config
    from kvplan.units import parse_size

    layout = evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    boot = DATA_DIR / "boots" / "four-rank" / "boot.log"
    bundle = evidence.approve(
        [boot], tmp_path / "e", evidence.Policy(parse_size("0.9GiB")), "QA", layout=layout
    )
    assert main(["export", "prometheus-rules", str(bundle)]) == 0
    rules = capsys.readouterr().out
    digest = evidence.bundle_digest((bundle / "budget.json").read_bytes())
    assert f"sha256:{digest}" in rules and "966367642 bytes" in rules
    quiet = _case(
        [(f"vllm:cache_config_info{CONFIG.format(APPROVED)}", "1x30")], "KvplanRunningValueDiffers", []
    )
    assert _promtool(tmp_path, rules, [quiet]).returncode == 0
    other = _case(
        [(f"vllm:cache_config_info{CONFIG.format(16_106_127_360)}", "1x30")], "KvplanRunningValueDiffers", []
    )
    result = _promtool(tmp_path, rules, [other])
    assert result.returncode == 1 and "KvplanRunningValueDiffers" in result.stdout + result.stderr


def test_exported_preemption_rule_takes_the_bundles_load_policy(tmp_path, capsys):  # issue 28
    # approved with load evidence and --max-preemptions 3: the preemption rule fires above 3 in its window
    from kvplan import DATA_DIR
    from kvplan.cli import main

    boot, run = (
        DATA_DIR / "boots" / "four-rank" / "boot.log",
        DATA_DIR / "load" / "manual-canary" / "server.log",
    )
    argv = ["approve", str(boot), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "4"]
    argv += ["--load", str(run), "--max-preemptions", "3", "--approver", "QA", "--out", str(tmp_path / "e")]
    assert main(argv) == 0
    (bundle,) = (tmp_path / "e").iterdir()
    capsys.readouterr()
    assert main(["export", "prometheus-rules", str(bundle)]) == 0
    assert 'expr: "increase(vllm:num_preemptions_total[15m]) > 3"' in capsys.readouterr().out
