"""The manual KV value a boot ran with: the flag's exact bytes where vLLM logs them, else an interval.

A boot started with ``--kv-cache-memory-bytes`` prints on every rank "reserved X GiB memory for KV Cache
as specified by kv_cache_memory_bytes config", X rounded to 0.01 GiB (``format_gib`` or ``{:.2f}``): the
flag's bytes lie within :data:`PRINTED_HALF_BYTES` of the figure. The API server's ``non-default args``
(and the older ``Namespace(...)`` line), printed by every release that has the flag (0.10.2+), carry the
flag's exact bytes (``'kv_cache_memory_bytes': 57465241600``), as does the startup-plan line. A rank's
``manual_kv_bytes`` is the exact bytes when the boot shows them (and they agree with the printed figure),
else the printed figure; ``manual_kv_max_bytes`` is the most the flag can be: the exact bytes, or the
printed figure + :data:`PRINTED_HALF_BYTES`, so that a gate never passes a canary that could have run
more than the approved value.
"""

from __future__ import annotations

from kvplan.io.metadata import place_note
from kvplan.units import format_size

#: Half of vLLM's printed 0.01 GiB, rounded up [bytes]: the flag is at most this far above the figure.
PRINTED_HALF_BYTES = -(-(1 << 30) // 200)


def printed_manual(printed_bytes: int) -> dict:
    """The ledger values of a printed manual figure: the figure and the most the flag can be [bytes].

    >>> printed_manual(57_466_662_420)  # "53.52 GiB": the flag is at most 53.525 GiB
    {'manual_kv_bytes': 57466662420, 'manual_kv_max_bytes': 57472031130}
    """
    return {"manual_kv_bytes": printed_bytes, "manual_kv_max_bytes": printed_bytes + PRINTED_HALF_BYTES}


def exact_manual(rows: dict, config: dict, origin: dict, source: str, warnings: list) -> None:
    """Replace each rank's printed manual figure by the flag's bytes from the boot's arguments line.

    ``config`` is the boot's configuration (``column → (value, line, raw, family)``); a rank whose printed
    figure is more than :data:`PRINTED_HALF_BYTES` from the flag keeps it, with its bound widened to the
    flag's bytes and a note (the arguments and the workers disagree: the safe side is the larger value).

    >>> rows = {0: printed_manual(57_466_662_420)}
    >>> exact_manual(rows, {"manual_kv_bytes": ("57465241600", 2, 0, "non_default_args")}, {}, "a.log", [])
    >>> rows[0]["manual_kv_bytes"], rows[0]["manual_kv_max_bytes"]
    (57465241600, 57465241600)
    """
    held = config.get("manual_kv_bytes")
    if held is None or not str(held[0]).isdigit():  # held as text, like every other configuration value
        return
    exact, line, raw = int(str(held[0])), held[1], held[2]
    for rank, values in rows.items():
        printed, most = values.get("manual_kv_bytes"), values.get("manual_kv_max_bytes")
        if printed is None or most is None or most == printed:  # no manual line, or bytes already exact
            continue
        if abs(exact - printed) <= PRINTED_HALF_BYTES:
            values["manual_kv_bytes"] = values["manual_kv_max_bytes"] = exact
            origin[(rank, "manual_kv_bytes")] = origin[(rank, "manual_kv_max_bytes")] = (line, raw)
            continue
        values["manual_kv_max_bytes"] = max(most, exact)
        warnings.append(
            place_note(
                "manual-value-differs",
                source,
                line,
                f"the arguments give --kv-cache-memory-bytes={exact} but rank {rank} printed "
                f"{format_size(printed)} reserved for KV cache: the larger is taken as what it may have run",
            )
        )
