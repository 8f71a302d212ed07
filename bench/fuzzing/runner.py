"""Compile a batch of fuzz programs as one module, run, compare, classify.

Outcomes (:data:`STATUSES`):

* ``ok``: every call matched the reference;
* ``mismatch``: a result differs from the reference (values beyond the
  error bound, offsets, shapes, dtypes), or a save/load round trip changed
  a result;
* ``compile_failure``: ``compile()`` raised a ``CompileError`` /
  ``ValueError`` for a valid program (the message is kept: a refusal the
  dialect documents is not a bug; any other is);
* ``runtime_error``: a call raised on valid inputs;
* ``crash``: iree-compile died on a signal, any exception other than a
  clear error (from the builders, the compiler or the runtime), or the
  process died;
* ``rejected``: the reference could not find inputs that stay in the
  element type's range (not a finding; counted apart).

With ``invalid=True`` (plain mode), every program that passed is also
called with inputs that break a run-time check the dialect documents (a
gather id outside ``[0, V)``, split or from_padded lengths beyond the
extent, a match whose partitions differ, a concat of batches of different
sizes): the call must raise, and a result counts as a ``mismatch`` (a
silent wrong answer on invalid input).

Modes: ``plain``; ``saveload`` (the module is saved, loaded back and the
loaded one is checked, bit for bit against the original too); ``frozen``
(the functions' frozen dense arguments are IREE parameters bound with
``bind_parameters``, rebound for every input set).
"""

from __future__ import annotations

import json
import pickle
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import ragged_mlir
from ragged_mlir import RaggedArray
from ragged_mlir.compiler import CompileError, parameter_key

from .check import as_list, compare_outputs
from .program import Function, RType, emit
from .reference import PLANS, Evaluator, Unrepresentable

__all__ = ["STATUSES", "Case", "Outcome", "localize", "run_cases", "write_reproducer"]

STATUSES = ("ok", "mismatch", "compile_failure", "runtime_error", "crash", "rejected")


@dataclass
class Case:
    """One function and the input sets it runs on."""

    fn: Function
    seed: int
    plans: list[str] = field(default_factory=lambda: ["random"])
    long: int = 300


@dataclass
class Outcome:
    case: Case
    status: str
    detail: str = ""
    plan: str | None = None
    inputs: list | None = None
    expected: list | None = None
    got: list | None = None
    #: (mode, options) the case was compiled with.
    setup: dict = field(default_factory=dict)
    #: Invalid-input calls made and the errors they raised.
    rejections: list[str] = field(default_factory=list)


def _copy(x):
    if isinstance(x, RaggedArray):
        return RaggedArray(x.values.copy(), [p.copy() for p in x.partitions], layout=x.layout, _checked=True)
    return np.array(x, copy=True)


def _same(a, b) -> bool:
    if isinstance(a, RaggedArray):
        return (
            isinstance(b, RaggedArray)
            and a.values.dtype == b.values.dtype
            and np.array_equal(a.values, b.values, equal_nan=True)
            and all(np.array_equal(p, q) for p, q in zip(a.partitions, b.partitions, strict=True))
        )
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def draw(case: Case, plan: str, index: int) -> Evaluator:
    """Reference evaluation of ``case`` on input set ``index`` (drawn with
    ``plan``); redraws a few times when values leave the element type."""
    last = None
    for attempt in range(4):
        rng = np.random.default_rng([case.seed, index, attempt])
        try:
            return Evaluator(case.fn, rng, plan, case.long).run()
        except Unrepresentable as e:
            last = e
    raise Unrepresentable(str(last))


def _frozen_keys(fn: Function) -> dict[int, str]:
    return {pos: parameter_key(fn.name, fn.lowered_index(pos)) for pos in fn.frozen}


def compile_status(e: BaseException) -> tuple[str, str]:
    """The outcome of a compile that raised ``e``."""
    detail = f"{type(e).__name__}: {e}"
    if isinstance(e, CompileError) and "Error code: -" in str(e):
        return "crash", "iree-compile crashed: " + detail
    if isinstance(e, (CompileError, ValueError)):
        return "compile_failure", detail
    return "crash", "compile: " + detail


