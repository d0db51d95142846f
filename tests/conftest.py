import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
if "PRIVFAIR_DATA_DIR" not in os.environ and SHARED.is_dir():
    os.environ["PRIVFAIR_DATA_DIR"] = str(SHARED)


def have_data(subdir: str) -> bool:
    base = os.environ.get("PRIVFAIR_DATA_DIR")
    return bool(base) and (Path(base) / subdir).is_dir()


def needs_data(subdir: str):
    """Skip a test when a real dataset folder is not available under PRIVFAIR_DATA_DIR."""
    return pytest.mark.skipif(not have_data(subdir), reason=f"dataset folder {subdir}/ not in PRIVFAIR_DATA_DIR")
