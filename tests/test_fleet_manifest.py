"""Manifests are data (issue 25): what a row may name, labels and host names on the terminal and on disk,
and http(s) fleets read from Python's own HTTP server on 127.0.0.1, started and stopped here.

Hosts are copies of the committed sample (data/fleet/small, data/fleet/make_fleet.py, seed 13): Llama-3.1-70B,
TP=8, vLLM 0.26.0, one KV block = 655,360 B. Reserve 1 GiB throughout.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import threading

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main

GiB = 2**30
FLEET = DATA_DIR / "fleet" / "small"
CLEAN = ("gpu-00000", "gpu-00002", "gpu-00004", "gpu-00006")
H100 = "NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.26.0"
FILES = ("boot.log", "nvidia-smi-gpu.csv", "nvidia-smi-apps.csv")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the server prints no request lines
        pass


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A folder served by ``http.server`` on a free 127.0.0.1 port: yields (folder, base URL)."""
    folder = tmp_path_factory.mktemp("web")
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def copy_hosts(folder, hosts=CLEAN):
    for host in hosts:
        shutil.copytree(FLEET / host, folder / host, dirs_exist_ok=True)
    return folder


def manifest(folder, rows, header="host,path,zone") -> str:
    """Write ``manifest.csv`` in ``folder`` from rows (lists of cells, CSV-quoted); returns its path."""
    import csv
    import io

    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header.split(","))
    writer.writerows(rows)
    (folder / "manifest.csv").write_text(text.getvalue())
    return str(folder / "manifest.csv")


def host_rows(hosts=CLEAN, prefix="", zone="us-east-1a"):
    return [[host, f"{prefix}{host}/{name}", zone] for host in hosts for name in FILES]


def plan(*args: str) -> int:
    return main(["fleet", "plan", *args, "--reserve", "1GiB", "--scheduler", "synchronous"])


def test_http_manifest_relative_and_absolute_rows_plan_as_local(web, tmp_path, capsys):  # issue 25
    folder, base = web
    copy_hosts(folder / "fleet")
    rows = host_rows(CLEAN[:2]) + host_rows(CLEAN[2:], prefix=f"{base}/fleet/")
    remote = manifest(folder / "fleet", rows)
    assert plan(f"{base}/fleet/manifest.csv", "--model", "llama-3.1-70b", "--json") == 0
    served = json.loads(capsys.readouterr().out)
    local = copy_hosts(tmp_path / "local")
    manifest(local, host_rows())
    assert plan(str(local / "manifest.csv"), "--model", "llama-3.1-70b", "--json") == 0
    here = json.loads(capsys.readouterr().out)
    assert served["excluded"] == [] and remote
    (a,), (b,) = served["classes"], here["classes"]
    assert a["hosts"] == list(CLEAN) and a["host_budgets"] == b["host_budgets"]
    assert a["uniform_budget_bytes"] == b["uniform_budget_bytes"] and a["key"] == b["key"]


@pytest.mark.parametrize(
    "row",
    [
        "file:///etc/hostname",
        "../../etc/hostname",
        "gpu-00000/../../../etc/hostname",
        "gpu-00000/%2e%2e/%2e%2e/x.log",
        "http://127.0.0.2:1/fleet/gpu-00000/boot.log",
    ],
)
def test_remote_manifest_names_only_its_own_server(web, capsys, row):  # issue 25
    folder, base = web
    copy_hosts(folder / "scoped")
    manifest(folder / "scoped", [*host_rows(CLEAN[:3]), ["gpu-00006", row, "us-east-1a"]])
    assert plan(f"{base}/scoped/manifest.csv") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {base}/scoped/manifest.csv:11: {row!r}: a manifest at {base}/ names only objects under "
        f"{base}/ (no other scheme or bucket, no '..')"
    ]


