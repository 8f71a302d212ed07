"""FX graph rewrites, in the order the backend applies them to a graph
(:func:`..backend.compile.compile_fx_graph` and its Dynamo hook):

1. :mod:`.njt_patterns`: PyTorch NJT's pad -> op -> unpad patterns become
   ragged ops;
2. :mod:`.unpad` (inference graphs, ``unpad`` option): a padded model with
   a key-padding mask runs on its valid tokens;
3. :mod:`.masked_rows`: attention rows whose keys are all masked give 0, as
   PyTorch defines them;
4. :mod:`.decompositions` (``count_dims_from_the_front``): dims counted
   from the back, which torch-mlir mis-imports, counted from the front;
5. ``backend.checks``: run-time checks of indices and divisors;
6. :mod:`.widen`: uint8 and low-precision floats computed in a wider type
   where torch-mlir or IREE cannot compute them;
7. :mod:`.gelu`: GELU kept exact (erf), whatever torch-mlir would approximate;
8. :mod:`.decompositions` (``imports_wrong``, ``decompose``): the graph
   retraced through torch-mlir's decompositions and ours where torch-mlir
   imports it wrongly or not at all;
9. :mod:`.reshapes`: views torch-mlir gets wrong are emitted by the backend
   (read while planning).

Each is a workaround of torch-mlir 20261001 or IREE 3.13, or a ragged rewrite
of PyTorch idioms; each module's docstring says which.
"""
