"""Where the bundled data lives: the model catalogue (package data, installed with kvplan) and, in a
checkout, the sample logs for notebooks and the demo.

>>> (MODELS_DIR / "llama-3.1-70b.json").exists(), (DATA_DIR / "README.md").exists()
(True, True)
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The model catalogue: ``kvplan/models/<name>.json``, shipped inside the package.
MODELS_DIR = PACKAGE_DIR / "models"
PROJECT_DIR = PACKAGE_DIR.parent
#: The checkout's sample data (not installed by a wheel).
DATA_DIR = PROJECT_DIR / "data"
