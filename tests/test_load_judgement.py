"""Load evidence that cannot be judged, or is evidence for another value, blocks; /metrics is read in bounds.

Scenario A (data/load/): the four-rank boot approved at 12 GiB = 12,884,377,600 B (9,830 blocks of
1,310,720 B); the manual canary's log states ``'kv_cache_memory_bytes': 12884377600``. The overload run's
/metrics file has 20 scrapes, each with one ``vllm:num_preemptions_total{engine="0",…}`` sample (line 30 is the
first), counting 30 preemptions over the run.
"""

import re
import resource
import subprocess
import sys

import pytest

from kvplan import DATA_DIR, evidence
from kvplan.cli import main
from kvplan.io.load import LoadFormatError, read_load_evidence
from kvplan.load import LOAD_VALUE_CHECK, PREEMPTION_CHECK, load_checks
from kvplan.plan import decide, read_evidence
from kvplan.units import parse_size
from tests.test_gate import FOUR_RANK, _approve, gate

LOAD = DATA_DIR / "load"
OVERLOAD_METRICS = LOAD / "manual-canary-overload" / "metrics.prom"
MANUAL_LOG = LOAD / "manual-canary" / "server.log"
APPROVED_BYTES = 9_830 * 1_310_720  # 12 GiB in whole blocks = 12,884,377,600 B
PREEMPTIONS = PREEMPTION_CHECK.format(max_preemptions=0)


@pytest.fixture(scope="module")
def four_rank_bundle(tmp_path_factory):
    """Scenario A approved at 12 GiB (tests/test_gate.py's bundle)."""
    return _approve(tmp_path_factory.mktemp("a"), FOUR_RANK / "boot.log", "0.9GiB", "llama-3.1-70b", 4, 32768)


def counters_read(tmp_path, value: str, first: str | None = None):
    """The overload run's /metrics file with its preemption counters reading ``value`` (the first scrape's
    reading ``first`` when given)."""
    lines = OVERLOAD_METRICS.read_text().splitlines()
    samples = [n for n, line in enumerate(lines) if line.startswith("vllm:num_preemptions_total{")]
    for position, n in enumerate(samples):
        lines[n] = re.sub(r"\} \S+", "} " + (first if first and position == 0 else value), lines[n])
    path = tmp_path / "metrics.prom"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_unreadable_preemption_counters_cannot_be_judged_and_say_why(tmp_path):  # issue 25
    # every counter +Inf: the run's preemptions are unknown because of the samples, not because "V1 stats
    # lines before 0.11.1 omit them" (the wrong cause given before)
    path = counters_read(tmp_path, "+Inf")
    check = load_checks(read_load_evidence([path]))[1]
    assert check.name == PREEMPTIONS and check.passed is None
    assert check.detail.startswith(
        f"the preemption counter cannot be read: vllm:num_preemptions_total at {path}:30 is +Inf, "
    )
    assert "and 17 more (not a finite number)" in check.detail  # 20 samples: the first three named


def test_a_counter_unreadable_after_the_first_scrape_is_no_pass(tmp_path):  # issue 25
    # the first scrape reads 0, the rest +Inf: counting the readable samples only gave 0 preemptions in the
    # run and a PASS
    path = counters_read(tmp_path, "+Inf", first="0.0")
    check = load_checks(read_load_evidence([path]))[1]
    assert check.passed is None
    assert "0 counted from the readable samples" in check.detail
    assert f"{path}:78 is +Inf" in check.detail  # the second scrape's sample (48 lines per scrape)


