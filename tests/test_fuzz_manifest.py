"""Fuzz fleet manifests (issue 25): hostile host names, labels and paths never change the structure of the answer.

A manifest is built from the committed sample's host files (data/fleet/small) under hostile host names and labels
(newlines, ANSI escapes, ``../``, slashes, quotes, bidirectional overrides, 300-character names), with rows
that name another host's file, a file that is no log (a secret), a missing file, a ``file://`` URL, a ``..``
climb or an absolute path, rows of the wrong width and blank ones. For every manifest ``kvplan fleet plan
MANIFEST --out OUT`` must:

- exit 0 or 2, never a traceback; exit 2 is exactly one ``error:`` line;
- print one record per line: no control character reaches stdout, and every wave line ends with the flag of a
  class the JSON answer approves;
- write nothing outside ``OUT``, and copy no file that is not a vLLM log or snapshot (the planted secret) into it;
- put each host in at most one class, and no file under two hosts (a host's evidence is its own).

The remote scope rule (:func:`kvplan.fleet.inputs._entry` of a remote manifest) is fuzzed on its own: any row it accepts is a
URL under the manifest's scheme and bucket with no ``..`` part. The module prints the cases tried and held per
target (``-s``). Bounded for ``make unit``; a longer run: ``KVPLAN_FUZZ_EXAMPLES=500 python -m pytest -q -s
tests/test_fuzz_manifest.py`` (``make fuzz``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.fleet.inputs import FleetInputError, _entry

#: Manifests per run (each plans twice and approves its classes: ~4 s); the scope rule runs 40 times as many.
EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "5"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="KVPLAN_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FLEET = DATA_DIR / "fleet" / "small"
SOURCES = ("gpu-00000", "gpu-00002", "gpu-00019", "gpu-00034")
SECRET = "kvplan-fuzz-secret-never-copied"
HOSTILE = [
    "gpu-00000",
    "gpu-00002",
    "../../../escaped",
    "..",
    ".",
    "/etc",
    "a/b",
    "h\nwave 1  canary  x: 1 host(s)  --kv-cache-memory-bytes=80000000000",
    "h\x1b[2J",
    "h\r--kv-cache-memory-bytes=1",
    "h\u202egnp.exe",
    "h 1; hosts: gpu-00000",
    "'\"`$(id)`",
    "x" * 300,
    "ünïcödé",
]
FILES = ("{src}/boot.log", "{src}/nvidia-smi-gpu.csv", "{src}/nvidia-smi-apps.csv")
#: What a host's rows may carry besides its own files (most hosts carry nothing else).
EXTRAS = {
    "": [],
    "secret": ["secret.txt"],
    "missing": ["no-such/boot.log"],
    "climb": ["../outside/boot.log"],
    "file url": ["file://{root}/{src}/boot.log"],
    "absolute": ["{root}/{src}/nvidia-smi-gpu.csv"],
    "another host's log": ["gpu-00000/boot.log"],
}
#: Cases per target: tried (a manifest planned), held (every property held); exit 0 and exit 2 counted apart.
COUNTS: dict[str, Counter] = {}


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    """Print the cases tried and held when the module ends (shown with ``-s`` or ``-rA``)."""
    yield
    for target, counts in sorted(COUNTS.items()):
        print(f"\n{target}: " + ", ".join(f"{key} {value}" for key, value in sorted(counts.items())))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A folder holding the sample hosts' files, a secret file, and a folder outside the fleet."""
    root = tmp_path_factory.mktemp("fuzz-manifest")
    for host in SOURCES:
        shutil.copytree(FLEET / host, root / "fleet" / host)
    (root / "fleet" / "secret.txt").write_text(f"aws_secret_access_key = {SECRET}\n")
    shutil.copytree(FLEET / "gpu-00004", root / "outside")
    return root


hosts = st.lists(
    st.tuples(
        st.sampled_from(HOSTILE) | st.text(max_size=12),
        st.sampled_from(SOURCES),
        st.sampled_from(["", "", "", "", *EXTRAS]),
        st.sampled_from(HOSTILE[:6]) | st.text(max_size=8),
        st.sampled_from(["", "", "", "", "", "", "extra field", "blank row"]),
    ),
    max_size=4,
    unique_by=lambda drawn: drawn[1],
)


