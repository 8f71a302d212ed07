"""The persistent compile cache (ragged_mlir.cache), with real processes and
real damaged files: a second process compiles nothing; processes compiling
one key at once compile it at most twice and read no half-written entry; a
truncated, corrupted or foreign-version entry is removed and compiled again,
never loaded; an unusable directory degrades to compiling with one warning;
a directory or entry owned by someone else or writable by others is refused;
least recently used entries go first; info, clear and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Compiles a small program (a matmul, a scale and ``fn``: the function
#: changes the IR, the seed only the inputs and weights), runs it and checks
#: it against fp64 numpy per item; prints what happened as JSON.
WORKER = r"""
import json, sys, warnings
import numpy as np
import ragged_mlir
from ragged_mlir import RaggedArray, cache

fn = sys.argv[1]
seed = int(sys.argv[2])
scale = 2.0
ref = {"tanh": np.tanh, "neg": np.negative, "exp": np.exp}[fn]
T = "!ragged.tensor<?, [L], 3, f32>"
text = f'''
func.func @f(%x: !ragged.tensor<?, [L], 4, f32>, %w: tensor<4x3xf32>, %s: tensor<3xf32>) -> {T} {{
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 4, f32>, tensor<4x3xf32> -> {T}
  %z = ragged.binary <mul> %y, %s : {T}, tensor<3xf32>
  %t = ragged.unary <{fn}> %z : {T}
  return %t : {T}
}}
'''
s = np.full(3, scale, np.float32)
rng = np.random.default_rng(seed)
items = [rng.uniform(-1, 1, (n, 4)).astype(np.float32) for n in (3, 0, 5, 1)]
w = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = ragged_mlir.compile(text)
out = module.f(RaggedArray.from_list(items), w, s)
out = out[0] if isinstance(out, (list, tuple)) else out
ok = all(
    np.allclose(o, ref((x.astype(np.float64) @ w.astype(np.float64)) * scale), atol=1e-5)
    for o, x in zip(out.to_list(), items, strict=True)
)
print(json.dumps({
    "hit": module.cache_hit,
    "ok": bool(ok),
    "warnings": [str(c.message) for c in caught if "ragged_mlir.cache" in str(c.message)],
    "stats": cache.stats,
}))
"""


def run(cache_dir: Path, fn: str = "tanh", seed: int = 0, **env) -> dict:
    """One fresh process compiling the program; its report."""
    full = dict(os.environ, RAGGED_CACHE_DIR=str(cache_dir), **env)
    full.pop("RAGGED_CACHE", None)
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, fn, str(seed)], env=full, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"], report
    return report


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.vmfb"))


def test_second_process_compiles_nothing(tmp_path):
    first = run(tmp_path / "c")
    assert not first["hit"] and first["stats"]["misses"] == 1 and first["stats"]["stores"] == 1
    assert len(entries(tmp_path / "c")) == 1
    second = run(tmp_path / "c")
    assert second["hit"] and second["stats"]["misses"] == 0 and not second["warnings"]
    # The weights are arguments, not part of the key: other values hit too.
    assert run(tmp_path / "c", seed=7)["hit"]
    # Other IR is another key.
    assert not run(tmp_path / "c", fn="exp")["hit"]
    assert len(entries(tmp_path / "c")) == 2


def test_directory_is_private(tmp_path):
    run(tmp_path / "new" / "c")
    assert (tmp_path / "new" / "c").stat().st_mode & 0o777 == 0o700


def test_disabled_by_environment(tmp_path):
    report = run(tmp_path / "c", RAGGED_CACHE="0")
    assert not report["hit"] and report["stats"]["stores"] == 0
    assert not (tmp_path / "c").exists()


def test_concurrent_processes_compile_once_or_twice(tmp_path):
    env = dict(os.environ, RAGGED_CACHE_DIR=str(tmp_path / "c"))
    env.pop("RAGGED_CACHE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, "tanh", str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] and not r["warnings"] for r in reports)
    assert sum(not r["hit"] for r in reports) <= 2
    assert len(entries(tmp_path / "c")) == 1
    assert not list((tmp_path / "c").glob(".tmp-*"))


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "foreign_version", "not_an_entry"])
def test_damaged_entry_is_removed_and_compiled_again(tmp_path, damage):
    run(tmp_path / "c")
    (entry,) = entries(tmp_path / "c")
    data = entry.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "corrupted":
        i = len(data) - 100
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    elif damage == "foreign_version":
        data = data.replace(b'"format": 1', b'"format": 0', 1)
    else:
        data = b"\x7fELF" + data[4:]
    entry.write_bytes(data)
    report = run(tmp_path / "c")
    assert not report["hit"] and report["stats"]["rejected"] == 1
    why = {
        "truncated": "truncated",
        "corrupted": "checksum",
        "foreign_version": "another version",
        "not_an_entry": "not a ragged-mlir cache entry",
    }[damage]
    assert any(why in w for w in report["warnings"]), report["warnings"]
    # Compiled again and stored intact: the next process hits.
    assert run(tmp_path / "c")["hit"]


def test_unwritable_directory_degrades_to_compiling(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    report = run(blocker / "c")
    assert not report["hit"] and len(report["warnings"]) == 1 and "cannot use" in report["warnings"][0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_directory_degrades_to_compiling(tmp_path):
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    root.chmod(0o500)
    try:
        report = run(root)
        assert not report["hit"] and len(report["warnings"]) == 1 and "cannot write" in report["warnings"][0]
    finally:
        root.chmod(0o700)


def test_directory_writable_by_others_is_refused(tmp_path):
    run(tmp_path / "c")
    (tmp_path / "c").chmod(0o777)
    report = run(tmp_path / "c")
    assert not report["hit"] and report["stats"]["stores"] == 0
    assert len(report["warnings"]) == 1 and "writable by others" in report["warnings"][0]


def test_entry_writable_by_others_is_refused(tmp_path):
    run(tmp_path / "c")
    (entry,) = entries(tmp_path / "c")
    entry.chmod(0o666)
    report = run(tmp_path / "c")
    assert not report["hit"] and report["stats"]["rejected"] >= 1
    assert any("writable by others" in w for w in report["warnings"])
    # Replaced by a private entry of this user's.
    assert entry.stat().st_mode & 0o777 == 0o600 and run(tmp_path / "c")["hit"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_directory_and_entry_owned_by_someone_else_are_refused(tmp_path):
    run(tmp_path / "c")
    (entry,) = entries(tmp_path / "c")
    os.chown(entry, 65534, 65534)
    report = run(tmp_path / "c")
    assert not report["hit"] and any("owned by uid 65534" in w for w in report["warnings"])
    os.chown(tmp_path / "c", 65534, 65534)
    report = run(tmp_path / "c")
    assert not report["hit"] and report["stats"]["stores"] == 0
    assert any("owned by uid 65534" in w for w in report["warnings"])


def test_least_recently_used_entries_go_first(tmp_path):
    root = tmp_path / "c"
    run(root, fn="neg")
    (first,) = entries(root)
    size = first.stat().st_size
    # Room for two entries: the third store evicts the least recently used.
    bound = str(2.5 * size / 2**20)
    run(root, fn="tanh", RAGGED_CACHE_MAX_MB=bound)
    os.utime(first, (1, 1))  # neg last used long ago
    assert run(root, fn="tanh", RAGGED_CACHE_MAX_MB=bound)["hit"]
    run(root, fn="exp", RAGGED_CACHE_MAX_MB=bound)
    assert len(entries(root)) == 2 and not first.exists()
    assert run(root, fn="tanh", RAGGED_CACHE_MAX_MB=bound)["hit"]


def test_info_clear_and_command_line(tmp_path, monkeypatch):
    root = tmp_path / "c"
    run(root)
    monkeypatch.setenv("RAGGED_CACHE_DIR", str(root))
    from ragged_mlir import cache

    info = cache.info()
    assert info["path"] == str(root) and info["entries"] == 1 and info["bytes"] > 0 and info["enabled"]
    env = dict(os.environ, RAGGED_CACHE_DIR=str(root))
    out = subprocess.run(
        [sys.executable, "-m", "ragged_mlir.cache", "info"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(root) in out and "entries  1" in out
    out = subprocess.run(
        [sys.executable, "-m", "ragged_mlir.cache", "clear"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "removed 1 entries" in out and not entries(root)
    assert cache.info()["entries"] == 0 and cache.clear() == 0


def test_key_covers_ir_backend_flags_and_host(monkeypatch):
    from ragged_mlir import cache

    base = cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=host"])
    assert base == cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=host"])
    assert base != cache.key("module { }", "llvm-cpu", ["--iree-llvmcpu-target-cpu=host"])
    assert base != cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=znver4"])
    assert base != cache.key("module {}", "cuda", ["--iree-llvmcpu-target-cpu=host"])
    # A compile for the host depends on the host's CPU.
    monkeypatch.setattr(cache, "_host_cpu", lambda: "another CPU")
    assert base != cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=host"])
    named = cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=znver4"])
    monkeypatch.undo()
    assert named == cache.key("module {}", "llvm-cpu", ["--iree-llvmcpu-target-cpu=znver4"])


def test_key_covers_the_kernel_objects(tmp_path):
    """A rebuilt kernel object (the same path, other bytes) is a new key."""
    from ragged_mlir import cache

    (tmp_path / "ragged_kernels_x86_64_v4.o").write_bytes(b"one")
    flags = ["--iree-llvmcpu-target-cpu=znver4", f"--iree-hal-executable-object-search-path={tmp_path}"]
    before = cache.key("module {}", "llvm-cpu", flags)
    assert before == cache.key("module {}", "llvm-cpu", flags)
    (tmp_path / "ragged_kernels_x86_64_v4.o").write_bytes(b"two")
    assert before != cache.key("module {}", "llvm-cpu", flags)
