"""Scrapes of one /metrics file that disagree are judged on the safe side (issue 28): two
``vllm:cache_config_info`` values of one engine fail the load value check and the running value check, and make
the capacity unknown; a counter that goes down without a restart makes the run's preemptions unknown."""

import json
import re
from pathlib import Path

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.load import read_metrics_snapshots
from kvplan.load.checks import CAPACITY_CHECK, LOAD_VALUE_CHECK, load_checks
from tests.test_running_value import FOUR_RANK, RUNNING_CHECK, bundle  # noqa: F401  (the approved bundle)

SCRAPES = sorted(
    (DATA_DIR / "load" / "manual-canary" / "metrics").glob("*.prom")
)  # 6 scrapes at the approved value
APPROVED, OTHER = 'kv_cache_memory_bytes="12884377600"', 'kv_cache_memory_bytes="16106127360"'
PREEMPTIONS = re.compile(r"^(vllm:num_preemptions_total\{[^}]*\}) 0\.0$", re.M)


def one_file(tmp_path: Path, edits: dict[int, tuple]) -> Path:
    """The six scrapes in one file, scrape ``i`` (from 0) edited by ``edits[i]`` = (pattern, replacement)."""
    texts = []
    for i, scrape in enumerate(SCRAPES):
        text = scrape.read_text()
        if i in edits:
            pattern, replacement = edits[i]
            text, count = re.subn(pattern, replacement, text)
            assert count == 1
        texts.append(text)
    path = tmp_path / "canary.prom"
    path.write_text("".join(texts))
    return path


def gate(capsys, bundle: Path, *argv) -> tuple[int, dict]:  # noqa: F811
    status = main(["gate", "--approved", str(bundle), str(FOUR_RANK / "boot.log"), *map(str, argv), "--json"])
    return status, {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_two_kv_values_in_one_file_fail_the_value_checks(capsys, bundle, tmp_path):  # noqa: F811  # issue 28
    canary = one_file(tmp_path, {3: (re.escape(APPROVED), OTHER)})  # the 4th scrape shows 15 GiB
    assert gate(capsys, bundle, "--load", *SCRAPES)[0] == 0  # the same scrapes, one value: PASS
    status, checks = gate(capsys, bundle, "--load", canary)
    assert status == 1 and checks[LOAD_VALUE_CHECK]["passed"] is False
    lines = [m.start() for m in re.finditer("^# 20", canary.read_text(), re.M)]  # where each scrape starts
    first, fourth = (canary.read_text().count("\n", 0, lines[i]) + 1 for i in (0, 3))
    assert checks[LOAD_VALUE_CHECK]["detail"].startswith(
        f"{canary}:{fourth}: vllm:cache_config_info of engine 0 shows kv_cache_memory_bytes=16106127360, but "
        f"12884377600 at {canary}:{first}"
    )
    # --metrics: every value the file shows is judged, not only its last scrape's (the approved one)
    status, checks = main_running(capsys, bundle, canary)
    assert status == 1 and [c["passed"] for c in checks] == [False, True]


def main_running(capsys, bundle: Path, canary: Path) -> tuple[int, list[dict]]:  # noqa: F811
    status = main(
        ["gate", "--approved", str(bundle), str(FOUR_RANK / "boot.log"), "--metrics", str(canary), "--json"]
    )
    return status, [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == RUNNING_CHECK]


def test_two_block_counts_in_one_file_leave_the_capacity_unknown(tmp_path):  # issue 28
    canary = one_file(tmp_path, {3: ('num_gpu_blocks="9830"', 'num_gpu_blocks="9000"')})
    reading = read_metrics_snapshots([canary])
    assert [n.code for n in reading.warnings] == ["cache-config-disagrees"]
    # without the disagreement: 157,280 tokens (9,830 blocks × 16) against 155,856 profiled is judged
    checks = load_checks(reading, profiled_kv_cache_tokens=155_856, kv_cache_tokens=157_280)
    capacity = [c for c in checks if c.name.startswith(CAPACITY_CHECK)]
    assert [c.passed for c in capacity] == [None]
    assert "num_gpu_blocks=9000, but 9830" in capacity[0].detail


def test_a_counter_down_without_a_restart_leaves_preemptions_unknown(capsys, bundle, tmp_path):  # noqa: F811  # issue 28
    # 0, 0, 0, 0, 5, 2 preemptions with the same _created time: 5 counted, then the scrapes disagree (not 2 more)
    canary = one_file(tmp_path, {4: (PREEMPTIONS, r"\1 5.0"), 5: (PREEMPTIONS, r"\1 2.0")})
    reading = read_metrics_snapshots([canary])
    [down] = [n for n in reading.warnings if n.code == "counter-down-without-restart"]
    assert "vllm:num_preemptions_total 5 → 2" in down and "restarted" not in " ".join(reading.warnings)
    assert reading.frame["preemptions"].iloc[4] == 5 and reading.frame["preemptions"].isna().iloc[5]
    status, checks = gate(capsys, bundle, "--load", canary, "--max-preemptions", "8")
    [preemptions] = [c for name, c in checks.items() if name.startswith("preemptions")]
    assert status == 2 and preemptions["passed"] is None  # 5 + unknown against 8: cannot be judged
    assert "went down at" in preemptions["detail"]


def test_two_kv_values_of_one_engine_in_one_scrape_are_refused(capsys, bundle, tmp_path):  # noqa: F811  # issue 28
    # one scrape holding a second vllm:cache_config_info series of engine 0 at 15 GiB (16,106,127,360 B): before,
    # the later series silently replaced the approved one and the load value check judged only it. No vLLM
    # exports two sizes of one engine at one instant: refused, naming the file and the metric's line (48: the
    # first scrape's cache_config_info line).
    text = SCRAPES[0].read_text()
    series = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    canary = tmp_path / "canary.prom"
    canary.write_text(text.replace(series, f"{series}\n{series.replace(APPROVED, OTHER)}"))
    with_same = tmp_path / "same.prom"
    with_same.write_text(
        text.replace(series, f"{series}\n{series}")
    )  # the same series twice: one value, read
    assert (
        read_metrics_snapshots([with_same]).frame.shape[0]
        == read_metrics_snapshots([SCRAPES[0]]).frame.shape[0]
    )
    status = main(["gate", "--approved", str(bundle), str(FOUR_RANK / "boot.log"), "--load", str(canary)])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1
    assert error.startswith(f"error: {canary}:48: vllm:cache_config_info is 1, a second series of one engine")
