"""The fields of one vLLM stats message (V0 or V1): :func:`parse_stats_message`.

Forms read (``vllm-load-formats.md`` §2–3): the V0 stats line of every release (``Pending`` = waiting, with or
without the trailing period), the V1 line of every release (0.7.0's two fields, 0.7.1's missing comma,
``Engine NNN:`` and ``N Engines Aggregated:``, ``Preemptions: N`` per interval, ``Deferred``, ``<device> KV
cache usage``, any field order). Each field is the leftmost match of its pattern; the search starts at
the occurrences of the pattern's literal part (``str.find``), which finds the same match as
``pattern.search`` over the whole message at a fraction of the cost (a stats log is mostly these lines).
"""

from __future__ import annotations

import re

_STATS = re.compile(r"\bRunning: \d+ reqs")
_ENGINE = re.compile(r"^Engine (\d+): ")
_NUMBER = r"(-?\d+(?:\.\d+)?)"
_KV_HEADS = (", ", "reqs ", ": ")  # what may stand before "<DEVICE> KV cache usage"
#: field → (literals a match starts with, the pattern from there, whether the text before may precede it)
_FIELDS = {
    "prompt_tokens_per_s": (
        ("Avg prompt throughput: ",),
        re.compile(rf"Avg prompt throughput: {_NUMBER} tokens/s"),
        None,
    ),
    "generation_tokens_per_s": (
        ("Avg generation throughput: ",),
        re.compile(rf"Avg generation throughput: {_NUMBER} tokens/s"),
        None,
    ),
    "running": (("Running: ",), re.compile(r"Running: (\d+) reqs"), None),
    "waiting": (("Waiting: ", "Pending: "), re.compile(r"(?:Waiting|Pending): (\d+) reqs"), None),
    "swapped": (("Swapped: ",), re.compile(r"Swapped: (\d+) reqs"), None),
    "preemptions": (("Preemptions: ",), re.compile(r"Preemptions: (\d+)"), None),
    # (?:^|, |reqs |: )[A-Z]+ KV cache usage: N%  — found at " KV cache usage: ", head checked backwards
    "kv_cache_usage_pct": ((" KV cache usage: ",), re.compile(rf" KV cache usage: {_NUMBER}%"), "device"),
    # (?:^|, )Prefix cache hit rate: N%
    "prefix_cache_hit_pct": (
        ("Prefix cache hit rate: ",),
        re.compile(rf"Prefix cache hit rate: {_NUMBER}%"),
        "comma",
    ),
}
_INT_FIELDS = {"running", "waiting", "swapped", "preemptions"}
#: V1's line from 0.8.3 on as vLLM prints it by default: every field once, in this order. A message that
#: matches it whole gives the same fields as the general search (each literal occurs once, each head holds).
_V1_DEFAULT = re.compile(
    rf"Engine (\d+): Avg prompt throughput: {_NUMBER} tokens/s, Avg generation throughput: {_NUMBER} "
    rf"tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs, (?:Preemptions: (\d+), )?[A-Z]+ KV cache usage: "
    rf"{_NUMBER}%, Prefix cache hit rate: {_NUMBER}%"
)


def _head_ok(message: str, start: int, head: str | None) -> bool:
    """Whether the text before ``start`` completes the pattern's head (``None``: there is none)."""
    if head is None:
        return True
    if head == "comma":
        return start == 0 or message.endswith(", ", 0, start)
    letters = start
    while letters > 0 and "A" <= message[letters - 1] <= "Z":
        letters -= 1
    return letters < start and (letters == 0 or message.endswith(_KV_HEADS, 0, letters))


def _leftmost(
    message: str, literals: tuple[str, ...], pattern: re.Pattern, head: str | None
) -> re.Match | None:
    """The leftmost match of the field's pattern (its head included), as ``re.search`` would find it."""
    best = None
    for literal in literals:
        start = message.find(literal)
        while start >= 0 and (best is None or start < best.start()):
            match = pattern.match(message, start)
            if match and _head_ok(message, start, head):
                best = match
                break
            start = message.find(literal, start + 1)
    return best


def has_running(message: str) -> bool:
    """True when ``message`` holds ``Running: N reqs`` as a word (what every stats line has).

    >>> has_running("Running: 3 reqs, Waiting: 0 reqs"), has_running("xRunning: 3 reqs")
    (True, False)
    """
    start = message.find("Running: ")
    while start >= 0:
        if _STATS.match(message, start):  # \b looks at the character before ``start``
            return True
        start = message.find("Running: ", start + 1)
    return False


def parse_stats_message(message: str) -> dict | None:
    """The fields of one vLLM stats message (V0 or V1), or ``None`` if it is not one.

    Keys: those of the row that the line states (``running``, ``waiting``, …, ``kv_cache_usage_pct``),
    plus ``engine`` (``None`` for V0 and for ``N Engines Aggregated``) and ``form`` (``v0`` or ``v1``).
    V0's ``Pending`` is ``waiting``; the first ``… KV cache usage`` is the device's (V0's CPU one is swap).

    >>> parse_stats_message("Engine 000: Avg prompt throughput: 8214.2 tokens/s, Avg generation "
    ...     "throughput: 1016.0 tokens/s, Running: 37 reqs, Waiting: 0 reqs, GPU KV cache usage: 68.9%, "
    ...     "Prefix cache hit rate: 14.2%")["kv_cache_usage_pct"]
    68.9
    >>> parse_stats_message("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 210.3 tokens/s, "
    ...     "Running: 12 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 97.1%, "
    ...     "CPU KV cache usage: 0.0%.")["waiting"]
    4
    """
    default = _V1_DEFAULT.fullmatch(message)
    if default:
        engine, prompt, generation, running, waiting, preemptions, usage, hits = default.groups()
        fields = {
            "form": "v1",
            "engine": int(engine),
            "prompt_tokens_per_s": float(prompt),
            "generation_tokens_per_s": float(generation),
            "running": int(running),
            "waiting": int(waiting),
        }
        if preemptions is not None:
            fields["preemptions"] = int(preemptions)
        fields["kv_cache_usage_pct"], fields["prefix_cache_hit_pct"] = float(usage), float(hits)
        return fields
    if not has_running(message) or "SchedulerStats(" in message:
        return None
    fields: dict = {"form": "v0" if "Pending:" in message or "Swapped:" in message else "v1"}
    engine = _ENGINE.match(message) if message.startswith("Engine ") else None
    fields["engine"] = int(engine.group(1)) if engine else None
    for key, (literals, pattern, head) in _FIELDS.items():
        match = _leftmost(message, literals, pattern, head)
        if match:
            fields[key] = int(match.group(1)) if key in _INT_FIELDS else float(match.group(1))
    return fields
