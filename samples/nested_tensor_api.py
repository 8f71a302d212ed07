"""The NestedTensor API (DanLing's): build ragged batches, look at them padded
or packed, index and assign, reduce over any dim, run the multi-head attention
idiom, and compile a model with the ragged backend.

    python samples/nested_tensor_api.py
"""

import io

import torch
import torch.nn.functional as F
from torch import nn

from ragged_mlir.torch import NestedTensor
from ragged_mlir.torch.nested import supported_functions

torch.manual_seed(0)
torch.set_num_threads(2)

# -- construction: tensors, one iterable, nested lists ------------------------------------------
x = NestedTensor(torch.randn(3, 8), torch.randn(5, 8), torch.randn(1, 8))
ids = NestedTensor([[5, 2, 9], [1, 7], [4, 4, 4, 8]])
print("shape (ragged dims show their max):", tuple(x.shape), "ragged dims:", x.ragged_dims)
print("lengths:", x.lengths.tolist(), "offsets:", x.offsets.tolist())
print("padded .tensor:", tuple(x.tensor.shape), " .mask:\n", x.mask.int())
print("packed .concat:", tuple(x.concat.shape), " ids.tolist():", ids.tolist())
back = NestedTensor.from_tensor_mask(x.tensor, x.mask)
print("from_tensor_mask round trip:", all(torch.equal(a, b) for a, b in zip(back, x, strict=True)))

# Images ragged in two dims, stored channels-last: values [sum H W, C].
img = NestedTensor(torch.randn(3, 5, 7), torch.randn(3, 4, 6))
print(
    "images:",
    tuple(img.shape),
    "packed:",
    tuple(img.values.shape),
    "items:",
    [tuple(s) for s in img.item_shapes],
)
print(
    "per-image channel means:",
    tuple(img.mean(dim=(2, 3)).shape),
    " per-pixel channel sum:",
    tuple(img.sum(1).shape),
)

# -- indexing, assignment, in place ---------------------------------------------------------------
print(
    "x[0]:",
    tuple(x[0].shape),
    " x[1:]:",
    tuple(x[1:].shape),
    " x[:, 1:]:",
    [tuple(t.shape) for t in x[:, 1:]],
)
print("first tokens x[:, 0]:", tuple(x[:, 0].shape), " x[..., :2]:", tuple(x[..., :2].shape))
y = x.clone()
y[:, 0] = 0.0  # every item's first row
y[1] = torch.ones(2, 8)  # item 1 gets a new length: the batch is repacked
y += 1.0  # in place on the packed values
print("after assignment:", [tuple(t.shape) for t in y], "first row of item 0:", y[0][0, :3].tolist())

# -- functions: elementwise, reductions over any dim, views --------------------------------------
z = torch.where(x > 0, x.exp(), F.gelu(x)) * torch.arange(8.0)  # a dense [8] row broadcasts
print(
    "pooled over the ragged dim:",
    tuple(z.mean(dim=1).shape),
    " over the batch dim:",
    tuple(z.sum(dim=0).shape),
)
print(
    "max with indices:", tuple(z.max(dim=1).indices.shape), " softmax over L:", tuple(z.softmax(dim=1).shape)
)
heads = x.unflatten(-1, (2, -1)).transpose(1, 2)  # [B, 2, L(b), 4], the same packed values
print("heads view:", tuple(heads.shape), "values shared:", heads.values.data_ptr() == x.values.data_ptr())
counts = {}
for entry in supported_functions():
    counts[entry.category] = counts.get(entry.category, 0) + 1
print("torch functions by category:", counts)

# -- serialization -----------------------------------------------------------------------------------
buf = io.BytesIO()
torch.save(x, buf)
buf.seek(0)
print("torch.save/load equal:", torch.equal(torch.load(buf).tensor, x.tensor))


# -- the attention idiom, eager and compiled ---------------------------------------------------------
class Block(nn.Module):
    def __init__(self, e: int = 8, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(e, 3 * e)
        self.out = nn.Linear(e, e)
        self.norm = nn.LayerNorm(e)

    def forward(self, x: NestedTensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)  # torch.ops.ragged.attention on [N, H, d]
        x = x + self.out(a.transpose(1, 2).flatten(-2))
        return x.mean(dim=1)


block = Block().eval()
with torch.no_grad():
    eager = block(x)
    per_item = torch.stack([block(NestedTensor(t))[0] for t in x])
    print("batched vs per item:", (eager - per_item).abs().max().item())
    compiled = torch.compile(block, backend="ragged", dynamic=True)
    print("compiled vs eager:", (compiled(x) - eager).abs().max().item())
