"""The samples run and agree with their padded references."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_encoder_block_sample():
    out = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "ragged_encoder_block.py"), "--batch", "6", "--dim", "32"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "max |ragged - padded|" in out
