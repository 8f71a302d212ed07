"""The NestedTensor API: build ragged batches, look at them padded or packed,
run a small transformer encoder eagerly and compiled with the ragged backend.

    python samples/nested_tensor_api.py
"""

import torch
import torch.nn.functional as F
from torch import nn

from ragged_mlir.torch import NestedTensor

torch.manual_seed(0)
torch.set_num_threads(2)

# Items of different lengths; DanLing's constructor.
x = NestedTensor(torch.randn(3, 8), torch.randn(5, 8), torch.randn(1, 8))
print("shape (ragged dims show their max):", tuple(x.shape))
print("lengths:", x.lengths.tolist(), "offsets:", x.offsets.tolist())
print("padded .tensor:", tuple(x.tensor.shape), " .mask:\n", x.mask.int())
print("packed .concat:", tuple(x.concat.shape))

# Items ragged in two dims: images with their own height and width.
img = NestedTensor(torch.randn(3, 5, 7), torch.randn(3, 4, 6))
print("images:", tuple(img.shape), "item shapes:", [tuple(s) for s in img.item_shapes])

# To and from PyTorch's nested tensors (jagged layout).
njt = x.to_njt()
print(
    "NJT round trip equal:",
    all(torch.equal(a, b) for a, b in zip(NestedTensor.from_njt(njt).unbind(), x.unbind(), strict=False)),
)

# Transformer pieces run on the packed values: no padding anywhere.
encoder = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True).eval()
with torch.no_grad():
    y = encoder(x)
    pooled = y.mean(dim=1)
    print("encoder output:", tuple(y.shape), "pooled:", tuple(pooled.shape))

    # The same per item, as a check.
    per_item = torch.stack([encoder(t[None])[0].mean(0) for t in x.unbind()])
    print("max |batched - per item|:", (pooled - per_item).abs().max().item())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: NestedTensor):
        return self.norm(x + F.gelu(self.proj(x))).mean(dim=1)


block = Block().eval()
compiled = torch.compile(block, backend="ragged", dynamic=True)
with torch.no_grad():
    print("compiled vs eager:", (compiled(x) - block(x)).abs().max().item())
