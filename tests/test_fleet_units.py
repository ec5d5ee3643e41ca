"""The fleet's small helpers on hand-made values (their doctests before issue 23 moved them here)."""

from kvplan.fleet.bundles import HostVerdict, class_note, note_hosts, stop_decision
from kvplan.fleet.classes import canary_hosts, class_name, gate_command, outlier_hosts
from kvplan.fleet.inputs import is_snapshot
from kvplan.fleet.planner import shared_evidence
from kvplan.fleet.read import HostReading, _short


def test_short_keeps_the_first_item_and_counts_the_rest():
    assert _short("a.log:3: rank 0 oom; a.log:4: rank 1 oom") == "a.log:3: rank 0 oom (+1 more)"
    assert _short("x" * 500) == "x" * 399 + "…"  # REASON_CHARS = 400 characters, the last one the ellipsis


def test_shared_evidence_names_the_other_hosts():  # issue 25
    a = HostReading("a", (), {}, {}, (), None, identities=("boot:1f2e",))
    b = HostReading("b", (), {}, {}, (), None, identities=("boot:1f2e", "gpu:GPU-7"))
    reasons = shared_evidence([a, b])
    assert (
        reasons["b"]
        == "the same boot (sha256 1f2e) is also under host(s) a: a boot is the evidence of one host"
    )
    assert (
        reasons["a"]
        == "the same boot (sha256 1f2e) is also under host(s) b: a boot is the evidence of one host"
    )


def test_class_name_gpu_driver_release_labels():
    key = {"gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "580.95.05", "vllm_version": "0.26.0"}
    assert (
        class_name(key, {"zone": "us-east-1a"})
        == "NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.26.0 / zone=us-east-1a"
    )
    assert class_name({}, {}) == "unknown GPU / unknown driver / vLLM unknown"


def test_outliers_below_the_split_bound_of_the_median():
    # median of 90, 99, 100, 100 is 99.5; 0.95 × 99.5 = 94.5: only c (90) is below
    assert outlier_hosts({"a": 100, "b": 100, "c": 90, "d": 99}, 0.95) == ["c"]


def test_canaries_are_the_limiting_host_then_the_nearest_the_median():
    # sorted 10, 12, 13, 20: the middle one (index 2) is c's 13; b is 1 away, c 0 away
    assert canary_hosts({"a": 10, "b": 12, "c": 13, "d": 20}, "a", 2) == ["a", "c"]


def test_gate_command_quotes_hosts():  # issue 25
    assert (
        gate_command("ev/b1", ["h1;rm -rf ~"])
        == "kvplan fleet gate --approved ev/b1 CANARY_FLEET --hosts 'h1;rm -rf ~'"
    )
    assert gate_command(None, ["a", "b"]) == "kvplan fleet gate --approved BUNDLE CANARY_FLEET --hosts a,b"


def test_snapshot_names():
    assert (is_snapshot("gpu-1/nvidia-smi-gpu.csv"), is_snapshot("gpu-1/dcgm.prom")) == (True, True)
    assert (is_snapshot("gpu-1/boot.log"), is_snapshot("gpu-1/ledger.csv")) == (False, False)


def test_note_hosts_reads_back_a_class_note():  # issue 25: a host name is data, not note structure
    assert note_hosts(class_note("H100", {}, ["h1", "h 2; hosts: h3"])) == ["h1", "h 2; hosts: h3"]
    assert note_hosts("CHG-1") is None


def test_stop_decision_stops_on_a_failed_host_and_holds_on_an_unjudged_one():
    assert stop_decision([HostVerdict("a", "b", True), HostVerdict("c", "b", False)]) == (
        1,
        "STOP: 1 of 2 host(s) failed: c",
    )
    assert stop_decision([HostVerdict("a", "b", True), HostVerdict("c", "b", None)])[0] == 2
    assert stop_decision([]) == (2, "HOLD: no host to judge")
    assert stop_decision([HostVerdict("a", "b", True)]) == (0, "GO: all 1 host(s) pass")
