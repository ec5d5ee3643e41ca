"""Read a Hugging Face ``config.json`` from disk, by path or by name in the bundled catalogue.

The catalogue is ``kvplan/models/<name>.json``, package data installed with kvplan (see
``kvplan/models/README.md``). Nothing here touches
the network: a name that is neither a file nor a catalogue entry is an error that lists the names
the catalogue has.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.config import MODELS_DIR


class ModelConfigError(ValueError):
    """A model config that cannot be read; the message names the file and what was expected."""


def catalogue_names(models_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the bundled model configs, e.g. ``llama-3.1-70b``.

    >>> "llama-3.1-70b" in catalogue_names()
    True
    """
    return sorted(path.stem for path in Path(models_dir).glob("*.json"))


def resolve_model_config(path_or_name: str | Path, models_dir: Path = MODELS_DIR) -> Path:
    """The file a ``--model`` value means: an existing path, else ``<models_dir>/<name>.json``.

    >>> resolve_model_config("qwen3-8b").name
    'qwen3-8b.json'
    """
    path = Path(path_or_name)
    if path.is_file():
        return path
    candidate = Path(models_dir) / f"{str(path_or_name).removesuffix('.json')}.json"
    if candidate.is_file():
        return _relative_to_cwd(candidate)
    names = ", ".join(catalogue_names(models_dir)) or "none"
    raise ModelConfigError(
        f"model config {str(path_or_name)!r}: no such file, and no catalogue entry "
        f"{candidate.name} in {models_dir} (catalogue: {names})"
    )


def _relative_to_cwd(path: Path) -> Path:
    """``path`` relative to the working directory when it lies below it (so an evidence bundle records
    ``kvplan/models/x.json``, not the checkout's absolute path), else unchanged."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def read_model_config(path_or_name: str | Path, models_dir: Path = MODELS_DIR) -> dict:
    """The JSON object of a ``config.json`` path or a catalogue name, as a dict.

    >>> read_model_config("llama-3.1-70b")["num_key_value_heads"]
    8
    """
    path = resolve_model_config(path_or_name, models_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object (a config.json), got {type(data).__name__}")
    data.setdefault("_path", str(path))
    return data
