"""Bad input at the Python API and compile errors.

Every error must be raised before IREE sees the buffers (ValueError /
TypeError naming the argument and what was expected), or, for what only the
compiled code can check (ids in range, lengths within bounds), as a
RuntimeError carrying the op's message. Library bugs found here are pinned by
``xfail(strict=True)`` tests whose reason states the observed behaviour.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import re
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import CompileError, CompileOptions, RaggedArray

F32 = np.float32
S = "!ragged.tensor<?, [L], 8, f32>"
H = "!ragged.tensor<?, [L], 2, 4, f32>"
P = "!ragged.tensor<?, [L], [L], 2, f32>"
N = "!ragged.tensor<?, [S], [T(S)], 8, f32>"

API = f"""
func.func @mul(%x: {S}, %y: {S}) -> {S} {{
  %z = ragged.binary <mul> %x, %y : {S}, {S}
  return %z : {S}
}}
func.func @mm(%x: {S}, %w: tensor<8x3xf32>) -> !ragged.tensor<?, [L], 3, f32> {{
  %y = ragged.matmul %x, %w : {S}, tensor<8x3xf32> -> !ragged.tensor<?, [L], 3, f32>
  return %y : !ragged.tensor<?, [L], 3, f32>
}}
func.func @scal(%x: {S}, %s: tensor<f32>) -> {S} {{
  %y = ragged.binary <mul> %x, %s : {S}, tensor<f32>
  return %y : {S}
}}
func.func @static(%x: !ragged.tensor<3, [L], 8, f32>) -> !ragged.tensor<3, [L], 8, f32> {{
  %y = ragged.unary <neg> %x : !ragged.tensor<3, [L], 8, f32>
  return %y : !ragged.tensor<3, [L], 8, f32>
}}
func.func @nred(%x: {N}) -> !ragged.tensor<?, [S], 8, f32> {{
  %r = ragged.reduce <sum> %x : {N} -> !ragged.tensor<?, [S], 8, f32>
  return %r : !ragged.tensor<?, [S], 8, f32>
}}
func.func @att(%q: {H}, %k: {H}, %v: {H}) -> {H} {{
  %o = ragged.attention %q, %k, %v {{scale = 0.5 : f64, causal}} : {H}
  return %o : {H}
}}
func.func @sc(%q: {H}, %k: {H}) -> {P} {{
  %s = ragged.scores %q, %k : {H}, {H} -> {P}
  return %s : {P}
}}
func.func @gather(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], i64>) -> {S} {{
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], i64> -> {S}
  return %e : {S}
}}
func.func @cat(%a: {S}, %b: !ragged.tensor<?, [M], 8, f32>) -> !ragged.tensor<?, [K], 8, f32> {{
  %c = ragged.concat %a, %b : {S}, !ragged.tensor<?, [M], 8, f32> -> !ragged.tensor<?, [K], 8, f32>
  return %c : !ragged.tensor<?, [K], 8, f32>
}}
func.func @split(%a: {S}, %l: tensor<?xi64>) -> (!ragged.tensor<?, [A], 8, f32>, !ragged.tensor<?, [B], 8, f32>) {{
  %h, %t = ragged.split %a, %l : {S}, tensor<?xi64> -> !ragged.tensor<?, [A], 8, f32>, !ragged.tensor<?, [B], 8, f32>
  return %h, %t : !ragged.tensor<?, [A], 8, f32>, !ragged.tensor<?, [B], 8, f32>
}}
func.func @pad(%x: {S}) -> (tensor<?x?x8xf32>, tensor<?x?xi1>) {{
  %p = ragged.to_padded %x padding(0.0 : f32) : {S} -> tensor<?x?x8xf32>
  %m = ragged.mask %x : {S} -> tensor<?x?xi1>
  return %p, %m : tensor<?x?x8xf32>, tensor<?x?xi1>
}}
func.func @fp(%p: tensor<?x?x8xf32>, %l: tensor<?xi64>) -> {S} {{
  %x = ragged.from_padded %p lengths(%l) : tensor<?x?x8xf32>, tensor<?xi64> -> {S}
  return %x : {S}
}}
"""


@pytest.fixture(scope="module")
def api(compiled):
    return compiled(API)


def batch(rng, lengths, trailing=(8,)):
    return RaggedArray.from_list([rng.uniform(-1, 1, (n, *trailing)).astype(F32) for n in lengths])


def with_partitions(ra: RaggedArray, *parts) -> RaggedArray:
    """A RaggedArray whose partitions were swapped after construction (the
    constructor rejects bad offsets itself): exercises the call-time check."""
    bad = copy.copy(ra)
    bad.partitions = [np.asarray(p) for p in parts]
    return bad


@pytest.fixture
def x(rng):
    return batch(rng, [2, 3])


@pytest.fixture
def w(rng):
    return rng.uniform(-1, 1, (8, 3)).astype(F32)


# --------------------------------------------------------------------------
# Offsets: checked by the RaggedArray constructor and again at the call
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "offsets,exc,match",
    [
        ([1, 2, 5], ValueError, r"offsets: offsets must start at 0, got 1"),
        (
            [0, 3, 2, 5],
            ValueError,
            r"offsets: offsets must be non-decreasing, but offsets\[2\] = 2 < offsets\[1\] = 3",
        ),
        (
            [0, 2, 4],
            ValueError,
            r"offsets: the last offset must equal the number of rows of values \(5\), got 4",
        ),
        (
            [0.0, 2.0, 5.0],
            TypeError,
            r"offsets: expected an integer \(int64\) offsets array, got dtype float64",
        ),
        ([[0, 2, 5]], TypeError, r"offsets: expected a 1-D offsets array, got shape \(1, 3\)"),
        (np.zeros(0, np.int64), ValueError, r"offsets: offsets need at least one entry"),
    ],
    ids=["not_from_0", "decreasing", "last_not_rows", "float", "rank2", "empty"],
)
def test_constructor_rejects_bad_offsets(offsets, exc, match):
    with pytest.raises(exc, match=match):
        RaggedArray(np.zeros((5, 8), F32), np.array(offsets))


def test_constructor_rejects_broken_nesting():
    with pytest.raises(
        ValueError,
        match=r"partitions\[1\]: expected 3 offsets \(the last offset of partitions\[0\] plus one\), got 4",
    ):
        RaggedArray(np.zeros((3, 8), F32), [np.array([0, 1, 2]), np.array([0, 2, 3, 3])])


@pytest.mark.parametrize(
    "offsets,exc,match",
    [
        ([1, 2, 5], ValueError, r"argument 0: offsets of L: offsets must start at 0, got 1"),
        (
            [0, 3, 2, 5],
            ValueError,
            r"argument 0: offsets of L: offsets must be non-decreasing, but offsets\[2\] = 2 < offsets\[1\] = 3",
        ),
        ([0, 2, 4], ValueError, r"argument 0: the partitions describe 4 rows of values, got 5"),
        (
            [0.0, 2.0, 5.0],
            TypeError,
            r"argument 0: offsets of L: expected an integer \(int64\) offsets array, got dtype float64",
        ),
    ],
    ids=["not_from_0", "decreasing", "last_not_rows", "float"],
)
def test_call_rejects_bad_offsets(api, x, w, offsets, exc, match):
    with pytest.raises(exc, match=match):
        api.mm(with_partitions(x, offsets), w)


def test_call_rejects_bad_offsets_second_argument(api, x):
    with pytest.raises(ValueError, match=r"argument 1: offsets of L: offsets must start at 0, got 2"):
        api.mul(x, with_partitions(x, [2, 2, 5]))


def test_call_rejects_broken_nesting(api):
    docs = RaggedArray.from_nested([[np.ones((2, 8), F32)], [np.ones((1, 8), F32)]])
    with pytest.raises(ValueError, match=r"argument 0: offsets of T must have 3 entries, got 4"):
        api.nred(with_partitions(docs, [0, 1, 2], [0, 2, 3, 3]))


def test_call_rejects_wrong_static_batch(api, x):
    with pytest.raises(ValueError, match=r"argument 0: offsets of L must have 4 entries, got 3"):
        api.static(x)


# --------------------------------------------------------------------------
# dtypes, ranks, shapes, partitions
# --------------------------------------------------------------------------


def test_float64_values_for_f32_argument(api, x):
    y = RaggedArray(x.values.astype(np.float64), x.partitions)
    with pytest.raises(
        TypeError,
        match=r"argument 1: expected values of dtype float32 for !ragged.tensor<\?, \[L\], 8, f32>, got float64",
    ):
        api.mul(x, y)


def test_float64_dense_for_f32_argument(api, x, w):
    with pytest.raises(
        TypeError, match=r"argument 1: expected dtype float32 for tensor<8x3xf32>, got float64"
    ):
        api.mm(x, w.astype(np.float64))


def test_int32_ids_for_i64_argument(api, rng):
    ids = RaggedArray.from_list([np.array([1, 2], np.int32)])
    with pytest.raises(TypeError, match=r"argument 1: expected values of dtype int64 .*got int32"):
        api.gather(np.zeros((10, 8), F32), ids)


def test_wrong_rank_dense(api, x, w):
    with pytest.raises(
        ValueError, match=r"argument 1: expected rank 2 for tensor<8x3xf32>, got shape \(3,\)"
    ):
        api.mm(x, w[0])


def test_wrong_static_dim_dense(api, x):
    with pytest.raises(ValueError, match=r"argument 1: dim 1 must be 3 for tensor<8x3xf32>, got 4"):
        api.mm(x, np.zeros((8, 4), F32))


def test_wrong_rank_values(api, w):
    with pytest.raises(
        ValueError, match=r"argument 0: values must have rank 2 \(\[rows, 8\]\) for .*got shape \(5,\)"
    ):
        api.mm(RaggedArray(np.zeros(5, F32), np.array([0, 2, 5])), w)


def test_wrong_trailing_dim_values(api, w):
    with pytest.raises(ValueError, match=r"argument 0: values dim 1 must be 8 for .*got 7"):
        api.mm(RaggedArray(np.zeros((5, 7), F32), np.array([0, 2, 5])), w)


def test_wrong_partition_count(api, x):
    with pytest.raises(
        ValueError, match=r"argument 0: .*takes 2 partitions \(S, T\), got a RaggedArray with 1"
    ):
        api.nred(x)


def test_shared_symbol_partitions_must_match(api, rng):
    a, b = batch(rng, [2, 3]), batch(rng, [3, 2])  # same rows, other split
    with pytest.raises(
        ValueError, match=r"argument 1: symbol L must have the same partition as in argument 0"
    ):
        api.mul(a, b)


def test_shared_symbol_partitions_must_match_third_argument(api, rng):
    q, k, v = batch(rng, [2, 3], (2, 4)), batch(rng, [2, 3], (2, 4)), batch(rng, [2, 2, 1], (2, 4))
    with pytest.raises(
        ValueError, match=r"argument 2: symbol L must have the same partition as in argument 0"
    ):
        api.att(q, k, v)


def test_wrong_argument_count(api, x):
    with pytest.raises(TypeError, match=r"mm\(\) takes 2 arguments \(1 given\)"):
        api.mm(x)


def test_dense_array_for_ragged_argument(api, x, w):
    with pytest.raises(TypeError, match=r"argument 0: expected a RaggedArray \(or a list of arrays\)"):
        api.mm(x.values, w)


def test_ragged_array_for_dense_argument(api, x):
    with pytest.raises(
        TypeError, match=r"argument 1: expected a dense array tensor<8x3xf32>, got a RaggedArray"
    ):
        api.mm(x, x)


def test_unknown_function(api):
    with pytest.raises(AttributeError, match=r"no function 'nope'"):
        _ = api.nope


def test_list_of_arrays_and_strided_inputs_are_accepted(api, x, w):
    """A list of items is packed; non-contiguous and read-only arrays give
    the same result as contiguous ones."""
    want = api.mm(x, w)
    got = api.mm([x.values[:2], x.values[2:]], w)
    np.testing.assert_array_equal(got.values, want.values)
    wide = np.zeros((5, 16), F32)
    wide[:, ::2] = x.values
    ro = w.copy()
    ro.flags.writeable = False
    got = api.mm(RaggedArray(wide[:, ::2], x.partitions), np.asfortranarray(ro))
    np.testing.assert_array_equal(got.values, want.values)


# --------------------------------------------------------------------------
# Inputs are never mutated
# --------------------------------------------------------------------------


def snapshot(args):
    out = []
    for a in args:
        if isinstance(a, RaggedArray):
            out.append(("ragged", a.values.tobytes(), a.values.shape, [p.tobytes() for p in a.partitions]))
        else:
            out.append(("dense", np.asarray(a).tobytes(), np.asarray(a).shape))
    return out


def test_inputs_are_not_mutated(api, rng):
    x = batch(rng, [3, 0, 5, 0])
    h = batch(rng, [3, 0, 5, 0], (2, 4))
    calls = [
        ("mul", (x, batch(rng, [3, 0, 5, 0]))),
        ("mm", (x, rng.uniform(-1, 1, (8, 3)).astype(F32))),
        ("att", (h, batch(rng, [3, 0, 5, 0], (2, 4)), batch(rng, [3, 0, 5, 0], (2, 4)))),
        (
            "gather",
            (
                rng.uniform(-1, 1, (10, 8)).astype(F32),
                RaggedArray.from_list([np.array([1, 9, 0]), np.array([4])]),
            ),
        ),
        ("cat", (x, batch(rng, [1, 1, 0, 2]))),
        ("split", (x, np.array([1, 0, 5, 0], np.int64))),
        ("pad", (x,)),
        ("fp", (rng.uniform(-1, 1, (4, 6, 8)).astype(F32), np.array([3, 0, 6, 1], np.int64))),
    ]
    for name, args in calls:
        before = snapshot(args)
        kept = [copy.deepcopy(a) for a in args]
        getattr(api, name)(*args)
        assert snapshot(args) == before, f"{name} mutated an input"
        assert snapshot(kept) == before


# --------------------------------------------------------------------------
# Run-time checks of the compiled code
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [10, -1, 2**40])
def test_gather_out_of_range_id(api, bad_id):
    table = np.arange(80, dtype=F32).reshape(10, 8)
    ids = RaggedArray.from_list([np.array([1, 2], np.int64), np.array([3, bad_id], np.int64)])
    with pytest.raises(RuntimeError, match=r"ragged\.gather: an id lies outside \[0, table rows\)"):
        api.gather(table, ids)
    # The module stays usable after a failed call.
    ok = api.gather(table, RaggedArray.from_list([np.array([9, 0], np.int64)]))
    np.testing.assert_array_equal(ok.values, table[[9, 0]])


@pytest.mark.parametrize("bad", [[4, 1], [1, -1]], ids=["too_long", "negative"])
def test_from_padded_length_out_of_bounds(api, bad):
    padded = np.ones((2, 3, 8), F32)
    with pytest.raises(
        RuntimeError,
        match=r"ragged\.from_padded: lengths must have one entry per padded item and lie in \[0, padded extent\]",
    ):
        api.fp(padded, np.array(bad, np.int64))


@pytest.mark.parametrize("bad", [[1], [1, 2, 3]], ids=["fewer", "more"])
def test_from_padded_lengths_count_must_match_batch(api, bad):
    with pytest.raises(RuntimeError, match=r"ragged\.from_padded"):
        api.fp(np.ones((2, 3, 8), F32), np.array(bad, np.int64))


@pytest.mark.parametrize(
    "cut,match",
    [
        ([3, 1], r"ragged\.split: lengths must lie in \[0, L\(b\)\]"),
        ([-1, 1], r"ragged\.split: lengths must lie in \[0, L\(b\)\]"),
        ([1, 1, 1], r"ragged\.split: lengths must have one entry per item"),
    ],
    ids=["too_long", "negative", "wrong_count"],
)
def test_split_bad_lengths(api, x, cut, match):
    with pytest.raises(RuntimeError, match=match):
        api.split(x, np.array(cut, np.int64))


def test_concat_batch_mismatch(api, rng, x):
    with pytest.raises(RuntimeError, match=r"ragged\.concat: the operands' batch sizes differ"):
        api.cat(x, batch(rng, [1, 1, 1]))


# --------------------------------------------------------------------------
# Library bugs in the API (pinned)
# --------------------------------------------------------------------------


def test_rank0_dense_argument(api, x):
    out = api.scal(x, np.array(2.0, F32))
    np.testing.assert_array_equal(out.values, 2 * x.values)


def test_scores_result_to_list(api, rng):
    lengths = [2, 0, 3]
    q, k = batch(rng, lengths, (2, 4)), batch(rng, lengths, (2, 4))
    items = api.sc(q, k).to_list()
    assert [i.shape for i in items] == [(n, n, 2) for n in lengths]


def test_from_list_trailing_dims_differ():
    items = [np.ones((1, 4), F32), np.ones((2, 4), F32), np.ones((1, 5), F32)]
    with pytest.raises(
        ValueError,
        match=r"items\[2\]: trailing dims and dtype must match the first item \(\(4,\), float32\), got \(5,\), float32",
    ):
        RaggedArray.from_list(items)


def test_from_list_dtypes_differ():
    with pytest.raises(ValueError, match=r"items\[1\]: trailing dims and dtype must match .*float64"):
        RaggedArray.from_list([np.ones((1, 4), F32), np.ones((2, 4), np.float64)])


def test_from_images_trailing_dims_differ():
    with pytest.raises(ValueError, match=r"items\[1\]: trailing dims and dtype must match items\[0\]"):
        RaggedArray.from_images([np.ones((1, 4, 3), F32), np.ones((2, 4, 2), F32)])


def test_from_nested_trailing_dims_differ_names_the_item():
    docs = [[np.ones((1, 4), F32), np.ones((2, 4), F32)], [np.ones((1, 5), F32)]]
    with pytest.raises(ValueError, match=r"docs\[1\]\[0\]"):
        RaggedArray.from_nested(docs)


# --------------------------------------------------------------------------
# compile(): malformed IR, verifier errors, lowering failures
# --------------------------------------------------------------------------

LOCATION = re.compile(r"loc\(|:\d+:\d+")


def test_compile_syntax_error_has_location():
    with pytest.raises(CompileError, match=r"invalid input IR") as e:
        ragged_mlir.compile("func.func @f(%x: tensor<4xf32> {\n  return\n}\n")
    assert LOCATION.search(str(e.value)), str(e.value)


def test_compile_verifier_error_has_location_and_op():
    text = f"""func.func @f(%x: {S}) -> tensor<?x?x5xf32> {{
  %p = ragged.to_padded %x padding(0.0 : f32) : {S} -> tensor<?x?x5xf32>
  return %p : tensor<?x?x5xf32>
}}
"""
    with pytest.raises(CompileError, match=r"ragged\.to_padded") as e:
        ragged_mlir.compile(text)
    assert re.search(r":2:\d+", str(e.value)), str(e.value)


def test_compile_reduce_max_needs_empty():
    text = f"""func.func @f(%x: {S}) -> tensor<?x8xf32> {{
  %r = ragged.reduce <max> %x : {S} -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}}
