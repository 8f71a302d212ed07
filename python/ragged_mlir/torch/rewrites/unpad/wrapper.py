"""Calling an unpadded graph: the mask packs the token inputs, the graph
runs on the valid tokens, per-token outputs are written back (0 at padded
positions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ... import ops  # noqa: F401  (registers torch.ops.ragged.*)


@dataclass
class Unpadded:
    """How to call a rewritten graph: which inputs are the mask and the
    token inputs, which outputs are per token or per item."""

    mask_index: int
    token_inputs: list[int]
    batch_symints: list[int]
    length_symints: list[int]
    token_outputs: list[int]
    item_outputs: list[int]
    first_token: bool = False
    rewrites: list[str] = field(default_factory=list)
    # Token outputs whose length dim is not dim 1 ([B, H, L, d] keys of a
    # cache): output index -> that dim.
    length_dims: dict[int, int] = field(default_factory=dict)
    # Values the wrapper computes on the padded inputs: (graph, its inputs).
    hoisted: list[tuple[fx.GraphModule, list[int]]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether every output equals eager's (up to rounding): nothing is
        returned per token (eager has values from padding at padded
        positions) and no item output reads the first token (eager reads a
        padded slot for an item without tokens)."""
        return not self.token_outputs and not self.first_token

    def wrap(self, compiled: Callable, eager: Callable) -> Callable:
        def run(*args):
            mask = args[self.mask_index]
            if mask.dtype != torch.bool:
                if (
                    mask.is_floating_point()
                    or mask.is_complex()
                    or not bool(((mask == 0) | (mask == 1)).all())
                ):
                    raise ValueError(
                        f"attention mask (argument {self.mask_index}): unpadding needs a mask of 0 and 1 "
                        f"or booleans, got dtype {mask.dtype}"
                    )
            m = mask.bool()
            b, length = m.shape
            flat = m.reshape(-1).nonzero().squeeze(1)
            n = flat.numel()
            lengths = m.sum(1)
            if n == 0 or (self.first_token and bool((~m[:, 0] & (lengths > 0)).any())):
                # No token at all, or x[:, 0] reading a padded slot (left
                # padding): what eager computes there has no unpadded form.
                return eager(*args)
            new = list(args)

            def pack(t):
                return t.reshape((b * length,) + tuple(t.shape[2:]))[flat].unsqueeze(0)

            for i in self.token_inputs:
                new[i] = pack(args[i])
            hoisted = [pack(g(*(args[i] for i in ins))) for g, ins in self.hoisted]
            for i in self.batch_symints:
                new[i] = 1
            for i in self.length_symints:
                new[i] = n
            offsets = torch.zeros(b + 1, dtype=torch.int64)
            torch.cumsum(lengths, 0, out=offsets[1:])
            positions = (flat % length).unsqueeze(0)
            firsts = offsets[:-1].clamp(max=n - 1)
            out = compiled(*new, positions, offsets, firsts, *hoisted)
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            for i in self.token_outputs:
                at = self.length_dims.get(i, 1)
                packed = out[i][0].movedim(at - 1, 0)
                padded = packed.new_zeros((b * length,) + tuple(packed.shape[1:]))
                padded[flat] = packed
                out[i] = padded.reshape((b, length) + tuple(packed.shape[1:])).movedim(1, at).contiguous()
            empty = lengths == 0
            if bool(empty.any()):
                for i in self.item_outputs:
                    out[i] = out[i].masked_fill(empty.reshape((-1,) + (1,) * (out[i].dim() - 1)), 0)
            return tuple(out)

        return run
