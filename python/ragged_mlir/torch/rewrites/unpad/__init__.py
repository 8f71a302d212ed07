"""Unpadding: a padded model called with a key-padding mask runs on the real
tokens only (``options={"unpad": True}``).

A Hugging Face style encoder takes ``input_ids [B, L]`` and an
``attention_mask [B, L]`` of 0/1 and computes, for every position, per-token
layers (embeddings, linear, layer norm, activations, residuals) and attention
whose keys are masked by the mask. Valid positions never read padded ones,
so the graph can run on the valid tokens alone, packed as one sequence of
``N = sum(mask)`` tokens, with attention per item over ``torch.ops.ragged``'s
attention.

The rewrite keeps the graph's ops and ranks: every ``[B, L, ...]`` value
becomes ``[1, N, ...]`` (the batch size symbol is bound to 1 and the length
symbol to N), which is the same per-token computation on the packed tokens.
What is not per-token is rewritten or refused:

* the mask itself: the nodes computing each attention's ``attn_mask`` from it
  must only feed attentions, and evaluating them on probe masks must give a
  key-padding mask (a valid query attends to exactly the valid keys of its
  item; additive masks hold 0 and at most -1e4). Otherwise the graph is left
  as it was;
* position-dependent values (``arange(L)``, a buffer sliced to ``[:L]``, as
  position ids are) become the same values indexed by each token's position
  in its padded row;
* attention (``scaled_dot_product_attention`` and ATen's CPU flash form, or
  written out as ``softmax(q @ k^T * scale + mask) @ v``), non-causal,
  without dropout: ``ragged.attention`` over the packed tokens;
* integer values computed from the token inputs alone that mix tokens (the
  ``cumsum`` of ``input_ids != pad`` that gives RoBERTa its position ids):
  the wrapper computes them eagerly on the padded inputs, as the original
  graph does, and passes them in packed like a token input;
* the first token of each item (``x[:, 0]``, BERT's pooler): a gather at the
  items' first rows. A batch in which slot 0 of a non-empty item is padding
  (left padding) runs the original graph eagerly, since ``x[:, 0]`` then
  reads a padded slot;
* any other op that reduces, indexes or mixes along the batch or length dims
  refuses the rewrite, with the reason logged at debug level
  (``logging.getLogger("ragged_mlir.torch.unpad")``).

At run time the wrapper packs the token inputs with the mask (any 0/1 mask,
not only a prefix), calls the compiled graph on them and writes ``[B, L,
...]`` outputs back with 0 at padded positions; per-item outputs of items
with no valid token are 0. A batch without any valid token runs the original
graph eagerly.

The pieces: :mod:`.patterns` (what is recognised), :mod:`.analysis` (the
proof that the graph keeps tokens apart), :mod:`.rewrite` (the packed
graph) and :mod:`.wrapper` (the call on padded inputs).
"""

from __future__ import annotations

import torch.fx as fx

from .analysis import _Rewriter
from .patterns import _Refuse, log
from .wrapper import Unpadded

__all__ = ["Unpadded", "log", "unpad_graph"]


def unpad_graph(gm: fx.GraphModule, refusals: list[str] | None = None) -> Unpadded | None:
    """Rewrites ``gm`` in place to run on packed tokens and returns how to
    call it, or returns None with the reason logged (and appended to
    ``refusals``); ``gm`` may then be partly rewritten, so the backend hands
    it a copy."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    try:
        # The backend runs inside the tracer's fake mode; probes need real tensors.
        with unset_fake_temporarily():
            how = _Rewriter(gm).run()
        log.debug("unpadded (mask: argument %d): %s", how.mask_index, "; ".join(how.rewrites))
        return how
    except _Refuse as e:
        log.debug("unpadding refused: %s", e)
        if refusals is not None:
            refusals.append(str(e))
        return None
