"""Helpers of the torch tests: the ragged backend under ``torch.compile``,
and seeded random items.

Under pytest this folder is on ``sys.path`` (there is deliberately no
``__init__.py`` here: with one, pytest would import the folder as the
package ``torch``): ``from torch_helpers import ragged_compile``. Import it
after ``pytest.importorskip("torch")``.

The fixture that gives a test a fresh Dynamo cache in inference mode is
``fresh_dynamo_no_grad`` in ``conftest.py``.
"""

from __future__ import annotations

import torch


def ragged_compile(fn, *, fullgraph: bool = True, fresh: bool = True, **options):
    """``torch.compile(fn, backend="ragged", dynamic=True)``.

    ``fullgraph``: one graph or an error, no graph break. ``fresh``: reset
    Dynamo first, so that nothing traced before (in this test or an earlier
    one) is reused. ``options`` go to the backend (``unpad=True``,
    ``debug_dir=...``, ``fallback=...``)."""
    if fresh:
        torch._dynamo.reset()
    return torch.compile(fn, backend="ragged", dynamic=True, fullgraph=fullgraph, options=options or None)


def randn_items(lengths, dim, seed=0, dtype=torch.float32):
    """Items ``[n, dim]`` for ``n`` in ``lengths``, standard normal values
    drawn in ``dtype`` from a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, dim, generator=g, dtype=dtype) for n in lengths]


def randn_items_fp64(lengths, dim, seed=0, dtype=torch.float32):
    """As :func:`randn_items`, but drawn in float64 and then rounded to
    ``dtype``: the same values (rounded) whatever ``dtype``; other values
    than :func:`randn_items` draws."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, dim, generator=g, dtype=torch.float64).to(dtype) for n in lengths]
