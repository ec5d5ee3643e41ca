"""Where the bundled sample data lives, for notebooks and the demo.

>>> (DATA_DIR / "README.md").exists()
True
"""

from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = PROJECT_DIR / "data"
MODELS_DIR = DATA_DIR / "models"