def test_gate_names_the_unreadable_counters(capsys, four_rank_bundle, tmp_path):  # issue 25
    path = counters_read(tmp_path, "NaN")
    status, checks = gate(capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", path)
    assert status == 2  # cannot judge
    assert checks[PREEMPTIONS].passed is None
    assert f"vllm:num_preemptions_total at {path}:30 is NaN" in checks[PREEMPTIONS].detail


def test_approval_records_the_unreadable_counters_as_cannot_judge(tmp_path):  # issue 25
    path = counters_read(tmp_path, "+Inf")
    decision = decide(
        read_evidence([(FOUR_RANK / "boot.log", "inputs/boot.log")], loads=[(path, "inputs/metrics.prom")]),
        evidence.Policy(parse_size("0.9GiB")),
        load_policy=evidence.LoadPolicy(),
    )
    [check] = [check for check in decision.checks if check.name == PREEMPTIONS]
    assert check.passed is None
    assert "vllm:num_preemptions_total at inputs/metrics.prom:30 is +Inf" in check.detail


def test_approve_refuses_unreadable_counters_with_the_true_reason(capsys, tmp_path):  # issue 25
    # it approved (exit 0) before: a check that cannot be judged did not refuse, and its reason was wrong
    path = counters_read(tmp_path, "+Inf")
    argv = ["approve", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--approver", "A"]
    argv += ["--model", "llama-3.1-70b", "--tp", "4", "--out", str(tmp_path / "out"), "--load", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"{PREEMPTIONS}: the preemption counter cannot be read: vllm:num_preemptions_total at {path}:30 is +Inf"
        in err
    )
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def at_15_gib(tmp_path):
    """The manual canary's log as a run at 15 GiB = 16,106,127,360 B."""
    path = tmp_path / "server.log"
    path.write_text(
        MANUAL_LOG.read_text().replace(
            "'kv_cache_memory_bytes': 12884377600", "'kv_cache_memory_bytes': 16106127360"
        )
    )
    return path


def test_gate_fails_load_evidence_at_another_value(capsys, four_rank_bundle, tmp_path):  # issue 25
    status, checks = gate(
        capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", at_15_gib(tmp_path), "--year", "2026"
    )
    assert status == 1
    assert checks[LOAD_VALUE_CHECK].passed is False
    assert checks[LOAD_VALUE_CHECK].detail.startswith(
        f"{tmp_path / 'server.log'} states --kv-cache-memory-bytes=16106127360 (15.00 GiB), not the approved "
        "12884377600 (12.00 GiB)"
    )
    # at the approved value the check is not there (a bundle approved before keeps its checks)
    status, checks = gate(
        capsys, four_rank_bundle, FOUR_RANK / "boot.log", "--load", MANUAL_LOG, "--year", "2026"
    )
    assert LOAD_VALUE_CHECK not in checks


def test_approve_refuses_load_evidence_at_another_value(capsys, tmp_path):  # issue 25
    argv = ["approve", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--approver", "A"]
    argv += ["--model", "llama-3.1-70b", "--tp", "4"]  # 12 GiB in whole blocks: 12,884,377,600 B
    out = tmp_path / "out"
    assert (
        main([*argv, "--out", str(out), "--load", str(at_15_gib(tmp_path)), "--year", "2026"]) == 1
    )  # a FAIL
    assert "not approved: load run at the approved value: " in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []
    assert main([*argv, "--out", str(out), "--load", str(MANUAL_LOG), "--year", "2026"]) == 0


def huge_label(tmp_path, mib: int):
    """A /metrics file whose sample carries one label value of ``mib`` MiB (line 3)."""
    path = tmp_path / f"label-{mib}.prom"
    path.write_text(
        "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{"x" * (mib << 20)}"}} 3.0\n'
    )
    return path


def _limit_memory() -> None:
    limit = 2 << 30  # 2 GiB of address space: the 20 MiB label took 3.5 GB before
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_20_mib_label_value_is_refused_in_bounded_memory(tmp_path):  # issue 25
    path = huge_label(tmp_path, 20)
    done = subprocess.run(
        [sys.executable, "-m", "kvplan", "load", str(path), "--json"],
        capture_output=True,
        text=True,
        preexec_fn=_limit_memory,
    )
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr.startswith(f"error: {path}:3: a line longer than 16 MiB (16,777,216 characters)")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_long_label_under_the_cap_is_matched_in_bounded_memory(tmp_path):  # issue 25
    # a 4 MiB label: the label pattern held state for each character (about 170 bytes a character: a 720 MB
    # peak here) before its quoted values were unrolled; now the process peaks near 130 MB (pandas included)
    path = huge_label(tmp_path, 4)
    code = (
        "import re, sys\n"
        "from kvplan.io.load import read_load_evidence\n"
        "frame, _ = read_load_evidence([sys.argv[1]])\n"
        "status = open('/proc/self/status').read()\n"  # VmHWM: this process's peak, not its parent's
        "print(int(frame['running'][0]), re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    running, peak_kib = map(int, done.stdout.split())
    assert running == 3
    assert peak_kib < 400 * 1024


def test_a_log_line_over_the_cap_is_refused(tmp_path):  # issue 25
    path = tmp_path / "server.log"
    path.write_text(MANUAL_LOG.read_text() + "x" * ((16 << 20) + 1) + "\n")
    lines = MANUAL_LOG.read_text().count("\n")
    with pytest.raises(
        LoadFormatError, match=rf"^{re.escape(str(path))}:{lines + 1}: a line longer than 16 MiB"
    ):
        read_load_evidence([path], year=2026)
