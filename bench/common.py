"""What the benchmark scripts share: one explicit ``setup()`` (threads, IREE's
CPU workers, quiet warnings), the machine's description, the in-process
GEMM peak and copy bandwidth the roofline is measured against, and a timed
call that measures its peak memory. Importing it does nothing else."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

__all__ = [
    "MEM_METHOD",
    "copy_bandwidth_gbs",
    "gemm_peak_gflops",
    "log",
    "machine_info",
    "measured_call",
    "settled_call",
    "setup",
]


def setup(threads: int = 2) -> None:
    """torch on ``threads`` threads and IREE's CPU workers as many (both
    sides get the same cores), benchmark noise out of the logs, and room in
    Dynamo's cache for every variant."""
    import iree.runtime as rt

    torch.set_num_threads(threads)
    rt.flags.parse_flags(f"--task_topology_max_group_count={threads}")
    warnings.filterwarnings("ignore", message=".*prototype stage.*")
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.nested")
    logging.getLogger("torch._inductor").setLevel(logging.ERROR)
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
    torch._dynamo.config.cache_size_limit = 64


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# -- machine ---------------------------------------------------------------------------------


def machine_info() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    isa = [
        f
        for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
        if f in flags
    ]
    commit = "unknown"
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    for mod in ("iree.runtime", "torch_mlir", "danling"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[mod] = version(
                {"iree.runtime": "iree-base-runtime", "torch_mlir": "torch-mlir"}.get(mod, mod)
            )
    return {
        "cpu": model,
        "isa": isa,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "commit": commit,
        "versions": versions,
    }


def gemm_peak_gflops(n: int = 2048, reps: int = 3) -> float:
    """In-process dense GEMM peak: torch.mm n x n fp32, same threads, best of reps."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b))[1] for _ in range(reps))
    return 2 * n**3 / best / 1e9


def copy_bandwidth_gbs(mib: int = 256, reps: int = 5) -> float:
    """In-process memory bandwidth: bytes read plus written by a large tensor copy, best of reps."""
    n = mib * 2**20 // 4
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src))[1] for _ in range(reps))
    return 2 * 4 * n / best / 1e9


def _timed(fn: Callable) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


#: Untimed calls of a variant before each timed one, in seconds (at least one).
SETTLE_S = 0.02


def settled_call(fn: Callable, settle_s: float = SETTLE_S) -> tuple[Any, float]:
    """One timed call of ``fn`` after untimed ones for ``settle_s`` (at least
    one): they absorb the switch from the previous variant's runtime in an
    interleaved comparison. torch's OpenMP threads spin for a while after a
    call; on 2 cores they slowed the IREE call that followed 1.3-3x (a short
    W3 case took 7.4 ms right after a torch variant and 3.8 ms after an IREE
    one)."""
    t = time.perf_counter()
    fn()
    while time.perf_counter() - t < settle_s:
        fn()
    return _timed(fn)


# -- memory ----------------------------------------------------------------------------------

try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


def _status_kb(key: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


MEM_METHOD = "VmHWM delta (clear_refs=5 after gc + malloc_trim)"


def measured_call(fn: Callable) -> tuple[Any, float, float | None]:
    """Calls fn once; returns (result, seconds, peak MiB above the resident
    set just before the call). Counts every allocator in the process (torch,
    IREE, numpy, Python): freed heap is handed back first (malloc_trim) and
    the kernel's high-water mark is reset, so the value is what this one call
    touched at its peak, including its output, excluding its inputs."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    ok = _reset_peak()
    base = _status_kb("VmRSS")
    out, dt = _timed(fn)
    peak = _status_kb("VmHWM")
    mem = (peak - base) / 1024 if ok and peak is not None and base is not None else None
    return out, dt, mem
