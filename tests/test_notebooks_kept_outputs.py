"""Notebooks store only the outputs nbval compares: the ``# NBVAL_CHECK_OUTPUT`` headline cells.

Those cells carry ``"keep_output": true`` so the nbstripout hook of ``.pre-commit-config.yaml`` keeps
their pinned numbers while it strips every other output (charts, tables, widgets).
"""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_only_the_checked_headline_cells_keep_their_outputs(notebook):
    cells = [cell for cell in json.loads(notebook.read_text())["cells"] if cell["cell_type"] == "code"]
    checked = ["# NBVAL_CHECK_OUTPUT" in "".join(cell["source"]) for cell in cells]
    assert any(checked), "a notebook pins at least one headline cell"
    for cell, is_checked in zip(cells, checked):
        assert bool(cell.get("metadata", {}).get("keep_output")) == is_checked, "".join(cell["source"])[:80]
        assert bool(cell.get("outputs")) == is_checked, "".join(cell["source"])[:80]
