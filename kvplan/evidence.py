"""The evidence bundle: an approved budget with everything needed to re-check it, written once.

One folder per approval, named ``YYYY-MM-DD-<hash>`` after the UTC date and the first 12 hex digits
of :func:`inputs_digest` (the SHA-256 of the input files' hashes, paths and roles, the policy, the
model layout, the admission plan, the approver, the note, the kvplan version and, with load-test
files, the load policy). It holds ``budget.json`` (schema in
``docs/budget-json.md``), ``ledger.csv``, ``SUMMARY.md``, ``evidence.log``, ``charts/*.png`` and a copy
of every input under ``inputs/`` (the logs, the ``nvidia-smi`` snapshots of the profiled boot when given, the
model config, load-test files), so :func:`verify_bundle` can recompute the decision anywhere. The
folder is assembled under a hidden temporary name beside the target (created with the process
umask, like the files in it) and renamed into place; any failure removes the temporary folder, and
an existing bundle is never overwritten or changed (nor written into: an output folder that is or lies
inside a bundle is refused). The folder name is a label: a copied or renamed bundle verifies by the
``inputs_digest`` inside its ``budget.json``, and the name that differs is only noted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from kvplan import __version__
from kvplan.budget import kv_cache_flag
from kvplan.columns import NEWER_THAN_0_1_0
from kvplan.gate import Approved
from kvplan.ledger import is_known
from kvplan.plan import (
    Decision,
    LoadPolicy,
    ModelLayout,
    Plan,
    Policy,
    decide,
    profiled_tokens,
    renamed,
    require_files,
)
from kvplan.plan.admission import capacity_rows
from kvplan.units import format_size
from kvplan.verdict import verdict_word

SCHEMA = "kvplan.budget"
SCHEMA_VERSION = 2
BUDGET_JSON = "budget.json"
INPUTS_DIR = "inputs"
CHARTS_DIR = "charts"
DIGEST_CHARS = 12
_CHUNK_BYTES = 1 << 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NVIDIA_SMI_ROLE = "nvidia-smi"

class BundleError(ValueError):
    """A bundle that cannot be read (missing folder, bad or unknown ``budget.json``)."""


class BundleExistsError(BundleError):
    """Approving into a folder that already holds a bundle: bundles are never overwritten."""


class BundleChangedError(BundleError):
    """A bundle that no longer verifies: a gate cannot judge a boot against it."""


class ApprovalError(ValueError):
    """A check at approval failed (e.g. the admission plan does not fit): no bundle is written."""


# --- hashes and names ---------------------------------------------------------------------------


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inputs_digest(file_hashes: Sequence[str], settings: Mapping[str, object]) -> str:
    """Hex SHA-256 over the inputs' hashes (in order) and the settings, as canonical JSON.

    >>> inputs_digest(["ab"], {"reserve_bytes": 1}) == inputs_digest(["ab"], {"reserve_bytes": 1})
    True
    >>> inputs_digest(["ab"], {"reserve_bytes": 1}) == inputs_digest(["ab"], {"reserve_bytes": 2})
    False
    """
    text = json.dumps({"files": list(file_hashes), "settings": settings}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def bundle_name(created: datetime, digest: str) -> str:
    """Folder name of a bundle: UTC date and the first 12 hex digits of its inputs digest.

    >>> bundle_name(datetime(2026, 11, 29, 10, 40, tzinfo=timezone.utc), "0123456789abcdef")
    '2026-11-29-0123456789ab'
    """
    return f"{created.astimezone(timezone.utc):%Y-%m-%d}-{digest[:DIGEST_CHARS]}"


def input_names(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Bundle-relative names of the input copies: ``inputs/<file name>``, numbered when names clash.

    >>> input_names(["a/reference.log", "b/canary.log"])
    ['inputs/reference.log', 'inputs/canary.log']
    >>> input_names(["a/x.log", "b/x.log"])
    ['inputs/1-x.log', 'inputs/2-x.log']
    """
    names = [Path(path).name for path in paths]
    if len(set(names)) == len(names):
        return [f"{INPUTS_DIR}/{name}" for name in names]
    return [f"{INPUTS_DIR}/{i}-{name}" for i, name in enumerate(names, start=1)]


def enclosing_bundle(path: str | os.PathLike) -> Path | None:
    """The bundle folder (holding ``budget.json``) that ``path`` is or lies inside, resolved; else None.

    ``path`` need not exist yet (an ``--out`` folder that approve would create).

    >>> enclosing_bundle("/no/such/folder") is None
    True
    """
    resolved = Path(path).resolve()
    return next((folder for folder in (resolved, *resolved.parents) if _is_bundle(folder)), None)


