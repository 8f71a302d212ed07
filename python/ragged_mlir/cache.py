"""The persistent cache of compiled artifacts.

Every :func:`ragged_mlir.compile` (and so every graph of the ``ragged``
torch backend) looks its artifact up here before running ``iree-compile``,
so a second process that compiles the same program starts without it.

Where it lives: ``$RAGGED_CACHE_DIR`` if set, else ``ragged-mlir`` under the
user's cache directory (``$XDG_CACHE_HOME``, by default ``~/.cache``; on
macOS ``~/Library/Caches``). ``RAGGED_CACHE=0`` (or
``CompileOptions(cache=False)``) turns it off; ``RAGGED_CACHE_MAX_MB`` bounds
its size (default 2048), the least recently used entries going first.

What is in the key: the IR handed to ``iree-compile`` (after the ragged
pipeline, so every choice of the lowering is in it), the target backend,
the ``iree-compile`` flags, the CPU the artifact is for (the host's features
when the flags say ``host``), the IREE compiler and runtime versions and the
entry format. Weights are not: frozen arguments are IREE parameters, so one
artifact serves every checkpoint of a model.

Safety: an entry is written to a temporary file and renamed into place;
processes compiling the same key take a lock on it, so the key is compiled
once and nobody reads a half-written entry; each entry carries its key, a
version stamp and a SHA-256 of the artifact, and one that does not match is
removed and compiled again, never loaded. A cached artifact is native code,
so the directory is created private to the user (0700), and a directory or
entry owned by someone else or writable by others is refused with a
warning. A cache that cannot be read or written (read-only, full) degrades
to compiling, with one warning.

``python -m ragged_mlir.cache info|clear`` prints or clears it; :func:`info`
and :func:`clear` do the same from Python, and :data:`stats` counts hits,
misses and stores in this process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import stat
import struct
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["cache_dir", "clear", "enabled", "info", "key", "lookup", "stats", "compile_cached"]

#: Bumped whenever the entry layout changes; part of the key and the stamp.
FORMAT = 1
_MAGIC = b"RAGGEDC\x01"
_SUFFIX = ".vmfb"
_DEFAULT_MAX_MB = 2048

#: Hits, misses, stores and refused entries of this process.
stats = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}

_warned: set[str] = set()


def _warn_once(kind: str, message: str) -> None:
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(f"ragged_mlir.cache: {message}", RuntimeWarning, stacklevel=3)


def cache_dir() -> Path:
    """The cache directory (which need not exist yet)."""
    given = os.environ.get("RAGGED_CACHE_DIR")
    if given:
        return Path(given).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ragged-mlir"


def enabled() -> bool:
    """False when ``RAGGED_CACHE`` is ``0``, ``off``, ``false`` or ``no``."""
    return os.environ.get("RAGGED_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def _max_bytes() -> int:
    raw = os.environ.get("RAGGED_CACHE_MAX_MB", str(_DEFAULT_MAX_MB))
    try:
        return int(float(raw) * 2**20)
    except ValueError:
        _warn_once("max", f"RAGGED_CACHE_MAX_MB={raw!r} is not a number; using {_DEFAULT_MAX_MB}")
        return _DEFAULT_MAX_MB * 2**20


@functools.cache
def _versions_cached() -> tuple:
    import iree.compiler.version as compiler_version

    try:
        import iree.runtime.version as runtime_version

        runtime = runtime_version.VERSION
    except ImportError:  # compile-only installs
        runtime = None
    return (compiler_version.VERSION, runtime)


def _versions() -> dict:
    compiler, runtime = _versions_cached()
    return {"format": FORMAT, "iree_compiler": compiler, "iree_runtime": runtime}


@functools.cache
def _host_cpu() -> str:
    """What LLVM's ``host`` CPU depends on: the machine, the CPU model and
    its feature flags."""
    lines = [platform.machine(), platform.processor()]
    with contextlib.suppress(OSError):
        seen = set()
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name = line.split(":", 1)[0].strip()
            if (
                name in ("model name", "flags", "Features", "CPU implementer", "CPU part")
                and name not in seen
            ):
                seen.add(name)
                lines.append(line)
    return "\n".join(lines)


_OBJECT_SEARCH_PATH = "--iree-hal-executable-object-search-path="


def _objects_digest(folder: str) -> str:
    """The SHA-256 of the object files iree-compile may link from
    ``folder`` (the kernel library's): a rebuilt kernel is a new key."""
    h = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.o")):
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def key(ir_text: str, backend: str, flags: list[str]) -> str:
    """The hex SHA-256 key of an artifact."""
    h = hashlib.sha256()
    stamp = dict(_versions(), backend=backend, flags=list(flags))
    objects = [f[len(_OBJECT_SEARCH_PATH) :] for f in flags if f.startswith(_OBJECT_SEARCH_PATH)]
    if objects:
        stamp["objects"] = [_objects_digest(folder) for folder in objects]
    if any(f.endswith("=host") for f in flags) or (
        backend == "llvm-cpu" and not any(f.startswith("--iree-llvmcpu-target-cpu") for f in flags)
    ):
        stamp["host_cpu"] = _host_cpu()
    h.update(json.dumps(stamp, sort_keys=True).encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


# --- the directory ---------------------------------------------------------


def _safe(path: Path, st: os.stat_result) -> str | None:
    """Why ``path`` may not be trusted, or None."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _directory(create: bool) -> Path | None:
    """The cache directory, made private if it is new; None (after one
    warning) when it cannot be made or is not safe to use."""
    root = cache_dir()
    try:
        if create:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once("unusable", f"cannot use {root} ({e.strerror}); compiling without the cache")
        return None
    if not stat.S_ISDIR(st.st_mode):
        _warn_once("unusable", f"{root} is not a directory; compiling without the cache")
        return None
    why = _safe(root, st)
    if why:
        _warn_once("unsafe", f"refusing the cache: {why}; compiling without it")
        return None
    return root


def _entry(root: Path, k: str) -> Path:
    return root / f"{k}{_SUFFIX}"


def _entries(root: Path) -> Iterator[Path]:
    with contextlib.suppress(OSError):
        yield from (p for p in root.iterdir() if p.suffix == _SUFFIX)


# --- entries ---------------------------------------------------------------
#
# An entry: MAGIC, a u32 header length, the header (JSON: key, versions,
# sha256 and size of the artifact), the artifact.


def _encode(k: str, artifact: bytes) -> bytes:
    header = json.dumps(
        {
            "key": k,
            "stamp": _versions(),
            "sha256": hashlib.sha256(artifact).hexdigest(),
            "size": len(artifact),
        },
        sort_keys=True,
    ).encode()
    return _MAGIC + struct.pack("<I", len(header)) + header + artifact


def _decode(k: str, data: bytes) -> tuple[bytes | None, str]:
    """The artifact, or None and why the entry is refused."""
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        return None, "not a ragged-mlir cache entry"
    (n,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    try:
        header = json.loads(data[start : start + n])
    except ValueError:
        return None, "its header is damaged"
    if not isinstance(header, dict) or header.get("key") != k:
        return None, "its key does not match"
    if header.get("stamp") != _versions():
        return None, f"it was written by another version ({header.get('stamp')})"
    artifact = data[start + n :]
    if len(artifact) != header.get("size"):
        return None, f"it is truncated ({len(artifact)} of {header.get('size')} bytes)"
    if hashlib.sha256(artifact).hexdigest() != header.get("sha256"):
        return None, "its checksum does not match"
    return artifact, ""


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def lookup(k: str) -> bytes | None:
    """The artifact stored under key ``k``, or None. An entry that is not
    safe or not intact is refused (with a warning) and removed."""
    root = _directory(create=False)
    if root is None:
        return None
    path = _entry(root, k)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once("read", f"cannot read {path} ({e.strerror}); compiling instead")
        return None
    with os.fdopen(fd, "rb") as f:
        why = _safe(path, os.fstat(f.fileno()))
        if why:
            stats["rejected"] += 1
            _warn_once("unsafe-entry", f"refusing {why}; compiling instead")
            return None
        data = f.read()
    artifact, why = _decode(k, data)
    if artifact is None:
        stats["rejected"] += 1
        warnings.warn(
            f"ragged_mlir.cache: removed {path.name}: {why}; compiling again", RuntimeWarning, stacklevel=2
        )
        _remove(path)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # least recently used goes first
    return artifact


def _store(root: Path, k: str, artifact: bytes) -> None:
    data = _encode(k, artifact)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, _entry(root, k))
        except BaseException:
            _remove(Path(tmp))
            raise
    except OSError as e:
        _warn_once("write", f"cannot write to {root} ({e.strerror}); compiled artifacts are not kept")
        return
    stats["stores"] += 1
    _evict(root, keep=k)


def _evict(root: Path, keep: str) -> None:
    """Removes the least recently used entries while the cache holds more
    than its bound (never the entry just stored)."""
    limit = _max_bytes()
    entries = []
    for p in _entries(root):
        with contextlib.suppress(OSError):
            st = p.stat()
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if p.stem != keep:
            _remove(p)
            total -= size


@contextlib.contextmanager
def _lock(root: Path, k: str) -> Iterator[None]:
    """Holds an exclusive lock on key ``k`` (where the platform and the
    directory allow one: without it, two processes may both compile)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    locks = root / "locks"
    try:
        locks.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(locks / k, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def compile_cached(k: str, build: Callable[[], bytes], use: bool = True) -> tuple[bytes, bool]:
    """The artifact of key ``k``: from the cache, or ``build()`` and stored.
    Returns it and whether it came from the cache."""
    if not (use and enabled()):
        return build(), False
    artifact = lookup(k)
    if artifact is not None:
        stats["hits"] += 1
        return artifact, True
    root = _directory(create=True)
    if root is None:
        stats["misses"] += 1
        return build(), False
    with _lock(root, k):
        artifact = lookup(k)  # another process may have compiled it meanwhile
        if artifact is not None:
            stats["hits"] += 1
            return artifact, True
        stats["misses"] += 1
        artifact = build()
        _store(root, k, artifact)
    return artifact, False


def info() -> dict:
    """Where the cache is, whether it is on, its entries and size, its
    bound, and this process's hits and misses."""
    root = cache_dir()
    sizes = []
    for p in _entries(root):
        with contextlib.suppress(OSError):
            sizes.append(p.stat().st_size)
    return {
        "path": str(root),
        "enabled": enabled(),
        "entries": len(sizes),
        "bytes": sum(sizes),
        "max_bytes": _max_bytes(),
        **stats,
    }


def clear() -> int:
    """Removes every entry (and stale temporary files); returns how many
    entries went."""
    root = cache_dir()
    n = 0
    with contextlib.suppress(OSError):
        for p in root.iterdir():
            if p.suffix == _SUFFIX or p.name.startswith(".tmp-"):
                n += p.suffix == _SUFFIX
                _remove(p)
    return n


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ragged_mlir.cache", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("info", "clear"))
    args = parser.parse_args(argv)
    if args.command == "clear":
        print(f"removed {clear()} entries from {cache_dir()}")
        return 0
    i = info()
    print(f"path     {i['path']}")
    print(f"enabled  {i['enabled']}")
    print(f"entries  {i['entries']}")
    print(f"size     {i['bytes'] / 2**20:.1f} MiB of {i['max_bytes'] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
