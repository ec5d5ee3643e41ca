"""Tables for readers: one number format everywhere, headers in words.

Bytes are :func:`kvplan.units.format_size` (the format of every chart, headline and CLI line), counts have
thousands separators, ratios, rates and percentages two decimals, booleans yes/no, unknown values "n/a".
Names follow the glossary's ``snake_case`` keys: ``_bytes`` is dropped (the value says its unit), ``_pct``
becomes "[%]", ``_per_s`` "per s", and KV, OOM, TP are capitalised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvplan.units import format_size

_WORDS = {"kv": "KV", "oom": "OOM", "tp": "TP", "pp": "PP", "gpu": "GPU", "seq": "sequence", "len": "length"}


def readable_name(key: object) -> str:
    """A glossary key in words: ``peak_kv_cache_usage_pct`` → ``peak KV cache usage [%]``.

    >>> readable_name("peak_kv_cache_usage_pct"), readable_name("safe_bytes"), readable_name("seq_len")
    ('peak KV cache usage [%]', 'safe', 'sequence length')
    >>> readable_name("mean_generation_tokens_per_s")
    'mean generation tokens per s'
    """
    text = str(key)
    unit = ""
    if text.endswith("_pct"):
        text, unit = text.removesuffix("_pct"), " [%]"
    text = text.removesuffix("_bytes")
    return " ".join(_WORDS.get(word, word) for word in text.split("_")) + unit


def readable_value(key: object, value: Any) -> str:
    """``value`` of the column (or row) ``key`` in the one number format.

    >>> readable_value("kv_cache_tokens", 155856), readable_value("room_bytes", 13851156480)
    ('155,856', '12.9 GiB')
    >>> readable_value("peak_kv_cache_usage_pct", 70.749487), readable_value("max_concurrency", 4.7998046875)
    ('70.75', '4.80')
    >>> readable_value("passed", True), readable_value("preemptions", None), readable_value("detail", "ok")
    ('yes', 'n/a', 'ok')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and pd.api.types.is_integer(value)):
        return format_size(int(value)) if str(key).endswith("_bytes") else f"{int(value):,}"
    if isinstance(value, float) or pd.api.types.is_float(value):
        number = float(value)
        if str(key).endswith("_bytes"):
            return format_size(int(number))
        return f"{number:,.2f}"
    return str(value)


def readable_table(
    frame: pd.DataFrame, keys: str = "columns", names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """A copy of ``frame`` as text for readers: every value by :func:`readable_value`, names in words.

    ``keys="columns"`` when each column is one quantity (a per-rank table), ``"index"`` when each row is
    (:func:`kvplan.load.load_comparison_table`). ``names`` overrides :func:`readable_name` for some keys.

    >>> run = pd.Series({"kv_cache_tokens": 155856, "peak_kv_cache_usage_pct": 70.749487}, dtype=object)
    >>> table = pd.DataFrame({"a": run})
    >>> print(readable_table(table, keys="index").to_string())
                                   a
    KV cache tokens          155,856
    peak KV cache usage [%]    70.75
    """
    names = dict(names or {})
    if keys == "index":
        rows = {key: [readable_value(key, value) for value in frame.loc[key]] for key in frame.index}
        shown = pd.DataFrame.from_dict(rows, orient="index", columns=list(frame.columns))
        return shown.rename(index={key: names.get(str(key), readable_name(key)) for key in frame.index})
    shown = pd.DataFrame(
        {column: [readable_value(column, value) for value in frame[column]] for column in frame.columns},
        index=frame.index,
    )
    return shown.rename(
        columns={column: names.get(str(column), readable_name(column)) for column in frame.columns}
    )
