"""Differential fuzzing: seeded random programs, compiled and run, against
the float64 per-item reference of ``bench/fuzzing``.

Each group of programs is one module (one compile) with its own compile
options and mode (plain, a save/load round trip, frozen dense arguments);
every program runs on three input sets, one of them an edge case (empty
items, a single item, one long item, all-equal lengths, all items empty,
an empty batch). ``bench/fuzz.py`` runs the same machinery on thousands of
programs.

The generator avoids the failure classes in :data:`SUITE_EXCLUDE` (named in
``fuzzing.generator.KNOWN_FAILURES``, each a compiler bug with a reproducer);
none is open today. A new bug gets a name there while it is fixed, and the
name goes once the suite covers the class again.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

# The fuzz package lives with bench/fuzz.py, which runs it at scale. Appended,
# not prepended: a bench script never shadows a test module of the same name.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from fuzzing import check, reference  # noqa: E402
from fuzzing.generator import KNOWN_FAILURES, LAYOUTS, OPS, GenConfig, generate  # noqa: E402
from fuzzing.program import Function, RType, Run, Sym, TType  # noqa: E402
from fuzzing.runner import Case, Outcome, run_cases  # noqa: E402

from ragged_mlir import RaggedArray  # noqa: E402

#: Known failure classes the suite's programs avoid (see the module docs).
SUITE_EXCLUDE: frozenset[str] = frozenset()

_NO_ATTENTION = {**OPS, "attention": 0.0}
_ATTENTION = {**OPS, "attention": 6.0, "scores": 1.5, "apply": 1.5}
_STRUCTURE = {
    **{op: 0.3 for op in OPS},
    **dict(concat=3.0, split=3.0, from_padded=2.0, match=3.0, repack=2.0, gather=2.0, reshape=1.0),
    "attention": 0.0,
}

#: name -> (seeds, compile options, mode, generator overrides)
GROUPS: dict[str, tuple[range, dict, str, dict]] = {
    "default": (range(0, 12), {}, "plain", {"ops": _NO_ATTENTION}),
    "balanced": (range(100, 106), {"balance_tile": 16}, "plain", {"ops": _NO_ATTENTION}),
    "exact_attention": (
        range(200, 206),
        {"attention_buckets": 0, "iree_attention": False},
        "plain",
        {"ops": _ATTENTION},
    ),
    "ladder_attention": (
        range(250, 252),
        {"attention_buckets": 0, "iree_attention": True},
        "plain",
        {"ops": {"attention": 1.0, "binary": 0.3}, "dtypes": {"f32": 1.0}, "p_dynamic": 0.0, "max_ops": 2},
    ),
    "bucket_attention": (
        range(260, 261),
        {"attention_buckets": 1, "iree_attention": False},
        "plain",
        {"ops": {"attention": 1.0, "unary": 0.3}, "max_ops": 2},
    ),
    "saveload": (range(300, 306), {"balance_tile": 1}, "saveload", {"ops": _NO_ATTENTION}),
    "frozen": (range(400, 406), {}, "frozen", {"ops": _NO_ATTENTION, "p_frozen": 0.8}),
    "structure": (range(500, 506), {"iree_attention": False}, "plain", {"ops": _STRUCTURE}),
}


def suite_config(**overrides) -> GenConfig:
    return GenConfig(exclude=SUITE_EXCLUDE, **overrides)


def _cases(group: str) -> list[Case]:
    seeds, _, _, overrides = GROUPS[group]
    cfg = suite_config(**overrides)
    cases = []
    for i, seed in enumerate(seeds):
        # Every layout comes first in some program of each larger group.
        layout = LAYOUTS[(i + seeds.start) % len(LAYOUTS)] if len(seeds) >= len(LAYOUTS) else None
        fn = generate(seed, cfg, name=f"{group}_{seed}", layout=layout)
        rng = np.random.default_rng(seed)
        # Every edge-case plan comes first for some program of the group.
        edge = [p for p in reference.PLANS if p != "random"]
        first = edge[(i + seeds.start) % len(edge)]
        others = [p for p in reference.PLANS if p != first]
        plans = [first] + [str(p) for p in rng.choice(others, size=2, replace=False)]
        cases.append(Case(fn, seed, plans, cfg.long))
    return cases


@functools.cache
def _outcomes(group: str) -> dict[str, Outcome]:
    _, options, mode, _ = GROUPS[group]
    return {o.case.fn.name: o for o in run_cases(_cases(group), options, mode, invalid=True)}


def _report(o: Outcome) -> str:
    lines = [f"{o.status} on input plan {o.plan} ({o.setup}):", o.detail, o.case.fn.describe()]
    if o.inputs is not None:
        lines.append("inputs:")
        for i, x in enumerate(o.inputs):
            lines.append(f"  arg{i}: {x!r}" if isinstance(x, RaggedArray) else f"  arg{i}: {np.asarray(x)!r}")
    return "\n".join(lines)


@pytest.mark.parametrize(
    "group,seed", [(g, s) for g, (seeds, _, _, _) in GROUPS.items() for s in seeds], ids=lambda v: str(v)
)
def test_fuzz_program(group, seed):
    outcome = _outcomes(group)[f"{group}_{seed}"]
    assert outcome.status == "ok", _report(outcome)


def test_invalid_inputs_fail_the_call():
    """Every documented run-time check fired on some program of the suite
    (a call with a violating input raised, with the op's message), and no
    violating call returned a result (those programs fail above)."""
    rejections = [r for g in GROUPS for o in _outcomes(g).values() for r in o.rejections]
    expected = {
        "gather id": "ragged.gather: an id lies outside [0, table rows)",
        "split length": "ragged.split: lengths must lie in [0, L(b)]",
        "from_padded": "ragged.from_padded: lengths must have one entry per padded item",
        "match of": "ragged.match: the partitions of the two ragged tensors differ",
        "concat of": "ragged.concat: the operands' batch sizes differ",
    }
    for what, message in expected.items():
        hits = [r for r in rejections if r.startswith(what)]
        assert hits, f"no program of the suite checked {what!r}"
        assert all(message in r for r in hits), hits


def test_suite_covers_every_op_layout_and_dtype():
    """The suite's programs reach every op of the dialect (through the
    builders), every layout and every element type the exclusions allow."""
    fns: list[Function] = [c.fn for g in GROUPS for c in _cases(g)]
    ops = {n.op for f in fns for n in f.nodes}
    wanted = {
        "unary",
        "binary",
        "matmul",
        "layer_norm",
        "reduce",
        "softmax",
        "to_padded",
        "mask",
        "values",
        "offsets",
        "pack",
        "from_padded",
        "match",
        "scores",
        "apply",
        "attention",
        "gather",
        "concat",
        "split",
    }
    assert wanted <= ops, f"never generated: {sorted(wanted - ops)}"
    types = [t for f in fns for n in f.nodes for t in n.types if isinstance(t, RType)]
    dtypes = {t.dtype for t in types}
    assert {"f16", "f32", "f64"} <= dtypes
    layouts = {_layout(t) for t in types}
    assert set(LAYOUTS) <= layouts, f"never generated: {sorted(set(LAYOUTS) - layouts)}"
    assert any(t.batch is not None for t in types) and any(t.batch is None for t in types)
    assert all(name in KNOWN_FAILURES for name in SUITE_EXCLUDE)


def _layout(t: RType) -> str:
    syms = [d for d in t.dims if isinstance(d, Sym)]
    if len(syms) == 3:
        return "nested3"
    if t.nested:
        return "nested"
    if not isinstance(t.dims[0], Sym):
        return "prefixed"
    if len(syms) == 2:
        return "pairs" if syms[0] == syms[1] else "images"
    return "seq"


# --------------------------------------------------------------------------
# The checks can fail: the reference against hand-computed values, and the
# comparison against perturbed results.
# --------------------------------------------------------------------------


def _one_op(op: str, attrs: dict, *types) -> Function:
    fn = Function("f")
    args = [fn.add("arg", [], {"role": "given"}, t)[0] for t in types[1:]]
    fn.outputs = fn.add(op, args, attrs, types[0])
    return fn


S4 = RType(None, (Sym("L"), 4), "f32")
N2 = RType(None, (Sym("S"), Sym("T", "S"), 2), "f32")


def test_reference_reduce_empty_items_and_softmax():
    x = RaggedArray.from_list([np.arange(8, dtype=np.float32).reshape(2, 4), np.zeros((0, 4), np.float32)])
    out_t = TType((Run("batch"), 4), "f32")
    ev = reference.Evaluator(
        _one_op("reduce", {"kind": "max", "empty": -np.inf}, out_t, S4), inputs=[x]
    ).run()
    np.testing.assert_array_equal(ev.outputs[0].num.v, [[4, 5, 6, 7], [-np.inf] * 4])
    ev = reference.Evaluator(_one_op("softmax", {}, S4, S4), inputs=[x]).run()
    col = np.exp([0.0, 4.0]) / np.exp([0.0, 4.0]).sum()
    np.testing.assert_allclose(ev.outputs[0].items[0].v, np.stack([col] * 4, axis=1))
    assert ev.outputs[0].items[1].v.shape == (0, 4)


def test_reference_nested_reduce_and_padding():
    docs = [[np.ones((2, 2), np.float32), np.zeros((0, 2), np.float32)], [], [np.full((1, 2), 3, np.float32)]]
    x = RaggedArray.from_nested(docs)
    out_t = RType(None, (Sym("S"), 2), "f32")
    ev = reference.Evaluator(_one_op("reduce", {"kind": "sum"}, out_t, N2), inputs=[x]).run()
    got = [i.v.tolist() for i in ev.outputs[0].items]
    assert got == [[[2.0, 2.0], [0.0, 0.0]], [], [[3.0, 3.0]]]
    pad_t = TType((Run("batch"), Run("extent"), Run("extent"), 2), "f32")
    ev = reference.Evaluator(_one_op("to_padded", {"padding": -1.0}, pad_t, N2), inputs=[x]).run()
    p = ev.outputs[0].num.v
    assert p.shape == (3, 2, 2, 2)
    assert p[0, 1].tolist() == [[-1, -1], [-1, -1]] and p[2, 0, 0].tolist() == [3, 3] and (p[1] == -1).all()


def test_comparison_catches_small_errors():
    """A correct result passes; the same result with one value off by 1e-4
    (relative), or with offsets of another partition, does not."""
    cfg = suite_config(ops={"matmul": 1.0}, layouts={"seq": 1.0}, dtypes={"f32": 1.0}, p_dynamic=0.0)
    case = Case(generate(7, cfg, name="mm"), 7, ["random"])
    ev = reference.Evaluator(case.fn, np.random.default_rng(0), "random").run()
    want = ev.outputs[0]
    values, parts = reference.pack(want.type, want.items, tuple(want.type.trailing))
    exact = RaggedArray(
        values.v.astype(np.float32), [reference.offsets_of(parts[s]) for s in want.type.distinct]
    )
    assert check.compare(exact, want) is None
    assert exact.values.size
    bent = exact.values.copy()
    bent.flat[np.argmax(np.abs(bent))] *= 1 + 1e-4
    assert check.compare(RaggedArray(bent, exact.partitions), want) is not None
    if exact.batch_size > 1 and exact.values.shape[0]:
        o = exact.partitions[0].copy()
        o[1:-1] = np.minimum(o[1:-1] + 1, o[-1])
        assert check.compare(RaggedArray(exact.values, [o]), want) is not None


def test_localize_finds_the_wrong_op(monkeypatch):
    """With the reference of ``exp`` deliberately off by 1e-3, a program
    x -> matmul -> exp -> reduce mismatches, and localisation names the
    exp as the first op that is wrong on its own."""
    from fuzzing import runner

    fn = Function("loc")
    x = fn.add("arg", [], {"role": "ragged"}, RType(None, (Sym("L"), 4), "f32"))[0]
    w = fn.add("arg", [], {"role": "dense", "lo": -1.0, "hi": 1.0}, TType((4, 3), "f32"))[0]
    y = fn.add("matmul", [x, w], {}, RType(None, (Sym("L"), 3), "f32"))[0]
    e = fn.add("unary", [y], {"fn": "exp"}, RType(None, (Sym("L"), 3), "f32"))[0]
    fn.outputs = fn.add("reduce", [e], {"kind": "sum"}, TType((Run("batch"), 3), "f32"))
    true_unary = reference.unary

    def off(name, v, dt):
        out = true_unary(name, v, dt)
        return reference.Num(out.v * (1 + 1e-3), out.e) if name == "exp" else out

    monkeypatch.setattr(reference, "unary", off)
    [outcome] = run_cases([Case(fn, 3, ["random"])])
    assert outcome.status == "mismatch", outcome.detail
    single, inputs, why = runner.localize(outcome, {})
    assert [n.op for n in single.nodes] == ["arg", "unary"] and single.nodes[1].attrs["fn"] == "exp", why