def write_manifest(world: Path, drawn) -> Path:
    """One host per drawn tuple: its source's files under its (hostile) name and label, and its extra rows."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["host", "path", "zone"])
    root = world / "fleet"
    for host, source, extra, zone, shape in drawn:
        for path in (*FILES, *EXTRAS[extra]):
            writer.writerow([host, path.format(src=source, root=root), zone])
        if shape:
            writer.writerow([] if shape == "blank row" else [host, FILES[0].format(src=source), zone, "x"])
    manifest = root / "manifest.csv"
    manifest.write_text(text.getvalue())
    return manifest


def files_under(folder: Path) -> dict[str, bytes | None]:
    return {str(p): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


@FUZZ
@given(drawn=hosts)
def test_manifest_never_changes_the_structure_of_the_answer(world, tmp_path_factory, capsys, drawn):
    counts = COUNTS.setdefault("plan", Counter())
    manifest = write_manifest(world, drawn)
    out = tmp_path_factory.mktemp("out")
    before = files_under(world)
    command = ["fleet", "plan", str(manifest), "--reserve", "1GiB", "--scheduler", "synchronous"]
    command += ["--min-hosts", "1", "--model", "llama-3.1-70b", "--out", str(out)]
    counts["tried"] += 1
    status = main([*command, "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and status in (0, 2)
    assert files_under(world) == before  # nothing written beside the fleet (outside --out)
    assert not any(SECRET.encode() in (data or b"") for data in files_under(out).values())
    if status == 2:
        assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: ")
        counts["exit 2"] += 1
        counts["held"] += 1
        return
    data = json.loads(captured.out)
    hosts = [host for c in data["classes"] for host in c["hosts"]]
    assert len(hosts) == len(set(hosts))  # a host is in one class at most
    flags = {c["flag"] for c in data["classes"] if c["approved"]}
    shutil.rmtree(out)
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", line) for line in lines)
    waves = [line for line in lines if line.startswith("wave ")]
    assert len(waves) == len(data["waves"])
    # each wave line ends with its class bundle's launch flags, the value first (issue 24)
    ends = [
        re.search(r"(--kv-cache-memory-bytes=\d+) --gpu-memory-utilization=[\d.]+$", line) for line in waves
    ]
    assert all(end is not None and end[1] in flags for end in ends)
    counts["exit 0"] += 1
    counts["held"] += 1


ROOTS = ["s3://fleet/small", "http://127.0.0.1:8000/fleet"]
SEGMENTS = ["gpu-1", "boot.log", "..", ".", "%2e%2e", "%2E%2e", "", "fleet", "other", "small", "a:b"]


@settings(max_examples=EXAMPLES * 40, deadline=None, derandomize="KVPLAN_FUZZ_EXAMPLES" not in os.environ)
@given(
    base=st.sampled_from(ROOTS),
    scheme=st.sampled_from(["", "s3://", "s3a://", "http://", "https://", "file://", "gs://"]),
    host=st.sampled_from(["", "fleet", "other", "127.0.0.1:8000", "127.0.0.1:8001"]),
    parts=st.lists(st.sampled_from(SEGMENTS) | st.text(max_size=4), max_size=5),
)
def test_remote_rows_stay_under_their_manifests_bucket(base, scheme, host, parts):
    import fsspec

    counts = COUNTS.setdefault("remote rows", Counter())
    fs, path = (
        fsspec.core.url_to_fs(base, anon=True) if base.startswith("s3") else fsspec.core.url_to_fs(base)
    )
    row = f"{scheme}{host}/{'/'.join(parts)}" if scheme else "/".join(parts)
    root = base.split("://")[0] + "://" + base.split("://")[1].split("/")[0] + "/"
    counts["tried"] += 1
    try:
        kept = _entry(fs, path, row, "m.csv:2")[1]
    except FleetInputError as exc:
        assert str(exc).startswith("m.csv:2: ")
        counts["refused"] += 1
        counts["held"] += 1
        return
    url = fs.unstrip_protocol(kept)
    assert url.startswith(root) or url == root.rstrip("/")  # an object of the bucket, or the bucket itself
    assert ".." not in [unquote(part) for part in url.split("://", 1)[1].split("/")]
    counts["accepted"] += 1
    counts["held"] += 1
