"""Batches of lengths sampled from the real token-length histograms in
bench/data/lengths (their sources: bench/data/README.md) and synthetic
distributions."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["DATA_DIR", "histogram", "sample_lengths", "SYNTHETIC"]

#: The vendored histograms; RAGGED_LENGTHS_DIR points elsewhere.
DATA_DIR = Path(os.environ.get("RAGGED_LENGTHS_DIR", Path(__file__).resolve().parent / "data" / "lengths"))

SYNTHETIC = ("uniform-half", "uniform-0.6", "zipf", "equal")


def histogram(name: str) -> tuple[np.ndarray, np.ndarray]:
    path = DATA_DIR / f"{name}.csv"
    if not path.exists():
        known = sorted(p.stem for p in DATA_DIR.glob("*.csv"))
        raise FileNotFoundError(f"{path}: no length histogram {name!r}; known: {known}")
    rows = [line.split(",") for line in path.read_text().splitlines() if line and line[0].isdigit()]
    lengths = np.array([int(r[0]) for r in rows])
    counts = np.array([int(r[1]) for r in rows], dtype=np.float64)
    return lengths, counts / counts.sum()


def sample_lengths(name: str, batch: int, seed: int = 0, max_len: int = 128) -> np.ndarray:
    """``batch`` i.i.d. lengths from a dataset histogram or a synthetic law."""
    rng = np.random.default_rng(seed)
    if name == "uniform-half":  # mean = max / 2
        return rng.integers(1, max_len + 1, batch)
    if name == "uniform-0.6":  # mean = 0.6 max
        return rng.integers(int(0.2 * max_len), max_len + 1, batch)
    if name == "zipf":
        return np.minimum(rng.zipf(1.2, batch), max_len)
    if name == "equal":
        return np.full(batch, max_len // 2)
    lengths, p = histogram(name)
    return rng.choice(lengths, size=batch, p=p)