def _is_bundle(folder: Path) -> bool:
    """Whether ``folder`` holds a kvplan ``budget.json`` record (not any file of that name, e.g.
    ``kvplan budget --json > budget.json``)."""
    try:
        return json.loads((folder / BUDGET_JSON).read_text(encoding="utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def name_notes(name: str, approved_name: str) -> list[str]:
    """The note for a bundle folder whose ``name`` is not the ``approved_name`` (a label, never a difference).

    >>> name_notes("2026-11-29-0123456789ab", "2026-11-29-0123456789ab")
    []
    >>> name_notes("CHG-1234", "2026-11-29-0123456789ab")  # doctest: +NORMALIZE_WHITESPACE
    ["folder name 'CHG-1234' is not the approved name '2026-11-29-0123456789ab' (created_utc's date and the
    inputs digest in budget.json): a label only; the contents are checked against that digest"]
    """
    if name == approved_name:
        return []
    return [f"folder name {name!r} is not the approved name {approved_name!r} (created_utc's date and the "
            "inputs digest in budget.json): a label only; the contents are checked against that digest"]


# --- the record (budget.json) --------------------------------------------------------------------


def build_record(
    decision: Decision,
    policy: Policy,
    inputs: Sequence[Mapping[str, object]],
    digest: str,
    created: datetime,
    approver: str,
    note: str = "",
    layout_options: Mapping[str, object] | None = None,
) -> dict:
    """The ``budget.json`` content (schema ``kvplan.budget`` version 1, see ``docs/budget-json.md``)."""
    budget = decision.budget
    ranks = []
    for i, rank in enumerate(budget.ranks):
        ranks.append({
            "rank": rank,
            "room_bytes": budget.room_bytes[i],
            "room_source": decision.room_sources[i],
            "safe_bytes": budget.safe_bytes[i],
            "stranded_bytes": budget.stranded_bytes[i],
            "init_free_bytes": decision.ref_free_bytes[i],
            "limiting": rank == budget.limiting_rank,
        })
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kvplan_version": __version__,
        "created_utc": created.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "approver": approver,
        "note": note,
        "inputs_digest": digest,
        "decision": {
            "kv_cache_memory_bytes": budget.uniform_budget_bytes,
            "flag": budget.flag,
            "human": format_size(budget.uniform_budget_bytes),
            "limiting_rank": budget.limiting_rank,
            "num_blocks": budget.num_blocks,
        },
        "policy": {
            "reserve_bytes": policy.reserve_bytes,
            "guard_bytes": policy.guard_bytes,
            "assume_uniform": policy.assume_uniform,
            "rounding": {
                "block_bytes": budget.block_bytes,
                "rule": "down to whole KV blocks" if budget.block_bytes else "none (no model given)",
            },
        },
        "ranks": ranks,
        "summary": {
            "min_safe_bytes": budget.min_safe_bytes,
            "median_safe_bytes": budget.median_safe_bytes,
            "max_safe_bytes": budget.max_safe_bytes,
            "min_median_ratio": budget.min_median_ratio,
            "weak_rank_loss_fraction": budget.weak_rank_loss_fraction,
            "allocated_total_bytes": budget.allocated_total_bytes,
        },
        "stranded": {
            "total_bytes": budget.stranded_total_bytes,
            "rounding_loss_bytes": budget.rounding_loss_bytes,
            "per_rank_bytes": list(budget.stranded_bytes),
        },
        "kv_spec": decision.spec.to_dict() if decision.spec else None,
        "model_options": dict(layout_options) if layout_options is not None else None,
        "capacity": [dict(row) for row in decision.capacity] if decision.capacity is not None else None,
        "admission_plan": decision.plan,
        **({"load": decision.load} if decision.load is not None else {}),
        "compatibility_key": {k: _json_value(v) for k, v in decision.compatibility_key.items()},
        "checks": [check.to_dict() for check in decision.checks],
        "warnings": list(decision.warnings),
        "inputs": [dict(entry) for entry in inputs],
        "ledger": _records(decision.ledger),
        "files": {},
    }


def approved_from_record(record: Mapping) -> Approved:
    """What :mod:`kvplan.gate` needs, from a ``budget.json`` record; :class:`BundleError` if malformed."""
    try:
        return _approved(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"budget.json lacks or garbles what a gate needs: {exc!r}") from None


def _approved(record: Mapping) -> Approved:
    plan = record.get("admission_plan") or {}
    max_model_len = _int_or_none(record["compatibility_key"].get("max_model_len"))
    at_max_len = [int(row["tokens"]) for row in record.get("capacity") or ()
                  if row["seq_len"] == max_model_len]
    return Approved(
        budget_bytes=int(record["decision"]["kv_cache_memory_bytes"]),
        ranks=tuple(int(r["rank"]) for r in record["ranks"]),
        safe_bytes=tuple(int(r["safe_bytes"]) for r in record["ranks"]),
        ref_free_bytes=tuple(_int_or_none(r.get("init_free_bytes")) for r in record["ranks"]),
        reserve_bytes=int(record["policy"]["reserve_bytes"]),
        guard_bytes=int(record["policy"]["guard_bytes"]),
        block_bytes=_int_or_none(record["policy"]["rounding"]["block_bytes"]),
        compatibility_key=dict(record["compatibility_key"]),
        tokens_required=_int_or_none(plan.get("tokens_required")),
        logged_tokens=profiled_tokens(pd.DataFrame(record.get("ledger") or [])),
        capacity_tokens=at_max_len[0] if at_max_len else None,
    )


def verified_approval(bundle: str | os.PathLike) -> tuple[dict, Approved]:
    """The record and gate view of a bundle that verifies; :class:`BundleChangedError` listing the
    differences when it does not (a gate must not trust a changed approval).
    """
    differences = verify_bundle(bundle)
    if differences:
        count = f"{len(differences)} difference{'s' if len(differences) > 1 else ''}"
        raise BundleChangedError(f"cannot judge: the approved bundle changed: {bundle} fails verification "
                                 f"({count}; `kvplan verify {bundle}` lists them), first: {differences[0]}")
    record = read_bundle(bundle)
    return record, approved_from_record(record)


def user_paths(record: Mapping, text: str) -> str:
    """``text`` with the bundle's input copies (``inputs/boot.log``) named as the user gave them.

    >>> user_paths({"inputs": [{"bundle_path": "inputs/oom.log", "path": "data/oom.log"}]},
    ...            "inputs/oom.log:88: no KV cache line")
    'data/oom.log:88: no KV cache line'
    """
    return renamed(text, {entry["bundle_path"]: entry["path"] for entry in record.get("inputs", [])})


# --- SUMMARY.md and evidence.log (pure text) ------------------------------------------------------


def summary_markdown(record: Mapping, name: str) -> str:
    """``SUMMARY.md``: the decision, per-rank table, stranded, capacity, key, checks and inputs."""
    decision, policy = record["decision"], record["policy"]
    limiting = decision["limiting_rank"]
    rounding = policy["rounding"]
    lines = [
        f"# KV-cache budget: {decision['human']} per GPU (`{decision['flag']}`)",
        "",
        f"- **Decision:** `{decision['flag']}`: {decision['kv_cache_memory_bytes']:,} bytes = "
        f"{decision['human']} per GPU, on every rank; rank {limiting} limits.",
        f"- **Approved by** {record['approver']} at {record['created_utc']} with kvplan "
        f"{record['kvplan_version']}; bundle `{name}`.",
    ]
    if record.get("note"):
        lines.append(f"- **Note:** {record['note']}")
    lines += [
        f"- **Policy:** reserve {format_size(policy['reserve_bytes'])} per GPU; canary guard "
        f"{format_size(policy['guard_bytes'])}; rounding {rounding['rule']}"
        + (f" of {format_size(rounding['block_bytes'])} ({decision['num_blocks']:,} blocks)"
           if rounding["block_bytes"] else "")
        + ("; rank 0's room assumed for every rank (--assume-uniform)" if policy["assume_uniform"] else "")
        + ".",
        "",
        "## Per rank",
        "",
        "| rank | room | room from | safe = room − reserve | approved | stranded | startup free |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for rank in record["ranks"]:
        marker = " (limits)" if rank["limiting"] else ""
        free = format_size(rank["init_free_bytes"]) if rank["init_free_bytes"] is not None else "not shown"
        lines.append(
            f"| {rank['rank']}{marker} | {format_size(rank['room_bytes'])} | {rank['room_source'] or '?'} | "
            f"{format_size(rank['safe_bytes'])} | {decision['human']} | "
            f"{format_size(rank['stranded_bytes'])} | {free} |"
        )
    summary, stranded = record["summary"], record["stranded"]
    lines += [
        "",
        f"**Stranded:** {format_size(stranded['total_bytes'])} over all ranks (of which block rounding "
        f"{format_size(stranded['rounding_loss_bytes'])} per rank); allocated "
        f"{format_size(summary['allocated_total_bytes'])}. Min/median safe budget "
        f"{summary['min_median_ratio']:.3f}: the weakest rank removes {1 - summary['min_median_ratio']:.0%} "
        "of typical capacity.",
        "",
        "## Capacity at the approved value",
        "",
    ]
    if record["capacity"]:
        spec = record["kv_spec"]
        lines += [
            f"{format_size(spec['bytes_per_token'])} per token per rank, blocks of {spec['block_size']} "
            "tokens "
            f"({format_size(spec['block_bytes'])}).",
            "",
            "| sequence length | blocks | tokens | full-length sequences at once |",
            "|---:|---:|---:|---:|",
        ]
        lines += [f"| {row['seq_len']:,} | {row['blocks']:,} | {row['tokens']:,} | "
                  f"{row['max_concurrency']:.2f} |"
                  for row in record["capacity"]]
    else:
        lines.append("Not computed: approve with `--model CONFIG --tp N` to turn bytes into tokens.")
    if record["admission_plan"]:
        lines += ["", f"**Admission plan:** {record['admission_plan']['detail']}."]
    if record.get("load") is not None:
        lines += ["", "## Under load", "", *under_load_lines(record["load"])]
    lines += ["", "## Compatibility key (reuse only where all of these are unchanged)", "",
              "| field | value |", "|---|---|"]
    lines += [f"| {k} | {'not shown' if v is None else v} |" for k, v in record["compatibility_key"].items()]
    lines += ["", "## Checks at approval", ""]
    lines += [f"- **{verdict_word(c['passed'])}** {c['name']}: {c['detail']}" for c in record["checks"]]
    lines += ["", "## Inputs", "", "| file | SHA-256 |", "|---|---|"]
    lines += [f"| `{entry['bundle_path']}` (was `{entry['path']}`) | `{entry['sha256']}` |"
              for entry in record["inputs"]]
    lines += ["", f"Re-check: `kvplan verify {name}`. Gate a canary boot: "
                  f"`kvplan gate --approved {name} CANARY.log`.", ""]
    return "\n".join(lines)


def under_load_lines(load: Mapping) -> list[str]:
    """The "Under load" bullets of ``SUMMARY.md`` from a ``budget.json`` ``load`` section.

    >>> load = {"sources": ["inputs/server.log"], "rows": 40, "start": "2026-11-27T09:32:10",
    ...     "end": "2026-11-27T09:38:58", "duration_s": 408.0, "kv_cache_tokens": 157280,
    ...     "kv_cache_memory_bytes": 12884377600, "approved_kv_cache_tokens": 157280,
    ...     "peak_kv_cache_usage_pct": 70.1, "peak_kv_cache_tokens": 110253,
    ...     "peak_at": {"source": "inputs/server.log", "line": 61, "time": None, "engine": 0},
    ...     "max_running": 32, "max_waiting": 3, "mean_prompt_tokens_per_s": 1520.5,
    ...     "mean_generation_tokens_per_s": 689.25, "preemptions": 0, "max_preemptions": 0,
    ...     "oom_events": 0, "error_events": 0, "warnings": [], "notes": []}
    >>> print("\\n".join(under_load_lines(load)))
    - **Evidence:** 40 rows from `inputs/server.log`, 2026-11-27T09:32:10 to 2026-11-27T09:38:58 (408 s).
    - **Peak KV cache usage:** 70.1% of 157,280 tokens (≈110,253) at `inputs/server.log:61`.
    - **Preemptions:** 0 (policy allows 0); **OOM / error events:** 0 / 0.
    - **Throughput:** prompt 1,520, generation 689 tokens/s on average; peak 32 running, 3 waiting.
    - **Capacity:** 157,280 tokens (`--kv-cache-memory-bytes=12884377600`); approved value: 157,280.
    """
    peak, tokens, preemptions = load["peak_kv_cache_usage_pct"], load["kv_cache_tokens"], load["preemptions"]
    span = f", {load['start']} to {load['end']} ({load['duration_s']:g} s)" if load["start"] else ""
    files = ", ".join(f"`{source}`" for source in load["sources"])
    lines = [f"- **Evidence:** {load['rows']} rows from {files}{span}."]
    if peak is None:
        lines.append("- **Peak KV cache usage:** not reported.")
    else:
        of = f" of {tokens:,} tokens (≈{load['peak_kv_cache_tokens']:,})" if tokens is not None else ""
        where = f"{load['peak_at']['source']}:{load['peak_at']['line']}"
        lines.append(f"- **Peak KV cache usage:** {peak:.1f}%{of} at `{where}`.")
    counted = "not reported" if preemptions is None else preemptions
    lines.append(f"- **Preemptions:** {counted} (policy allows {load['max_preemptions']}); "
                 f"**OOM / error events:** {load['oom_events']} / {load['error_events']}.")
    prompt, generation = load["mean_prompt_tokens_per_s"], load["mean_generation_tokens_per_s"]
    lines.append(f"- **Throughput:** prompt {_count_text(prompt)}, generation {_count_text(generation)} "
                 f"tokens/s on average; peak {_count_text(load['max_running'])} running, "
                 f"{_count_text(load['max_waiting'])} waiting.")
    manual = load["kv_cache_memory_bytes"]
    setting = f"`{kv_cache_flag(manual)}`" if manual is not None else "profiled"
    approved = load["approved_kv_cache_tokens"]
    lines.append(f"- **Capacity:** {_count_text(tokens)} tokens ({setting}); approved value: "
                 f"{_count_text(approved)}.")
    lines += [f"- **Note:** {note}." for note in load["notes"]]
    if load["warnings"]:
        lines.append(f"- {len(load['warnings'])} reader warning(s) in `budget.json` (`load.warnings`).")
    return lines


def _count_text(value: float | None) -> str:
    """A count or rate with thousands separators, rounded to whole units; ``?`` when unknown.

    >>> _count_text(1520.5), _count_text(None)
    ('1,520', '?')
    """
    return "?" if value is None else f"{value:,.0f}"


def evidence_lines(provenance: pd.DataFrame) -> list[str]:
    """``evidence.log``: each source line once, with ``file:line``, boot, rank and every value read from it.

    >>> prov = pd.DataFrame({"source": ["a.log"] * 2, "line": [9, 9], "boot": [0, 0], "rank": [2, 2],
    ...     "column": ["init_free_bytes", "room_bytes"], "value": [100, 90], "raw": ["the line"] * 2})
    >>> evidence_lines(prov)[3:]
    ['a.log:9  boot 0  rank 2  init_free_bytes = 100; room_bytes = 90', '    the line']
    """
    lines = ["# kvplan evidence: every number in budget.json and ledger.csv, with the line it came from",
             "# file:line  boot  rank  column = value; ...   then the line as logged", ""]
    if provenance.empty:
        return [*lines, "(the reader recorded no provenance)"]
    frame = provenance.assign(_line=provenance["line"].astype("Int64").fillna(0)).sort_values(
        ["source", "_line"], kind="stable")
    groups: dict[tuple, dict] = {}
    for row in frame.itertuples(index=False):
        place = (str(row.source), _int_or_none(row.line), _int_or_none(row.boot), str(row.raw).rstrip())
        values = groups.setdefault(place, {}).setdefault(_int_or_none(row.rank), [])
        values.append(f"{row.column} = {_json_value(row.value)}")
    for (source, line, boot, raw), by_rank in groups.items():
        where = f"{source}:{line}" if line is not None else source
        ranks = ", ".join("-" if rank is None else str(rank) for rank in by_rank)
        shown = list(by_rank.values())
        if all(values == shown[0] for values in shown):
            text = f"rank{'s' if len(by_rank) > 1 else ''} {ranks}  " + "; ".join(shown[0])
        else:
            text = "  ".join(f"rank {rank}: " + "; ".join(values) for rank, values in by_rank.items())
        lines.append(f"{where}  boot {'-' if boot is None else boot}  {text}")
        lines.append(f"    {raw}" if line is not None else f"    (not a log line: {raw})")
    return lines


# --- writing, reading, verifying ------------------------------------------------------------------


def approve(
    log_paths: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    policy: Policy,
    approver: str,
    note: str = "",
    layout: ModelLayout | None = None,
    plan: Plan | None = None,
    now: datetime | None = None,
    load_paths: Sequence[str | os.PathLike] = (),
    load_policy: LoadPolicy | None = None,
    nvidia_smi_paths: Sequence[str | os.PathLike] = (),
) -> Path:
    """Compute the decision and write its bundle under ``out_dir``; returns the new folder.

    ``load_paths`` are the server logs and /metrics snapshots of a load test at the approved value
    (read with ``load_policy``, default: no preemption allowed); they are inputs like the logs.
    ``nvidia_smi_paths`` are the ``--query-gpu`` (and optionally ``--query-compute-apps``) CSV snapshots
    of the profiled boot: inputs too (role ``nvidia-smi``, after the logs), joined with the ledger so the
    compatibility key holds ``gpu_name`` and ``driver_version``. Without them the inputs, the digest and
    the record are what they were before snapshots could be given.
    Raises :class:`BundleExistsError` when the folder already exists (the same input files given by the
    same paths, policy, approver and note approved on the same UTC day) or when ``out_dir`` is a bundle
    or lies inside one (writing there would change an approved bundle), :class:`InputFileError` for a
    missing input, and :class:`ApprovalError` when the logs give no budget or a check at approval fails
    (e.g. the plan does not fit, or the load test shows an OOM or more preemptions than the policy
    allows).

    The final name is claimed with ``mkdir`` (which fails when anything exists there) and the
    finished temporary folder is renamed onto that empty claim, so a bundle written at the same
    moment by another process is never replaced.
    """
    if not approver.strip():
        raise ValueError("an approval needs the approver's name (--approver)")
    if policy.guard_bytes < 0:
        raise ValueError(f"guard must not be negative, got {format_size(policy.guard_bytes)}")
    logs = [Path(path) for path in log_paths]
    if not logs:
        raise ValueError("no log files: approve needs the logs of at least one profiled boot")
    loads = [Path(path) for path in load_paths]
    if load_policy is not None and not loads:
        raise ValueError("a load policy (max preemptions, year) needs load-test files (--load)")
    load_policy = (load_policy or LoadPolicy()) if loads else None
    configs = [Path(layout.config)] if layout else []
    snapshots = [Path(path) for path in nvidia_smi_paths]
    require_files(logs, "LOG")
    require_files(snapshots, "--nvidia-smi")
    require_files(configs, "--model")
    require_files(loads, "--load")
    sources = logs + snapshots + configs + loads
    roles = (["log"] * len(logs) + [NVIDIA_SMI_ROLE] * len(snapshots) + ["model config"] * len(configs)
             + ["load"] * len(loads))
    hashes = [sha256_file(path) for path in sources]
    entries = [{"path": str(source), "role": role} for source, role in zip(sources, roles)]
    settings = _settings(policy, layout, plan, load_policy, entries, approver, note, __version__)
    digest = inputs_digest(hashes, settings)
    created = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    out = Path(out_dir)
    enclosing = enclosing_bundle(out)
    if enclosing is not None:
        raise BundleExistsError(f"{out}: inside the evidence bundle {enclosing}: writing there would change "
                                "an approved bundle; give --out the folder that holds bundles, e.g. "
                                f"{enclosing.parent}")
    final = out / bundle_name(created, digest)
    exists = BundleExistsError(f"{final}: a bundle for these inputs already exists (same input files by the "
                               "same paths, policy, approver and note on the same day); bundles are never "
                               "overwritten (verify it with `kvplan verify`)")
    if final.exists():
        raise exists
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{final.name}.{secrets.token_hex(4)}.partial"
    staging.mkdir()  # mode 0o777 less the umask, like every file written into it
    try:
        names = input_names(sources)
        inputs = _copy_inputs(sources, names, hashes, roles, staging)
        copied = {role: [(staging / name, name) for name, r in zip(names, roles) if r == role]
                  for role in ("log", NVIDIA_SMI_ROLE, "model config", "load")}
        copied_layout = ModelLayout(copied["model config"][0][0], layout.options) if layout else None
        try:
            decision = decide(copied["log"], policy, copied_layout, plan, copied["load"], load_policy,
                              copied[NVIDIA_SMI_ROLE])
            _refuse_failed_checks(decision)
        except ValueError as exc:  # name the user's files, not the copies in the unfinished bundle
            raise ApprovalError(renamed(str(exc), dict(zip(names, map(str, sources))))) from exc
        record = build_record(decision, policy, inputs, digest, created, approver, note,
                              dict(layout.options) if layout else None)
        record["files"] = _write_artifacts(staging, decision, record, final.name)
        (staging / BUDGET_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        _move_into_place(staging, final, exists)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _move_into_place(staging: Path, final: Path, exists: BundleExistsError) -> None:
    """Rename ``staging`` to ``final``, never replacing anything another process put there.

    ``mkdir`` claims the name atomically (it fails when anything exists); renaming a folder onto an
    empty folder replaces it, and fails once another process has put a file into the claim.
    """
    try:
        final.mkdir()
    except FileExistsError:
        raise exists from None
    try:
        os.rename(staging, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            final.rmdir()  # our claim, if it is still empty
        if isinstance(exc, OSError):
            raise exists from None
        raise


def read_bundle(bundle: str | os.PathLike) -> dict:
    """The ``budget.json`` record of a bundle; :class:`BundleError` when it cannot be read."""
    path = Path(bundle) / BUDGET_JSON
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file: not an evidence bundle") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: unreadable: {exc}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise BundleError(f"{path}: not a {SCHEMA} record")
    if record.get("schema_version") != SCHEMA_VERSION:
        raise BundleError(f"{path}: schema version {record.get('schema_version')!r}; this kvplan reads "
                          f"version {SCHEMA_VERSION}")
    required = ("decision", "policy", "ranks", "inputs", "files", "compatibility_key")
    missing = [key for key in required if key not in record]
    if missing:
        raise BundleError(f"{path}: missing {', '.join(missing)}")
    return record


def verify_bundle(bundle: str | os.PathLike) -> list[str]:
    """Differences between a bundle and a fresh recomputation from its inputs (empty = all agree).

    The differences of :func:`verify_bundle_with_notes`, without its notes.
    """
    return verify_bundle_with_notes(bundle)[0]


def verify_bundle_with_notes(bundle: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Differences between a bundle and a fresh recomputation from its inputs (empty = all agree), and notes.

    Checks every file hash (inputs and artifacts, none missing, no file or folder added), that charts
    are PNG files, the inputs digest (input hashes, paths and roles, policy, plan, model options,
    approver, note, kvplan version) recomputed against the recorded one, that ``created_utc`` is an
    ISO 8601 UTC time, and the decision, per-rank budgets, key, capacity, plan and ledger recomputed
    from the input copies and the recorded policy; ``SUMMARY.md``, ``ledger.csv`` and ``evidence.log``
    must equal, byte for byte, the text regenerated from the recorded ``budget.json`` and the fresh
    decision (``SUMMARY.md`` names the approved folder, whatever the folder is called now). The folder
    name is a label: one that is not the approved ``<created_utc date>-<digest>`` (a copied or renamed
    bundle) is a note (:func:`name_notes`), never a difference. Raises :class:`BundleError` for an
    unreadable bundle.
    """
    folder = Path(bundle)
    record = read_bundle(folder)
    try:
        differences = _file_differences(folder, record)
        entries = record["inputs"]
        _ = [(e["path"], e["bundle_path"], e["sha256"], e["role"]) for e in entries]
        policy = Policy(int(record["policy"]["reserve_bytes"]), int(record["policy"]["guard_bytes"]),
                        bool(record["policy"]["assume_uniform"]))
        plan_record = record.get("admission_plan")
        plan = None
        if plan_record:
            plan = Plan(int(plan_record["target_concurrency"]), int(plan_record["seq_len"]))
        options = record.get("model_options")
        loads = [e for e in entries if e.get("role") == "load"]
        load_record = record.get("load")
        load_policy = None
        if loads:
            load_policy = LoadPolicy() if load_record is None else LoadPolicy(
                int(load_record["max_preemptions"]), _int_or_none(load_record["year"]),
                load_record.get("max_capacity_loss_pct"))
        approver, note, version = str(record["approver"]), str(record["note"]), str(record["kvplan_version"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BundleError(f"{folder / BUDGET_JSON}: malformed policy, plan, load, approval or inputs: "
                          f"{exc!r}") from None
    logs = [e for e in entries if e.get("role") == "log"]
    snapshots = [e for e in entries if e.get("role") == NVIDIA_SMI_ROLE]
    configs = [e for e in entries if e.get("role") == "model config"]
    ordered = logs + snapshots + configs + loads
    if ordered != list(entries):
        differences.append("inputs: roles or order changed (logs, then nvidia-smi snapshots, then the model "
                           "config, then load files)")
    layout = None
    if configs and options is not None:
        layout = ModelLayout(folder / configs[0]["bundle_path"], options)
    settings = _settings(policy, layout, plan, load_policy,
                         [{"path": e["path"], "role": e["role"]} for e in ordered], approver, note, version)
    digest = inputs_digest([e["sha256"] for e in ordered], settings)
    if digest != record.get("inputs_digest"):
        differences.append(f"inputs digest: recorded {record.get('inputs_digest')}, recomputed {digest} "
                           "(policy, plan, model options, load policy, input hashes or paths, approver, "
                           "note or kvplan version were changed)")
    created = _created(record.get("created_utc"))
    notes = []
    if created is None:
        differences.append(f"created_utc: {record.get('created_utc')!r} is not an ISO 8601 UTC time")
    else:
        approved_name = bundle_name(created, str(record.get("inputs_digest")))
        notes = name_notes(folder.resolve().name, approved_name)
    differences += _entry_differences(folder, entries)
    if any(not (folder / e["bundle_path"]).is_file() for e in ordered) or created is None:
        return differences, notes
    try:
        decision = decide([(folder / e["bundle_path"], e["bundle_path"]) for e in logs], policy, layout, plan,
                          [(folder / e["bundle_path"], e["bundle_path"]) for e in loads], load_policy,
                          [(folder / e["bundle_path"], e["bundle_path"]) for e in snapshots])
    except (ValueError, TypeError) as exc:  # TypeError: model options kv_spec does not take
        return [*differences, f"recomputation failed: {exc}"], notes
    decision = _as_recorded(decision, record.get("ledger"))
    fresh = build_record(decision, policy, entries, digest, created, approver, note, options)
    fresh["kvplan_version"] = version
    for key in ("decision", "policy", "ranks", "summary", "stranded", "kv_spec", "capacity", "admission_plan",
                "load", "compatibility_key", "checks", "warnings", "ledger"):
        differences += _compare(key, record.get(key), _roundtrip(fresh.get(key)))
    for file_name, text in artifact_texts(decision, _roundtrip(fresh), approved_name).items():
        differences += _text_difference(folder / file_name, file_name, text)
    expected_charts = {f"{CHARTS_DIR}/{chart}.png" for chart in chart_names(decision)}
    recorded_charts = {path for path in record["files"] if path.startswith(f"{CHARTS_DIR}/")}
    if recorded_charts != expected_charts:
        differences.append(f"charts: recorded {sorted(recorded_charts)}, expected {sorted(expected_charts)}")
    if differences and version != __version__:
        differences.append(f"note: approved with kvplan {version}, verified with "
                           f"{__version__}; a reader change can explain a recomputed difference")
    return differences, notes


# --- helpers --------------------------------------------------------------------------------------


def _as_recorded(decision: Decision, recorded_ledger: object) -> Decision:
    """``decision`` without the ledger columns (and their provenance) that a bundle of kvplan 0.1.0 did not
    record (:data:`~kvplan.columns.NEWER_THAN_0_1_0`, absent from every recorded row): the reader has
    learned more lines since, and what it learned is no part of what was approved. Any other column is
    compared as before.
    """
    if not isinstance(recorded_ledger, list) or not all(isinstance(row, dict) for row in recorded_ledger):
        return decision
    absent = [c for c in NEWER_THAN_0_1_0 if recorded_ledger and all(c not in row for row in recorded_ledger)]
    if not absent:
        return decision
    provenance = decision.provenance
    if "column" in provenance:
        provenance = provenance[~provenance["column"].isin(absent)].reset_index(drop=True)
    ledger = decision.ledger.drop(columns=absent, errors="ignore")
    return replace(decision, ledger=ledger, provenance=provenance)



def _settings(policy: Policy, layout: ModelLayout | None, plan: Plan | None, load_policy: LoadPolicy | None,
              inputs: Sequence[Mapping[str, str]], approver: str, note: str, version: str) -> dict:
    """The settings of the inputs digest: policy, layout, plan, input paths and roles, the approval;
    ``load`` only with load evidence."""
    settings = {"policy": asdict(policy), "model_options": dict(layout.options) if layout else None,
                "plan": asdict(plan) if plan else None,
                "inputs": [{"path": entry["path"], "role": entry["role"]} for entry in inputs],
                "approval": {"approver": approver, "note": note, "kvplan_version": version}}
    if load_policy is not None:
        settings["load"] = asdict(load_policy)
    return settings


def _created(text: object) -> datetime | None:
    """The approval time of ``created_utc`` (``…Z``, UTC), None when it is not one.

    >>> _created("2026-11-29T10:40:00Z"), _created("yesterday")
    (datetime.datetime(2026, 11, 29, 10, 40, tzinfo=datetime.timezone.utc), None)
    """
    if not isinstance(text, str) or not text.endswith("Z"):
        return None
    try:
        created = datetime.fromisoformat(text[:-1] + "+00:00")
    except ValueError:
        return None
    return created if created.utcoffset() is not None else None


def _copy_inputs(sources: Sequence[Path], names: Sequence[str], hashes: Sequence[str], roles: Sequence[str],
                 staging: Path) -> list[dict]:
    (staging / INPUTS_DIR).mkdir()
    entries = []
    for source, name, digest, role in zip(sources, names, hashes, roles):
        shutil.copyfile(source, staging / name)
        if sha256_file(staging / name) != digest:
            raise ValueError(f"{source}: changed while it was being copied; approve again")
        entries.append({"path": str(source), "bundle_path": name, "sha256": digest,
                        "size_bytes": (staging / name).stat().st_size, "role": role})
    return entries


def _refuse_failed_checks(decision: Decision) -> None:
    failed = [check for check in decision.checks if check.passed is False]
    if failed:
        raise ApprovalError("not approved: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))


def artifact_texts(decision: Decision, record: Mapping, name: str) -> dict[str, str]:
    """The text files of bundle ``name``: ``ledger.csv``, ``SUMMARY.md`` and ``evidence.log``.

    Pure over the decision and the record, so :func:`verify_bundle` regenerates them byte for byte.
    """
    return {
        "ledger.csv": decision.ledger.to_csv(index=False),
        "SUMMARY.md": summary_markdown(record, name),
        "evidence.log": "\n".join(evidence_lines(decision.provenance)) + "\n",
    }


def chart_names(decision: Decision) -> list[str]:
    """Names of the bundle's charts (``charts/<name>.png``); ``concurrency`` needs a model and
    ``max_model_len``."""
    names = ["ledger", "safe-budget", "stranded"]
    if decision.spec is not None and _int_or_none(decision.compatibility_key.get("max_model_len")):
        names.append("concurrency")
    return names


def _write_artifacts(staging: Path, decision: Decision, record: dict, name: str) -> dict[str, str]:
    """Write ledger.csv, SUMMARY.md, evidence.log and the charts; returns their SHA-256 by name."""
    written = []
    for file_name, text in artifact_texts(decision, record, name).items():
        (staging / file_name).write_text(text, encoding="utf-8")
        written.append(staging / file_name)
    # matplotlib loads only when a bundle is drawn, so `kvplan gate` and `verify` start fast in pipelines
    import matplotlib.pyplot as plt

    (staging / CHARTS_DIR).mkdir()
    for chart_name, figure in _figures(decision):
        path = staging / CHARTS_DIR / f"{chart_name}.png"
        try:
            figure.savefig(path, dpi=100, metadata={"Software": None})
        finally:
            plt.close(figure)
        written.append(path)
    return {path.relative_to(staging).as_posix(): sha256_file(path) for path in written}


def _figures(decision: Decision):
    from kvplan import charts  # see _write_artifacts: matplotlib only when drawing

    budget = decision.budget
    names = chart_names(decision)
    yield "ledger", charts.ledger_chart(decision.ledger, budget)
    yield "safe-budget", charts.safe_budget_chart(budget)
    yield "stranded", charts.stranded_chart(budget)
    spec, max_len = decision.spec, _int_or_none(decision.compatibility_key.get("max_model_len"))
    if "concurrency" in names:
        lengths = sorted({2**k for k in range(9, int(math.log2(max_len)) + 1)} | {max_len}
                         | ({decision.plan["seq_len"]} if decision.plan else set()))
        curve = pd.DataFrame(capacity_rows(spec, budget.uniform_budget_bytes, lengths))
        target = decision.plan["target_concurrency"] if decision.plan else None
        yield "concurrency", charts.concurrency_chart(curve, max_len, target)


def _file_differences(folder: Path, record: Mapping) -> list[str]:
    differences = []
    expected = dict(record["files"])
    expected.update({e["bundle_path"]: e["sha256"] for e in record["inputs"]})
    for name, digest in sorted(expected.items()):
        path = folder / name
        if not path.is_file():
            differences.append(f"{name}: missing")
        elif sha256_file(path) != digest:
            differences.append(f"{name}: SHA-256 {sha256_file(path)} differs from the recorded {digest}")
        elif name.startswith(f"{CHARTS_DIR}/") and not _is_png(path):
            differences.append(f"{name}: not a PNG image")
    differences += [f"{name}: not part of the bundle as approved" for name in added_paths(folder, expected)]
    return differences


def added_paths(folder: Path, expected: Sequence[str]) -> list[str]:
    """Paths under ``folder`` that are neither ``budget.json``, an ``expected`` file nor a folder holding
    one, sorted; folders end with ``/`` (an added empty folder changes a bundle too)."""
    wanted = {BUDGET_JSON, *expected}
    folders = {parent.as_posix() for name in wanted for parent in Path(name).parents} - {"."}
    added = []
    for path in folder.rglob("*"):
        name = path.relative_to(folder).as_posix()
        if path.is_dir() and not path.is_symlink():
            if name not in folders:
                added.append(f"{name}/")
        elif name not in wanted:
            added.append(name)
    return sorted(added)


def _is_png(path: Path) -> bool:
    with open(path, "rb") as handle:
        return path.suffix == ".png" and handle.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE


def _entry_differences(folder: Path, entries: Sequence[Mapping]) -> list[str]:
    """Each input entry's ``bundle_path`` and ``size_bytes`` as approve derives them from its path
    and copy."""
    differences = []
    for entry, name in zip(entries, input_names([entry["path"] for entry in entries])):
        if entry["bundle_path"] != name:
            differences.append(f"inputs: {entry['path']} is copied as {name}, recorded "
                               f"{entry['bundle_path']}")
        elif (folder / name).is_file() and (folder / name).stat().st_size != entry.get("size_bytes"):
            differences.append(f"{name}: {(folder / name).stat().st_size} bytes, recorded "
                               f"{entry.get('size_bytes')}")
    return differences


def _text_difference(path: Path, name: str, expected: str) -> list[str]:
    """The first line where a bundle text file differs from its regeneration (nothing when equal)."""
    if not path.is_file():
        return []  # reported as missing by the hash check
    actual = path.read_bytes()
    if actual == expected.encode("utf-8"):
        return []
    got = actual.decode("utf-8", errors="replace").splitlines()
    want = expected.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    shown = got[line] if line < len(got) else "(end of file)"
    wanted = want[line] if line < len(want) else "(end of file)"
    return [f"{name}: differs from the text regenerated from budget.json at line {line + 1}: "
            f"{_short(shown)} (expected {_short(wanted)})"]


def _compare(key: str, recorded: object, fresh: object) -> list[str]:
    """Field-by-field differences between a recorded and a recomputed JSON value."""
    if recorded == fresh:
        return []
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        out = []
        for name in sorted(set(recorded) | set(fresh), key=str):
            out += _compare(f"{key}.{name}", recorded.get(name), fresh.get(name))
        return out
    if isinstance(recorded, list) and isinstance(fresh, list) and len(recorded) == len(fresh):
        out = []
        for i, (a, b) in enumerate(zip(recorded, fresh)):
            out += _compare(f"{key}[{i}]", a, b)
        return out
    return [f"{key}: recorded {_short(recorded)}, recomputed {_short(fresh)}"]


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _roundtrip(value: object) -> object:
    return json.loads(json.dumps(value))


def _records(frame: pd.DataFrame) -> list[dict]:
    return [{str(k): _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _json_value(value: object) -> object:
    """Plain JSON value: None for missing, int for whole numbers, float, bool or str otherwise."""
    if not is_known(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _int_or_none(value: object) -> int | None:
    return int(value) if is_known(value) else None