def _compile(cases: list[Case], options: dict, frozen: bool):
    program = emit([c.fn for c in cases])
    frozen_map = {
        c.fn.name: [c.fn.lowered_index(p) for p in c.fn.frozen] for c in cases if frozen and c.fn.frozen
    }
    opts = ragged_mlir.CompileOptions(**options)
    return ragged_mlir.compile(program, options=opts, frozen=frozen_map or None)


def run_cases(
    cases: list[Case], options: dict | None = None, mode: str = "plain", invalid: bool = False
) -> list[Outcome]:
    """Compiles ``cases`` as one module (each alone when that fails, to pin
    the failure on a program) and runs every input set of every case."""
    options = dict(options or {})
    setup = {"mode": mode, "options": options}
    outcomes: dict[str, Outcome] = {}
    evals: dict[str, list[tuple[str, Evaluator]]] = {}
    for c in cases:
        runs = []
        for i, plan in enumerate(c.plans):
            try:
                runs.append((plan, draw(c, plan, i)))
            except Unrepresentable:
                continue
        if not runs:
            outcomes[c.fn.name] = Outcome(
                c, "rejected", "no input set within the element type's range", setup=setup
            )
        evals[c.fn.name] = runs
    live = [c for c in cases if c.fn.name not in outcomes]
    # Builders: a function the builders refuse is a builders bug.
    for c in list(live):
        try:
            emit([c.fn])
        except Exception as e:  # noqa: BLE001 - any exception here is a finding
            outcomes[c.fn.name] = Outcome(c, "crash", f"builders: {type(e).__name__}: {e}", setup=setup)
            live.remove(c)
    if not live:
        return [outcomes[c.fn.name] for c in cases]
    try:
        module = _compile(live, options, mode == "frozen")
        groups = [(live, module)]
    except Exception:  # noqa: BLE001 - pinned on single programs below
        groups = []
        for c in live:
            try:
                groups.append(([c], _compile([c], options, mode == "frozen")))
            except Exception as e:  # noqa: BLE001 - classified
                status, detail = compile_status(e)
                outcomes[c.fn.name] = Outcome(c, status, detail, setup=setup)
    for group, module in groups:
        original = module
        if mode == "saveload":
            with tempfile.TemporaryDirectory(prefix="ragged-fuzz-") as tmp:
                module.save(Path(tmp) / "m.vmfb")
                module = ragged_mlir.load(Path(tmp) / "m.vmfb")
        _run_group(group, module, original, evals, outcomes, mode, setup)
        if invalid and mode == "plain":
            for c in group:
                if outcomes[c.fn.name].status == "ok" and evals[c.fn.name]:
                    _run_invalid(c, module, evals[c.fn.name][0], outcomes, setup)
    return [outcomes[c.fn.name] for c in cases]


def _run_group(group, module, original, evals, outcomes, mode, setup) -> None:
    rounds = max(len(evals[c.fn.name]) for c in group)
    for r in range(rounds):
        if mode == "frozen":
            params = {}
            for c in group:
                runs = evals[c.fn.name]
                if runs and c.fn.name not in outcomes:
                    _, ev = runs[min(r, len(runs) - 1)]
                    for pos, key in _frozen_keys(c.fn).items():
                        params[key] = ev.inputs[pos]
            if params:
                module.bind_parameters(params)
        for c in group:
            name = c.fn.name
            runs = evals[name]
            if name in outcomes or r >= len(runs):
                continue
            plan, ev = runs[r]
            args = [a for pos, a in enumerate(ev.inputs) if not (mode == "frozen" and pos in c.fn.frozen)]
            before = [_copy(a) for a in args]
            base = dict(case=c, plan=plan, inputs=ev.inputs, expected=ev.outputs, setup=setup)
            try:
                got = as_list(module[name](*args), len(c.fn.outputs))
            except Exception as e:  # noqa: BLE001 - classified
                status = "runtime_error" if isinstance(e, (RuntimeError, ValueError)) else "crash"
                outcomes[name] = Outcome(status=status, detail=f"call: {type(e).__name__}: {e}", **base)
                continue
            if not all(_same(a, b) for a, b in zip(args, before, strict=True)):
                outcomes[name] = Outcome(
                    status="mismatch", detail="the call modified its arguments", got=got, **base
                )
                continue
            m = compare_outputs(got, ev.outputs)
            if m is None and mode == "saveload" and r == 0:
                again = as_list(original[name](*args), len(c.fn.outputs))
                if not all(_same(a, b) for a, b in zip(got, again, strict=True)):
                    m = "the loaded module's results differ from the original module's"
            if m is not None:
                outcomes[name] = Outcome(status="mismatch", detail=str(m), got=got, **base)
    for c in group:
        outcomes.setdefault(c.fn.name, Outcome(c, "ok", plan=None, setup=setup))