"""
    with pytest.raises(CompileError, match=r"max needs an explicit `empty` value") as e:
        ragged_mlir.compile(text)
    assert LOCATION.search(str(e.value))


def test_compile_nested_from_padded_rejected():
    """from_padded is documented for single-level results only."""
    text = f"""func.func @f(%p: tensor<?x?x?x8xf32>, %s: tensor<?xi64>, %t: tensor<?xi64>) -> {N} {{
  %x = ragged.from_padded %p lengths(%s, %t) : tensor<?x?x?x8xf32>, tensor<?xi64>, tensor<?xi64> -> {N}
  return %x : {N}
}}
"""
    with pytest.raises(CompileError, match=r"single-level"):
        ragged_mlir.compile(text)


REJECTED = """func.func @f(%x: !ragged.tensor<?, [L], 4, f32, lengths>) -> tensor<?x?x4xf32> {
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 4, f32, lengths> -> tensor<?x?x4xf32>
  return %p : tensor<?x?x4xf32>
}
"""


def test_lowering_failure_writes_reproducer(tmp_path):
    with pytest.raises(CompileError, match=r"lowering failed \(reproducer: ") as e:
        ragged_mlir.compile(REJECTED, options=CompileOptions(work_dir=str(tmp_path)))
    err = e.value
    assert "cannot be lowered" in str(err)
    assert LOCATION.search(str(err))
    repro = err.reproducer
    assert repro is not None and repro.is_dir()
    assert str(repro) in str(err)
    assert repro.is_relative_to(tmp_path)
    assert (repro / "input.mlir").is_file() and (repro / "pipeline.txt").is_file()
    assert (repro / "pipeline.txt").read_text().strip() == CompileOptions().pipeline
    assert "ragged.to_padded" in (repro / "input.mlir").read_text()
    # The reproducer replays with ragged-opt, as its README says (the IREE
    # attention pass, in the pipeline on AVX-512 hosts, needs unregistered
    # dialects allowed).
    assert "--allow-unregistered-dialect" in (repro / "README.txt").read_text()
    opt = shutil.which("ragged-opt")
    if opt is None:
        pytest.skip("ragged-opt not on PATH (source build_tools/env.sh)")
    pipeline = (repro / "pipeline.txt").read_text().strip()
    run = subprocess.run(
        [opt, str(repro / "input.mlir"), "--allow-unregistered-dialect", f"--pass-pipeline={pipeline}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "cannot be lowered" in run.stderr


TINY = f"""func.func @neg(%x: {S}) -> {S} {{
  %y = ragged.unary <neg> %x : {S}
  return %y : {S}
}}
"""


def test_compile_leaves_no_empty_work_dir(tmp_path, monkeypatch):
    """A compile makes its temporary directory only when it writes to it:
    intermediates (keep_intermediates) or a reproducer."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ragged-"))  # noqa: E731
    module = ragged_mlir.compile(TINY)
    ragged_mlir.compiler.lower(TINY)
    assert made() == [] and module.work_dir is None
    kept = ragged_mlir.compile(TINY, options=CompileOptions(keep_intermediates=True))
    assert len(made()) == 1 and kept.work_dir == tmp_path / made()[0]
    assert (kept.work_dir / "lowered.mlir").is_file()
    with pytest.raises(CompileError) as e:
        ragged_mlir.compile(REJECTED)
    assert len(made()) == 2 and e.value.reproducer.parent.parent == tmp_path
    x = RaggedArray.from_list([np.ones((2, 8), F32)])
    np.testing.assert_array_equal(module.neg(x).values, -x.values)


