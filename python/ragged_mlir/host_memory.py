"""Warm host memory for compiled calls on CPU devices.

IREE's CPU runtime takes each call's transient memory (one block for all of
a call's intermediates: about 28 KiB per token for an encoder layer) and
its results from ``malloc``. glibc serves blocks over 32 MiB with fresh
``mmap`` pages and unmaps them on ``free``, so every call of a large batch
pays the kernel to zero-fill and map its whole working set again: at 180k
tokens that was a third of the call (8 page faults per token), and the
reason the time per token grew with the batch.

While a compiled function runs, :func:`warm_calls` has glibc serve large
blocks from its heap instead, and the heap keeps what is freed, so the next
call finds its pages mapped. Three process-wide settings come with it: at
the first CPU module, the heap is never trimmed and blocks up to 32 MiB
come from the heap (the threshold glibc itself climbs to once large blocks
are freed; setting any option stops that adjustment); at import, glibc
makes no more arenas, so threads that have none yet share those there are
(the main one alone where ragged_mlir is imported before other threads
allocate). The last is for IREE's `local-task` workers, which allocate the
transient memory of work queued behind other work: in a secondary arena,
whose heaps hold at most 64 MiB, glibc maps every larger block afresh
whatever the other settings say (a RACE training step's attention gradient
faulted 100k pages a call that way). The memory a large batch used stays
with the process, as with a caching allocator; ``malloc_trim(0)`` hands it
back.

``RAGGED_HOST_MEMORY=system`` leaves glibc's settings alone. Other C
libraries are left alone too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

__all__ = ["heap_in_use", "warm_calls"]

# mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
# glibc's defaults: at most this many mmap'd blocks, and the ceiling of the
# dynamic mmap threshold on 64-bit hosts (DEFAULT_MMAP_THRESHOLD_MAX).
_MMAP_MAX_DEFAULT = 65536
_MMAP_THRESHOLD_CEILING = 32 << 20


def _glibc():
    """The C library, when it is glibc (mallopt's options differ elsewhere)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


def _glibc_mallopt():
    """glibc's ``mallopt``; None under ``RAGGED_HOST_MEMORY=system`` or
    another C library."""
    if _LIBC is None or os.environ.get("RAGGED_HOST_MEMORY", "warm") == "system":
        return None
    mallopt = _LIBC.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc_mallinfo2():
    """glibc's ``mallinfo2`` (2.33 and later), or None."""
    mallinfo2 = getattr(_LIBC, "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.argtypes = []
        mallinfo2.restype = _Mallinfo2
    return mallinfo2


_MALLINFO2 = _glibc_mallinfo2()


def heap_in_use() -> int | None:
    """Bytes allocated by ``malloc`` and not freed, in every arena and in
    mapped blocks (glibc's ``mallinfo2``); None without glibc 2.33."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


_MALLOPT = _glibc_mallopt()
if _MALLOPT is not None:
    # At import, before other threads take arenas of their own (module
    # docstring).
    _MALLOPT(_M_ARENA_MAX, 1)


class _Glibc:
    def __init__(self):
        self.mallopt = _MALLOPT
        if self.mallopt is None:
            return
        self._lock = threading.Lock()
        self._active = 0
        # -1 turns trimming off (mallopt(3)).
        self.mallopt(_M_TRIM_THRESHOLD, -1)
        self.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_CEILING)

    @contextlib.contextmanager
    def heap_only(self):
        with self._lock:
            if self._active == 0:
                self.mallopt(_M_MMAP_MAX, 0)
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self.mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT)


_glibc: _Glibc | None = None
_init_lock = threading.Lock()


def warm_calls(fn):
    """``fn`` (an IREE function on a CPU device) with its allocations served
    from glibc's heap, which keeps them for the next call."""
    global _glibc
    with _init_lock:
        if _glibc is None:
            _glibc = _Glibc()
    if _glibc.mallopt is None:  # RAGGED_HOST_MEMORY=system, or not glibc
        return fn
    heap_only = _glibc.heap_only

    def call(*args):
        with heap_only():
            return fn(*args)

    return call
