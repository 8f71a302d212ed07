"""Hugging Face architectures as they ship, at a size of our choosing: the
model zoo of ``test/e2e/torch/test_hf_zoo.py`` (tiny, random weights) and of
``bench/hf_zoo.py`` (MiniLM-sized, or real weights where a package carries
them).

Each entry builds the model from its own config class, so nothing is
downloaded. ``decoder`` marks the causal models, called with left padding as
well as right padding (batched prefill, left-padded generation); ``pooler``
the models whose output holds a pooled first token (BERT's pooler, live
when users call ``model(...)``); ``attention`` the implementations each
architecture offers (``sdpa`` and the written-out ``eager``, or its own
only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["ARCHITECTURES", "MINILM", "TINY", "Architecture", "Size", "build", "padded_batch"]


@dataclass(frozen=True)
class Size:
    """The shape of a model: hidden width, layers, heads, FF width, vocab."""

    hidden: int
    layers: int
    heads: int
    ff: int
    vocab: int = 1000
    positions: int = 512


TINY = Size(hidden=32, layers=2, heads=2, ff=64, vocab=100, positions=128)
MINILM = Size(hidden=384, layers=6, heads=12, ff=1536, vocab=30522, positions=512)


@dataclass(frozen=True)
class Architecture:
    name: str
    build: Callable[[Size], torch.nn.Module]
    attention: tuple[str, ...] = ("sdpa", "eager")
    decoder: bool = False
    pooler: bool = False
    #: Token id used for padding (RoBERTa-style models count positions from it).
    pad: int = 0
    #: Why unpadding does not apply, where it does not (None: it applies),
    #: and the words of the analysis that refuses it.
    unpad_refusal: str | None = None
    refused_by: str | None = None


def _bert_like(config_cls, model_cls, **extra):
    def build(s: Size):
        import transformers

        config = getattr(transformers, config_cls)(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            num_hidden_layers=s.layers,
            num_attention_heads=s.heads,
            intermediate_size=s.ff,
            max_position_embeddings=s.positions,
            **extra,
        )
        return getattr(transformers, model_cls)(config)

    return build


def _distilbert(s: Size):
    import transformers

    config = transformers.DistilBertConfig(
        vocab_size=s.vocab,
        dim=s.hidden,
        n_layers=s.layers,
        n_heads=s.heads,
        hidden_dim=s.ff,
        max_position_embeddings=s.positions,
    )
    return transformers.DistilBertModel(config)


def _modernbert(s: Size):
    import transformers

    config = transformers.ModernBertConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        intermediate_size=s.ff,
        max_position_embeddings=s.positions,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
        # Every other layer attends within a window (the shipped config's
        # 128 positions; 16 at the tiny size, so the window matters).
        global_attn_every_n_layers=2,
        local_attention=16 if s.hidden < 128 else 128,
    )
    return transformers.ModernBertModel(config)


def _t5_encoder(s: Size):
    import transformers

    config = transformers.T5Config(
        vocab_size=s.vocab,
        d_model=s.hidden,
        d_kv=s.hidden // s.heads,
        d_ff=s.ff,
        num_layers=s.layers,
        num_heads=s.heads,
    )
    return transformers.T5EncoderModel(config)


def _gpt2(s: Size):
    import transformers

    config = transformers.GPT2Config(
        vocab_size=s.vocab,
        n_embd=s.hidden,
        n_layer=s.layers,
        n_head=s.heads,
        n_inner=s.ff,
        n_positions=s.positions,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2Model(config)


def _llama(s: Size):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=max(1, s.heads // 2),  # grouped-query attention, as Llama ships
        intermediate_size=s.ff,
        max_position_embeddings=s.positions,
        bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.LlamaModel(config)


_RELATIVE = "attention with a relative-position bias, which ragged.attention does not take"

#: The twelve architectures, in the order the docs list them.
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in [
        Architecture("bert", _bert_like("BertConfig", "BertModel"), pooler=True),
        Architecture("distilbert", _distilbert),
        Architecture(
            "roberta", _bert_like("RobertaConfig", "RobertaModel", pad_token_id=1), pooler=True, pad=1
        ),
        Architecture(
            "xlm-roberta",
            _bert_like("XLMRobertaConfig", "XLMRobertaModel", pad_token_id=1),
            pooler=True,
            pad=1,
        ),
        Architecture("albert", _bert_like("AlbertConfig", "AlbertModel", embedding_size=16), pooler=True),
        Architecture("electra", _bert_like("ElectraConfig", "ElectraModel", embedding_size=16)),
        Architecture(
            "mpnet",
            _bert_like("MPNetConfig", "MPNetModel", pad_token_id=1),
            attention=("own",),
            pooler=True,
            pad=1,
            unpad_refusal=_RELATIVE,
            refused_by="no attention in the graph",
        ),
        Architecture(
            "deberta-v2",
            _bert_like("DebertaV2Config", "DebertaV2Model"),
            attention=("own",),
            unpad_refusal="disentangled attention (content-to-position and position-to-content scores), "
            "which ragged.attention does not take",
            refused_by="no attention in the graph",
        ),
        Architecture(
            "modernbert",
            _modernbert,
            unpad_refusal="sliding-window attention in every other layer, which ragged.attention does not take",
            refused_by="neither a key-padding mask",
        ),
        Architecture(
            "t5-encoder",
            _t5_encoder,
            unpad_refusal=_RELATIVE,
            refused_by="the attention mask reads input",
        ),
        Architecture("gpt2", _gpt2, decoder=True),
        Architecture("llama", _llama, decoder=True),
    ]
}


def padded_batch(
    lengths: list[int],
    length: int | None = None,
    *,
    vocab: int,
    pad: int = 0,
    left: bool = False,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of ``[B, length]``: random tokens
    (never ``pad``), padded on the right or the left."""
    g = torch.Generator().manual_seed(seed)
    length = length or max(max(lengths), 1)
    ids = torch.full((len(lengths), length), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        span = slice(length - n, length) if left else slice(0, n)
        tokens = torch.randint(3, vocab, (n,), generator=g)
        ids[b, span] = torch.where(tokens == pad, tokens + 1, tokens)
        mask[b, span] = 1
    return ids, mask


def build(arch: Architecture, size: Size, attention: str, seed: int = 0) -> torch.nn.Module:
    """The model in eval mode with ``attention`` (its own where it has one)."""
    torch.manual_seed(seed)
    model = arch.build(size).eval()
    if attention != "own":
        model.set_attn_implementation(attention)
    return model