def test_compile_rejects_non_text():
    with pytest.raises(TypeError, match=r"program: expected MLIR text"):
        ragged_mlir.compile(123)


def test_compile_options_reject_unknown_target():
    with pytest.raises(ValueError, match=r"target: expected one of .*'llvm-cpu'.*got 'tpu'"):
        CompileOptions(target="tpu")


def test_former_option_name_still_works_with_a_warning():
    """``attention_kernel`` was renamed ``cpu_kernels`` when the kernel
    library grew past attention: the old name still means the same, once
    warned, and a conflict between the two names is an error naming both."""
    with pytest.warns(
        DeprecationWarning, match="attention_kernel is deprecated: it is now called cpu_kernels"
    ):
        options = CompileOptions(attention_kernel=False)
    assert options.cpu_kernels is False and options.kernel_isa is None
    assert "cpu-kernels" not in options.pipeline
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dataclasses.replace(options, cache=False).cpu_kernels is False  # no second warning
    with pytest.raises(ValueError, match=r"attention_kernel and cpu_kernels name one option"):
        with pytest.warns(DeprecationWarning):
            CompileOptions(attention_kernel=False, cpu_kernels=True)
    if importlib.util.find_spec("torch") is not None:
        from ragged_mlir.torch.backend import RaggedBackendOptions

        with pytest.warns(DeprecationWarning, match="now called cpu_kernels"):
            assert RaggedBackendOptions(attention_kernel=False).cpu_kernels is False
