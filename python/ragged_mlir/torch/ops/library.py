"""The ``ragged`` custom ops: each is registered with torch.library under
``ragged::<name>``, its schema inferred from its reference implementation's
signature (:mod:`.reference`, which also runs it eagerly), with its fake
kernel (:mod:`.fake`). :mod:`.autograd` adds the backward formulas.
"""

from __future__ import annotations

from torch.library import custom_op

from . import fake, reference

segment_reduce = custom_op("ragged::segment_reduce", reference.segment_reduce, mutates_args=())
segment_reduce.register_fake(fake.segment_reduce)

segment_broadcast = custom_op("ragged::segment_broadcast", reference.segment_broadcast, mutates_args=())
segment_broadcast.register_fake(fake.segment_broadcast)

row_range = custom_op("ragged::row_range", reference.row_range, mutates_args=())
row_range.register_fake(fake.row_range)

segment_softmax = custom_op("ragged::segment_softmax", reference.segment_softmax, mutates_args=())
segment_softmax.register_fake(fake.segment_softmax)

attention = custom_op("ragged::attention", reference.attention, mutates_args=())
attention.register_fake(fake.attention)

attention_lse = custom_op("ragged::attention_lse", reference.attention_lse, mutates_args=())
attention_lse.register_fake(fake.attention_lse)

to_padded = custom_op("ragged::to_padded", reference.to_padded, mutates_args=())
to_padded.register_fake(fake.to_padded)

from_padded = custom_op("ragged::from_padded", reference.from_padded, mutates_args=())
from_padded.register_fake(fake.from_padded)

attention_backward = custom_op("ragged::attention_backward", reference.attention_backward, mutates_args=())
attention_backward.register_fake(fake.attention_backward)

conv2d = custom_op("ragged::conv2d", reference.conv2d, mutates_args=())
conv2d.register_fake(fake.conv2d)

pool2d = custom_op("ragged::pool2d", reference.pool2d, mutates_args=())
pool2d.register_fake(fake.pool2d)
