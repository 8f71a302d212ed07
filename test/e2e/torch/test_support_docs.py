"""docs/torch.md lists what is supported from the code's own tables; this
test fails when the list is out of date (fix:
``python -m ragged_mlir.torch.backend.support --write docs/torch.md``)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from ragged_mlir.torch.backend import support  # noqa: E402

DOC = Path(__file__).resolve().parents[3] / "docs" / "torch.md"


def test_generated_support_section_is_current():
    text = DOC.read_text()
    assert support.update(text) == text, (
        "docs/torch.md is stale: python -m ragged_mlir.torch.backend.support --write docs/torch.md"
    )


def test_support_section_names_every_table():
    section = support.support_markdown()
    for needle in (
        "ragged.attention",
        "segment_reduce",
        "bfloat16",
        "nn.functional.scaled_dot_product_attention",
    ):
        assert needle in section
    with pytest.raises(ValueError, match="markers"):
        support.update("no markers here")
