"""docs/architecture.md names functions that exist: each `kvplan.…` name in its tables imports."""

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
TABLE_NAMES = sorted(set(re.findall(r"^\|[^|]*\| `(kvplan\.[\w.]+)` \|$", DOC.read_text(), re.M)))


def resolve(name: str) -> object:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(name)


def test_the_table_lists_the_numbers():
    assert len(TABLE_NAMES) >= 30  # every row of "where each number is computed"


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_each_named_function_exists(name):
    assert callable(resolve(name))
