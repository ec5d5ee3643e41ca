"""Read a Hugging Face ``config.json`` by path or by name in the bundled catalogue, never from the network."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from kvplan import MODELS_DIR

#: Largest config read [bytes] (published ones are at most a few hundred KiB)
MAX_CONFIG_BYTES = 16 << 20


class ModelConfigError(ValueError):
    """A model config that cannot be read; the message names the file and what was expected."""


def catalogue_names(models_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the bundled model configs, e.g. ``llama-3.1-70b``."""
    return sorted(path.stem for path in Path(models_dir).glob("*.json"))


def resolve_model_config(path_or_name: str | Path, models_dir: Path = MODELS_DIR) -> Path:
    """The file a ``--model`` value means: an existing path, else ``<models_dir>/<name>.json``."""
    path = Path(path_or_name)
    if path.is_file():
        return _bounded(path)
    if os.path.lexists(path):
        kind = "a folder" if path.is_dir() else "a FIFO" if path.is_fifo() else "a device or socket"
        kind = kind if path.exists() else "a dangling symlink"
        raise ModelConfigError(f"model config {path}: {kind}, not a regular file (a config.json)")
    candidate = Path(models_dir) / f"{str(path_or_name).removesuffix('.json')}.json"
    if candidate.is_file():
        with contextlib.suppress(ValueError):  # below the working directory: kvplan/models/x.json
            candidate = candidate.resolve().relative_to(Path.cwd().resolve())
        return _bounded(candidate)
    names = ", ".join(catalogue_names(models_dir)) or "none"
    raise ModelConfigError(
        f"model config {str(path_or_name)!r}: no such file, and no catalogue entry "
        f"{candidate.name} in {models_dir} (catalogue: {names})"
    )


def _bounded(path: Path, size: int | None = None) -> Path:
    """``path``, refused when its ``size`` (default: its file's) is above :data:`MAX_CONFIG_BYTES`."""
    size = path.stat().st_size if size is None else size
    if size > MAX_CONFIG_BYTES:
        raise ModelConfigError(
            f"{path}: {size:,} bytes, above the bound of {MAX_CONFIG_BYTES:,} for a config.json"
        )
    return path


def read_model_config(path_or_name: str | Path, models_dir: Path = MODELS_DIR) -> dict:
    """The JSON object of a ``config.json`` path or a catalogue name, as a dict."""
    path = resolve_model_config(path_or_name, models_dir)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    _bounded(path, max(size, len(raw)))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    data = parse_config_json(text, path)
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object (a config.json), got {type(data).__name__}")
    data.setdefault("_path", str(path))
    return data


def parse_config_json(text: str, path: str | Path) -> object:
    r"""The JSON value of a config's ``text``; refused when not JSON, too deep, or repeating a key in an object.

    >>> parse_config_json('{"num_hidden_layers": 80}', "c.json")
    {'num_hidden_layers': 80}
    >>> try:
    ...     parse_config_json('{"num_hidden_layers": 80,\n "num_hidden_layers": 8}', "c.json")
    ... except ModelConfigError as refused:
    ...     print(refused)
    c.json, line 2: key 'num_hidden_layers' given twice in one object (lines 1, 2): ambiguous
    """
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, text, path))
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    except RecursionError:
        raise ModelConfigError(f"{path}: nested too deeply to be a config.json") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        if isinstance(exc, ModelConfigError):
            raise
        raise ModelConfigError(f"{path}: a value no config.json holds ({exc})") from None


def _unique_keys(pairs: list[tuple[str, object]], text: str, path: str | Path) -> dict:
    """``dict(pairs)``, refusing a key given twice, with the lines it is on."""
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            quoted = re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:"
            lines = [text.count("\n", 0, found.start()) + 1 for found in re.finditer(quoted, text)]
            where = f", line {lines[1]}" if len(lines) == 2 else ""
            listed = f" (lines {', '.join(map(str, sorted(set(lines))))})" if len(set(lines)) > 1 else ""
            raise ModelConfigError(f"{path}{where}: key {key!r} given twice in one object{listed}: ambiguous")
        seen.add(key)
    return dict(pairs)