def test_host_name_never_leaves_out_and_nothing_is_reused_unfetched(web, tmp_path, capsys):  # issue 25
    folder, base = web
    copy_hosts(folder / "escape")
    hosts = ["../../../escaped", *CLEAN[1:]]
    rows = [[h, f"{src}/{name}", "us-east-1a"] for h, src in zip(hosts, CLEAN) for name in FILES]
    manifest(folder / "escape", rows)
    out = tmp_path / "a" / "b" / "out"
    # a file already where an unsafe name would have put the fetched log, and where the safe name puts it
    from kvplan.escape import safe_component
    from kvplan.fleet.bundles import HOST_PREFIX

    safe = safe_component(hosts[0], HOST_PREFIX)  # host- and 16 hex digits of the name's SHA-256

    planted = [
        out / "inputs" / "../../../escaped" / "boot.log",
        out / "inputs" / safe / "boot.log",
    ]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("INFO 11-24 09:55:51 stale text that was never fetched\n")
    before = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    assert plan(f"{base}/escape/manifest.csv", "--model", "llama-3.1-70b", "--out", str(out), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    (c,) = data["classes"]
    assert c["approved"] and c["hosts"] == sorted(hosts)
    after = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    assert after == before  # nothing written outside --out
    fetched = out / "inputs" / safe / "boot.log"
    assert fetched.read_bytes() == (FLEET / "gpu-00000" / "boot.log").read_bytes()


def test_label_with_newline_cannot_forge_plan_lines(tmp_path, capsys):  # issue 25
    folder = copy_hosts(tmp_path / "fleet")
    forged = "us-east-1a: 4 host(s)  --kv-cache-memory-bytes=80000000000\nwave 1  canary  x"
    manifest(folder, host_rows(zone=forged))
    assert plan(str(folder / "manifest.csv"), "--class-by", "zone", "--model", "llama-3.1-70b", "--json") == 0
    value = json.loads(capsys.readouterr().out)["classes"][0]["uniform_budget_bytes"]
    assert plan(str(folder / "manifest.csv"), "--class-by", "zone", "--model", "llama-3.1-70b") == 0
    out = capsys.readouterr().out.splitlines()
    waves = [line for line in out if line.startswith("wave ")]
    assert len(waves) == 2  # canaries, then the rest: one line each, as printed for a plain label
    # the flag each wave line ends with is the class's value; the forged one stays inside its label
    assert [re.findall(r"--kv-cache-memory-bytes=(\d+)$", line) for line in waves] == [[str(value)]] * 2
    assert all("\\n" in line for line in waves)


def test_manifest_listing_one_hosts_files_under_another_is_refused(tmp_path, capsys):  # issue 25
    folder = copy_hosts(tmp_path / "fleet")
    rows = [*host_rows(CLEAN[:3]), ["gpu-00006", "gpu-00002/boot.log", "us-east-1a"]]
    assert plan(manifest(folder, rows)) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {folder / 'manifest.csv'}:11: 'gpu-00002/boot.log' is listed under host 'gpu-00006' and, on "
        "line 5, under host 'gpu-00002': a file is the evidence of one host"
    ]


def test_row_that_is_no_log_excludes_its_host_and_never_reaches_a_bundle(tmp_path, capsys):  # issue 25
    folder = copy_hosts(tmp_path / "fleet")
    secret = "aws_secret_access_key = kvplan-test-never-copied"
    (folder / "credentials").write_text(f"[default]\naws_access_key_id = AKIA0\n{secret}\n")
    rows = [*host_rows(), ["gpu-00000", "credentials", "us-east-1a"]]
    out = tmp_path / "out"
    status = plan(manifest(folder, rows), "--min-hosts", "2", "--out", str(out), "--json")
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    assert data["excluded"] == [
        {
            "host": "gpu-00000",
            "reason": f"{folder / 'credentials'}: not a vLLM log (no vLLM boot found): expected vLLM startup "
            "lines such as 'Free memory on device (…) on startup', 'Available KV cache memory: … GiB' or 'GPU KV "
            "cache size: N tokens'",
        }
    ]
    assert data["classes"][0]["approved"] and data["classes"][0]["hosts"] == list(CLEAN[1:])
    assert not [p for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_empty_manifest_is_exit_2_as_an_empty_folder(tmp_path, capsys):  # issue 25
    (tmp_path / "empty").mkdir()
    assert plan(str(tmp_path / "empty")) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert plan(manifest(tmp_path, [])) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path / 'manifest.csv'}: no host rows after the header (expected host,path[,label...] rows)"
    ]


def test_host_name_with_newline_and_escape_is_one_line(tmp_path, capsys):  # issue 25
    folder = copy_hosts(tmp_path / "fleet")
    host = "h-9\nwave 1  canary  x: 9 host(s)  --kv-cache-memory-bytes=80000000000\x1b[2K"
    rows = [*host_rows(), [host, "h-9/boot.log", "us-east-1a"]]  # its file is missing: it is excluded
    assert plan(manifest(folder, rows), "--model", "llama-3.1-70b") == 0
    out = capsys.readouterr().out.splitlines()
    excluded = [line for line in out if line.startswith("excluded ")]
    assert excluded == [
        "excluded h-9\\nwave 1  canary  x: 9 host(s)  --kv-cache-memory-bytes=80000000000\\x1b[2K: manifest "
        "line 14: h-9/boot.log: no such file"
    ]
    assert not any("\x1b" in line for line in out)
    assert [line.rsplit("=", 1)[-1] for line in out if line.startswith("wave ")] != ["80000000000"]
    assert len([line for line in out if line.startswith("wave ")]) == 2
