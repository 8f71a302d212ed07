"""The package has no import cycle: the module-level imports between
``ragged_mlir``'s own modules form a DAG (imports inside functions and under
``TYPE_CHECKING`` are how a module reads another lazily), and every module
imports on its own, first, in an interpreter that holds none of ours (a
child forked from one that loaded only third-party packages), with the rest
after it in a random order. ``import ragged_mlir.torch.nested`` loads no MLIR."""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import ragged_mlir

PACKAGE = Path(ragged_mlir.__file__).resolve().parent
#: MLIR's own Python core, embedded under our prefix (not ours to check).
_FOREIGN = ("ragged_mlir._mlir_libs", "ragged_mlir.extras", "ragged_mlir.dialects", "ragged_mlir.ir")
_FOREIGN += ("ragged_mlir.passmanager", "ragged_mlir.rewrite")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not name.startswith(_FOREIGN) and "__pycache__" not in path.parts:
            out[name] = path
    return out


def _top_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules ``name`` imports when it is imported (not inside a
    function, nor under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)

    visit(tree.body)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first: those of its
    # packages that do not already hold ``name`` are imported too.
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for target in list(found):
        parts = target.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {m for m in found if m in known and m != name and m not in ancestors}


def test_module_imports_form_a_dag():
    modules = _modules()
    known = set(modules)
    graph = {name: _top_level_imports(name, path, known) for name, path in modules.items()}
    # A package's __init__ importing its own submodules is not a cycle by
    # itself; a submodule importing its package's __init__ back is.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


#: One interpreter loads the third-party packages ours build on, then forks a
#: child per module of ours: the child imports that module first, then the
#: rest in a random order. What is checked is the order among our modules;
#: torch and the others, loaded once, make each child cheap (one interpreter
#: per module took 2.5 min of the test run).
_FORK_PER_MODULE = """
import importlib, os, random, sys, traceback
for lib in ("numpy", "torch", "torch_mlir", "iree.runtime", "iree.compiler", "transformers"):
    try:
        importlib.import_module(lib)
    except ImportError:
        pass
names = sys.argv[1:]
for lib in sys.modules:
    assert not lib.startswith("ragged_mlir"), lib
failed = []
running = {}

def reap():
    pid, status = os.wait()
    if status:
        failed.append(running[pid])
    del running[pid]

for i, first in enumerate(names):
    if len(running) == 2:
        reap()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            rest = [n for n in names if n != first]
            random.Random(i).shuffle(rest)
            for name in [first] + rest:
                importlib.import_module(name)
        except BaseException:
            sys.stderr.write(f"importing {first} first:\\n{traceback.format_exc()}\\n")
            code = 1
        sys.stderr.flush()
        os._exit(code)
    running[pid] = first
while running:
    reap()
print("failed:", " ".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    pytest.importorskip("torch")
    names = sorted(_modules())
    env = dict(os.environ, RAGGED_FALLBACK="0")
    cmd = [sys.executable, "-c", _FORK_PER_MODULE, *names]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, f"{r.stdout[-500:]}\n{r.stderr[-6000:]}"
    assert r.stdout.strip() == "failed:", r.stdout


def test_nested_tensor_loads_no_compiler():
    pytest.importorskip("torch")
    code = (
        "import sys, ragged_mlir.torch.nested as n; n.NestedTensor([1.0], [2.0, 3.0]);"
        "bad = [m for m in sys.modules if '_mlir_libs' in m or m.startswith(('torch_mlir', 'iree'))];"
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_no_module_is_too_long():
    """A module a reader can hold: at most ~800 lines."""
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    assert {n: k for n, k in long.items() if k > 850} == {}
    _ = random  # the fresh-interpreter test shuffles with a seed per module
