"""Prometheus alert rules for an approved launch: the running value, the reserve, preemptions, KV usage.

:func:`alert_rules` writes a rules file (``promtool check rules`` reads it) whose every rule carries the bundle
digest (annotation ``kvplan_bundle_digest``):

- ``KvplanRunningValueDiffers``: an engine's ``vllm:cache_config_info`` shows another ``kv_cache_memory_bytes``
  than the approved one (or none: a release without the label, or a launch without the flag, fires too);
- ``KvplanGpuFreeBelowReserve``: a GPU's free memory (DCGM ``DCGM_FI_DEV_FB_FREE``, MiB) below the reserve for
  :data:`WARM_UP` (so a boot's warm-up, which frees memory again, does not fire it);
- ``KvplanPreemptions``: more preemptions in :data:`WINDOW` than the bundle's load policy allows;
- ``KvplanKvCacheUsageHigh``: KV cache usage above ``kv_usage_pct`` for :data:`WINDOW`.

``matchers`` (PromQL label matchers without braces, e.g. ``job="vllm-70b"``) scope every rule to the servers of
this launch. The text is YAML written as JSON strings, so no label or value can change its structure.
"""

from __future__ import annotations

import json

MIB = 1 << 20  # DCGM reports framebuffer memory in MiB
WARM_UP = "10m"  # the reserve rule waits this long: warm-up and a restart's profiling pass
WINDOW = "15m"  # the preemption and KV-usage windows


def _selector(name: str, matchers: str, *more: str) -> str:
    inner = ",".join(m for m in (matchers, *more) if m)
    return f"{name}{{{inner}}}" if inner else name


def _rule(alert: str, expr: str, duration: str | None, summary: str, digest: str) -> list[str]:
    lines = [f"      - alert: {alert}", f"        expr: {json.dumps(expr)}"]
    if duration:
        lines.append(f"        for: {duration}")
    lines += [
        "        labels:",
        "          severity: critical",
        "        annotations:",
        f"          summary: {json.dumps(summary)}",
        f"          kvplan_bundle_digest: {json.dumps('sha256:' + digest)}",
    ]
    return lines


def alert_rules(
    digest: str,
    approved_bytes: int,
    reserve_bytes: int,
    max_preemptions: int = 0,
    kv_usage_pct: float = 95.0,
    matchers: str = "",
) -> str:
    """The rules file of an approved launch (``digest``: the bundle's hex SHA-256; sizes in bytes).

    >>> text = alert_rules("ab" * 32, 12_884_377_600, 966_367_641)
    >>> [line.split(": ", 1)[1] for line in text.splitlines() if "alert:" in line]
    ['KvplanRunningValueDiffers', 'KvplanGpuFreeBelowReserve', 'KvplanPreemptions', 'KvplanKvCacheUsageHigh']
    >>> 'kv_cache_memory_bytes!=\\\\"12884377600\\\\"' in text
    True
    """
    config = _selector("vllm:cache_config_info", matchers, f'kv_cache_memory_bytes!="{approved_bytes}"')
    free = _selector("DCGM_FI_DEV_FB_FREE", matchers)
    preemptions = _selector("vllm:num_preemptions_total", matchers)
    usage = _selector("vllm:kv_cache_usage_perc", matchers)
    lines = ["groups:", f"  - name: {json.dumps('kvplan-' + digest[:12])}", "    rules:"]
    lines += _rule(
        "KvplanRunningValueDiffers", config, None,
        f"an engine runs another KV value than the approved --kv-cache-memory-bytes={approved_bytes}", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanGpuFreeBelowReserve", f"{free} * {MIB} < {reserve_bytes}", WARM_UP,
        f"a GPU has less free memory than the approved reserve of {reserve_bytes} bytes", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanPreemptions", f"increase({preemptions}[{WINDOW}]) > {max_preemptions}", None,
        f"more than {max_preemptions} preemption(s) in {WINDOW}, beyond the approved load policy", digest,
    )  # fmt: skip
    lines += _rule(
        "KvplanKvCacheUsageHigh", f"{usage} > {kv_usage_pct / 100:g}", WINDOW,
        f"KV cache usage above {kv_usage_pct:g}% for {WINDOW}", digest,
    )  # fmt: skip
    return "\n".join(lines) + "\n"