# --------------------------------------------------------------------------
# Invalid inputs: documented run-time checks must fail the call
# --------------------------------------------------------------------------


def _live(fn: Function) -> set[int]:
    live: set[int] = set()
    stack = [k for k, _ in fn.outputs]
    while stack:
        k = stack.pop()
        if k not in live:
            live.add(k)
            stack.extend(r[0] for r in fn.nodes[k].operands)
    return live


def _ancestors(fn: Function, k: int) -> set[int]:
    """Node ``k`` and every node it depends on."""
    seen: set[int] = set()
    stack = [k]
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(r[0] for r in fn.nodes[j].operands)
    return seen


def _shift_one_row(offsets: np.ndarray) -> np.ndarray | None:
    """Offsets of the same rows with one row moved to the next item."""
    lengths = np.diff(offsets)
    for b in range(len(lengths) - 1):
        if lengths[b] > 0:
            moved = offsets.copy()
            moved[b + 1] -= 1
            return moved
    return None


def violations(fn: Function, ev: Evaluator) -> list[tuple[str, list]]:
    """Input lists that break one documented run-time check each, for ops
    whose results reach an output and whose checked operand is an argument."""
    position = {k: pos for pos, k in enumerate(fn.arg_nodes)}
    out: list[tuple[str, list]] = []

    def replaced(ref, value) -> list:
        inputs = list(ev.inputs)
        inputs[position[ref[0]]] = value
        return inputs

    for k in sorted(_live(fn)):
        node = fn.nodes[k]
        args = [r for r in node.operands if r[0] in position]
        if node.op == "gather" and node.operands[1] in args:
            ids = ev.inputs[position[node.operands[1][0]]]
            vocab = ev.env[node.operands[0]].num.v.shape[0]
            if ids.values.size:
                for bad in (vocab, -1):
                    v = ids.values.copy()
                    v.flat[v.size // 2] = bad
                    out.append(
                        (
                            f"gather id {bad} with {vocab} table rows",
                            replaced(node.operands[1], _with(ids, v)),
                        )
                    )
        elif node.op == "split" and node.operands[1] in args:
            n = np.asarray(ev.inputs[position[node.operands[1][0]]])
            src = ev.env[node.operands[0]]
            extent = ev.lengths[src.type.symbols[0]]
            if n.size:
                bad = n.copy()
                bad[-1] = extent[-1] + 1
                out.append((f"split length {bad[-1]} > {extent[-1]}", replaced(node.operands[1], bad)))
        elif node.op == "from_padded":
            padded = ev.env[node.operands[0]].num.v
            for r in node.operands[1:]:
                if r not in args or not padded.shape[0]:
                    continue
                n = np.asarray(ev.inputs[position[r[0]]])
                t = node.types[0]
                symbol = t.distinct[node.operands[1:].index(r)]
                axis = 1 + next(i for i, d in enumerate(t.dims) if getattr(d, "name", None) == symbol)
                bad = n.copy()
                bad[0] = padded.shape[axis] + 1
                out.append((f"from_padded length {bad[0]} > extent {padded.shape[axis]}", replaced(r, bad)))
                out.append(("from_padded lengths with one entry too few", replaced(r, n[:-1].copy())))
                break
        elif node.op == "match" and node.operands[0] in args:
            # Nested levels (or one level): moving one element of a level
            # to the next item keeps every count, so the input stays valid.
            src = ev.inputs[position[node.operands[0][0]]]
            if src.layout is None:
                for level in range(len(src.partitions) - 1, -1, -1):
                    moved = _shift_one_row(src.partitions[level])
                    if moved is not None:
                        parts = list(src.partitions)
                        parts[level] = moved
                        x = RaggedArray(src.values, parts, _checked=False)
                        out.append(("match of a different partition", replaced(node.operands[0], x)))
                        break
        elif node.op == "concat":
            for i, r in enumerate(node.operands):
                other = node.operands[1 - i]
                if r[0] in _ancestors(fn, other[0]):
                    continue  # the other operand would change along
                t = fn.type_of(r)
                shared = any(
                    set(t.symbols) & set(fn.nodes[a].types[0].symbols)
                    for a in fn.arg_nodes
                    if a != r[0] and isinstance(fn.nodes[a].types[0], RType)
                )
                if r in args and t.batch is None and not shared:
                    x = ev.inputs[position[r[0]]]
                    more = np.append(x.partitions[0], x.partitions[0][-1])
                    y = RaggedArray(x.values, [more], _checked=False)
                    out.append(("concat of batches of different sizes", replaced(r, y)))
                    break
    return out


def _with(x: RaggedArray, values: np.ndarray) -> RaggedArray:
    return RaggedArray(values, x.partitions, layout=x.layout, _checked=True)


def _run_invalid(c: Case, module, run: tuple[str, Evaluator], outcomes: dict, setup: dict) -> None:
    plan, ev = run
    outcome = outcomes[c.fn.name]
    for what, inputs in violations(c.fn, ev):
        try:
            module[c.fn.name](*inputs)
        except Exception as e:  # noqa: BLE001 - any clear exception is the expected outcome
            outcome.rejections.append(f"{what}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}")
            continue
        outcomes[c.fn.name] = Outcome(
            c,
            "mismatch",
            f"invalid input accepted ({what}): the call returned a result instead of failing",
            plan,
            inputs,
            ev.outputs,
            None,
            setup,
        )
        return


# --------------------------------------------------------------------------
# Localisation: which op of a mismatching program is wrong
# --------------------------------------------------------------------------


def _single_op(fn: Function, k: int) -> Function:
    """A function of node ``k`` alone, its operands as arguments."""
    node = fn.nodes[k]
    single = Function(f"{fn.name}_op{k}")
    refs = []
    for r in node.operands:
        t = fn.type_of(r)
        refs.append(single.add("arg", [], {"role": "given"}, t)[0])
    out = single.add(node.op, refs, node.attrs, *node.types)
    single.outputs = out
    return single


def localize(outcome: Outcome, options: dict) -> tuple[Function, list, str] | None:
    """Reruns a mismatching case returning every intermediate result and
    checks each op against the reference applied to the compiled values of
    its operands. Returns the first wrong op as a one-op function, its
    inputs and the mismatch, or None when every op is right on its own."""
    fn = outcome.case.fn
    every = Function(
        fn.name,
        nodes=fn.nodes,
        outputs=[(k, j) for k, n in enumerate(fn.nodes) if n.op != "arg" for j in range(len(n.types))],
    )
    module = _compile([Case(every, outcome.case.seed)], options, False)
    results = as_list(module[fn.name](*outcome.inputs), len(every.outputs))
    values = {ref: v for ref, v in zip(every.outputs, results, strict=True)}
    for pos, k in enumerate(fn.arg_nodes):
        values[(k, 0)] = outcome.inputs[pos]
    for k, node in enumerate(fn.nodes):
        if node.op == "arg":
            continue
        single = _single_op(fn, k)
        inputs = [values[r] for r in node.operands]
        try:
            ev = Evaluator(single, inputs=inputs).run()
        except Unrepresentable:
            continue
        got = [values[(k, j)] for j in range(len(node.types))]
        m = compare_outputs(got, ev.outputs)
        if m is not None:
            return single, inputs, str(m)
    return None


# --------------------------------------------------------------------------
# Reproducers
# --------------------------------------------------------------------------


def _flat(prefix: str, x, out: dict) -> None:
    if isinstance(x, RaggedArray):
        out[f"{prefix}_values"] = np.asarray(x.values)
        for j, p in enumerate(x.partitions):
            out[f"{prefix}_offsets{j}"] = np.asarray(p)
    elif x is not None and not hasattr(x, "items"):
        out[prefix] = np.asarray(x)


def write_reproducer(outcome: Outcome, directory: Path, text: str | None = None) -> Path:
    """Writes ``program.mlir``, ``program.pkl`` (the fuzz description),
    ``inputs.npz``, ``got.npz``, ``expected.txt`` and ``README.txt``."""
    directory.mkdir(parents=True, exist_ok=True)
    fn = outcome.case.fn
    try:
        text = text or emit([fn]).module_text()
    except Exception as e:  # noqa: BLE001 - the builders failed: keep the description
        text = f"// the builders failed: {e}\n"
    (directory / "program.mlir").write_text(text)
    (directory / "program.txt").write_text(fn.describe() + "\n")
    (directory / "program.pkl").write_bytes(pickle.dumps(outcome.case))
    (directory / "setup.json").write_text(
        json.dumps({**outcome.setup, "plan": outcome.plan}, indent=1) + "\n"
    )
    if outcome.inputs is not None:
        arrays: dict = {}
        for i, x in enumerate(outcome.inputs):
            _flat(f"arg{i}", x, arrays)
        np.savez(directory / "inputs.npz", **arrays)
        with open(directory / "inputs.pkl", "wb") as f:
            pickle.dump(outcome.inputs, f)
    if outcome.got is not None:
        arrays = {}
        for i, x in enumerate(outcome.got):
            _flat(f"out{i}", x, arrays)
        np.savez(directory / "got.npz", **arrays)
    if outcome.expected is not None:
        lines = []
        for i, w in enumerate(outcome.expected):
            if isinstance(w.type, RType):
                lines.append(f"out{i}: {w.type} items:")
                lines.extend(f"  {b}: {_short(item)}" for b, item in enumerate(w.items))
            else:
                lines.append(f"out{i}: {w.type} = {np.array2string(w.num.v, threshold=200)}")
        (directory / "expected.txt").write_text("\n".join(lines) + "\n")
    (directory / "README.txt").write_text(
        f"status: {outcome.status}\nplan: {outcome.plan}\nsetup: {json.dumps(outcome.setup)}\n\n"
        f"{outcome.detail}\n\nreplay: python bench/fuzz.py --replay {directory}\n"
    )
    return directory


def _short(item) -> str:
    if hasattr(item, "v"):
        return np.array2string(item.v, threshold=60, precision=6)
    return "[" + ", ".join(_short(p) for p in item) + "]"


def format_exception(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()


def default_plans(rng: np.random.Generator, k: int = 3) -> list[str]:
    """``k`` input plans: always one edge case, never twice the same."""
    edge = [p for p in PLANS if p != "random"]
    first = str(rng.choice(edge))
    rest = [p for p in PLANS if p != first]
    return [first] + [str(p) for p in rng.choice(rest, size=k - 1, replace=False)]


# --------------------------------------------------------------------------
# Batches in a worker process (bench/fuzz.py)
# --------------------------------------------------------------------------


def _key_line(detail: str) -> str:
    """The most telling line of a failure message: the first diagnostic
    (``error:``), else the first frame of a crash's stack that is not the
    signal handler, else the first line."""
    lines = [ln.strip() for ln in detail.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln and "Error invoking" not in ln:
            return ln.split("error:", 1)[1].strip()
    frames = [ln for ln in lines if ln.startswith("#")]
    for ln in frames:
        if not any(k in ln for k in ("Signals.cpp", "libc.so", "SignalHandler", "RunSignalHandlers")):
            return ln.split(" ", 2)[-1]
    return lines[0] if lines else ""


def failure_class(status: str, detail: str) -> str:
    """A short signature of a failure: the status and the telling line of
    the message with numbers and names blurred."""
    import re

    line = _key_line(detail)
    line = re.sub(r"/tmp/\S+", "<tmp>", line)
    line = re.sub(r"@f\d+\w*", "@f", line)
    line = re.sub(r"0x[0-9a-f]+", "0x", line)
    line = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line)
    return f"{status}: {line[:200]}"


def process_batch(task: dict) -> list[dict]:
    """Runs one batch (``cases``, ``options``, ``mode``), localises
    mismatches when ``localize`` and writes a reproducer per failure under
    ``out``. Returns one summary dict per case."""
    cases, options, mode = task["cases"], task["options"], task["mode"]
    out = Path(task["out"]) if task.get("out") else None
    results = []
    for o in run_cases(cases, options, mode, invalid=task.get("invalid", False)):
        entry = {
            "name": o.case.fn.name,
            "seed": o.case.seed,
            "status": o.status,
            "detail": o.detail,
            "class": failure_class(o.status, o.detail),
            "plan": o.plan,
            "setup": o.setup,
            "ops": sorted({n.op for n in o.case.fn.nodes if n.op != "arg"}),
            "rejections": o.rejections,
        }
        if o.status not in ("ok", "rejected") and out is not None:
            repro = write_reproducer(o, out / o.status / f"{o.case.fn.name}")
            entry["reproducer"] = str(repro)
            if o.inputs is None and entry["class"] not in task.get("seen", ()):
                # A compile failure: shrink the program while it fails alike.
                entry["minimized"] = _minimize_compile(o, options, mode, entry["class"], repro / "minimized")
            if o.status == "mismatch" and task.get("localize") and o.inputs is not None:
                try:
                    found = localize(o, options)
                except Exception as e:  # noqa: BLE001 - localisation is best effort
                    entry["localized"] = f"localisation failed: {format_exception(e)}"
                else:
                    if found is None:
                        entry["localized"] = "every op matches on its own (a fusion or whole-program effect)"
                    else:
                        single, inputs, why = found
                        node = single.nodes[-1]
                        sub = Outcome(
                            Case(single, o.case.seed), "mismatch", why, o.plan, inputs, None, None, o.setup
                        )
                        d = write_reproducer(sub, out / o.status / f"{o.case.fn.name}" / "single_op")
                        entry["localized"] = f"{node.op} {node.attrs}: {why}"
                        entry["single_op"] = str(d)
                        entry["class"] = failure_class("mismatch", f"{node.op} {_op_key(node)}")
        results.append(entry)
    return results


def _minimize_compile(o: Outcome, options: dict, mode: str, cls: str, where: Path) -> str:
    from .minimize import minimize

    def fails(fn: Function) -> bool:
        try:
            _compile([Case(fn, o.case.seed)], options, mode == "frozen")
        except Exception as e:  # noqa: BLE001 - classified
            return failure_class(*compile_status(e)) == cls
        return False

    try:
        small = minimize(o.case.fn, fails)
    except Exception as e:  # noqa: BLE001 - best effort
        return f"minimisation failed: {format_exception(e)}"
    write_reproducer(Outcome(Case(small, o.case.seed), o.status, o.detail, setup=o.setup), where)
    return str(where)


def _op_key(node) -> str:
    keys = {k: v for k, v in node.attrs.items() if k in ("fn", "kind", "causal")}
    types = ", ".join(str(t) for t in node.types)
    return f"{keys} -> {types}"


def serve(conn) -> None:
    """Worker loop: receives batch tasks on ``conn``, answers with results."""
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            conn.send(("ok", process_batch(task)))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            conn.send(("error", "".join(traceback.format_exception(e))))
