"""Running compiled modules: one IREE device per driver (recycled on CPU as
its memory grows), modules loaded on first use, functions that check their
arguments and hand host arrays to IREE without a copy."""

from __future__ import annotations

import atexit
import json
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from ..array import RaggedArray, _rows, check_offsets
from ..host_memory import heap_in_use, warm_calls
from .abi import PARAMETER_SCOPE, _np_dtype
from .options import Target

#: Which runtime drivers can run an artifact of each target.
_DRIVERS_OF_TARGET = {
    Target.LLVM_CPU: ("local-task", "local-sync"),
    Target.CUDA: ("cuda",),
    Target.VULKAN_SPIRV: ("vulkan",),
    Target.METAL_SPIRV: ("metal",),
    Target.ROCM: ("hip",),
}


#: How far the memory a `local-task` device holds may grow before modules
#: move to a fresh one (see _Devices).
_DEVICE_GROWTH_LIMIT = 1 << 30
#: The driver whose devices _Devices replaces.
_RECYCLED_DRIVER = "local-task"


class _Devices:
    """One IREE device per driver, shared by the modules that run on it.

    IREE 3.13's `local-task` device serves a call's transient memory from
    64 MiB slabs that it keeps until the device is destroyed, and some
    graphs (a six-layer training backward) take new slabs on every call
    (about 400 MB a call; docs/torch.md says why). So, after a call on a
    `local-task` device, once the bytes the process holds in ``malloc``
    have grown by `_DEVICE_GROWTH_LIMIT` over their least since that
    device was created, a fresh device replaces it: each module loads onto
    it at its next call (a few ms), and the old one is freed with the last
    module and result holding it. The least, not the value at creation:
    the old device's slabs are freed after the new one starts, and the new
    one's may then take their place. Without glibc's ``mallinfo2`` the
    process's peak resident memory stands in. Other drivers keep IREE's
    cached device. Calls from several threads see one device per
    generation."""

    def __init__(self):
        # driver -> (generation, device, least usage since it started)
        self._current: dict[str, tuple[int, object, int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _usage_bytes() -> int:
        in_use = heap_in_use()
        if in_use is not None:
            return in_use
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _start(self, driver: str, generation: int) -> None:
        """A device of IREE's own (not its cached one) as ``generation``."""
        import iree.runtime as rt

        self._current[driver] = (generation, rt.get_first_device([driver], cache=False), self._usage_bytes())

    def get(self, driver: str) -> tuple[int, object]:
        """(generation, device) for ``driver``."""
        if driver != _RECYCLED_DRIVER:
            import iree.runtime as rt

            return 0, rt.get_first_device([driver])
        with self._lock:
            if driver not in self._current:
                self._start(driver, 0)
            generation, device, _ = self._current[driver]
        return generation, device

    def generation(self, driver: str) -> int:
        return self._current[driver][0] if driver in self._current else 0

    def after_call(self, driver: str) -> None:
        """Replaces ``driver``'s device once the process has grown too far on it."""
        with self._lock:
            current = self._current.get(driver)
            if current is None:
                return
            generation, device, least = current
            usage = self._usage_bytes()
            if usage - least > _DEVICE_GROWTH_LIMIT:
                self._start(driver, generation + 1)
            elif usage < least:
                self._current[driver] = (generation, device, usage)


_DEVICES = _Devices()
#: Modules loaded onto a device, so that they can let it go at exit.
_LOADED: weakref.WeakSet = weakref.WeakSet()


def _unload_all() -> None:
    """Frees every loaded module's IREE objects, and the devices, before the
    interpreter tears IREE's bindings down. Modules outlive the program in
    places we do not own (Dynamo's code cache, AOTAutograd's backward of a
    graph that was never differentiated), and IREE objects alive at that
    point are reported by nanobind as leaks, about 130 lines at the end of a
    training script. A module called after this loads again."""
    for module in list(_LOADED):
        module._unload()
    with _DEVICES._lock:
        _DEVICES._current.clear()


atexit.register(_unload_all)


def _release_context(ctx) -> None:
    """Lets reference counting free an IREE SystemContext: it and its bound
    modules refer to each other (iree.runtime 3.13), a cycle otherwise left
    to a full collection, which took about 230 ms in a training process."""
    bound = getattr(ctx, "_bound_modules", None)
    if isinstance(bound, dict):
        bound.clear()
    else:
        import gc

        gc.collect()


def _recycling(fn, driver: str):
    """``fn``, followed by _Devices.after_call."""

    def call(*args):
        try:
            return fn(*args)
        finally:
            _DEVICES.after_call(driver)

    return call


class CompiledModule:
    """A compiled IREE module; each public function is an attribute.

    The module is loaded onto its device on first use, so an artifact for a
    GPU this machine lacks still compiles and saves (run it where the GPU
    is, with :func:`load`)."""

    def __init__(self, vmfb: bytes, signatures: dict, driver: str, target: str):
        self.vmfb = vmfb
        self.signatures = signatures
        self.target = target
        self.driver = driver
        allowed = _DRIVERS_OF_TARGET.get(Target(target), ())
        if driver not in allowed:
            raise ValueError(
                f"device: a {target!r} artifact runs on {' or '.join(repr(d) for d in allowed)}, "
                f"not on {driver!r}"
            )
        self._loaded: dict | None = None
        #: IREE parameters the module reads (frozen arguments) and their arrays.
        self.parameter_keys: list[str] = []
        self._parameters: dict[str, np.ndarray] = {}

    def bind_parameters(self, arrays: dict[str, np.ndarray]) -> None:
        """Supplies the frozen arguments (keys as :func:`parameter_key`
        names them); the module reloads on its next call, so rebinding
        repeats the work that depends only on them."""
        unknown = sorted(set(arrays) - set(self.parameter_keys))
        if unknown:
            raise KeyError(
                f"arrays: no frozen argument named {', '.join(unknown)} (expected {self.parameter_keys})"
            )
        for key, array in arrays.items():
            if not isinstance(array, np.ndarray):
                raise TypeError(f"arrays[{key!r}]: expected a numpy array, got {type(array).__name__}")
        self._parameters.update({key: np.ascontiguousarray(a) for key, a in arrays.items()})
        self._loaded = None

    def with_parameters(self, arrays: dict[str, np.ndarray]) -> CompiledModule:
        """A new module sharing this one's artifact, bound to ``arrays``."""
        module = CompiledModule(self.vmfb, self.signatures, self.driver, self.target)
        module.parameter_keys = list(self.parameter_keys)
        module.bind_parameters(arrays)
        return module

    def _unload(self) -> None:
        """Lets the module's context, functions and device go."""
        if self._loaded is not None:
            _release_context(self._loaded.pop("ctx"))
            self._loaded = None

    def _load(self) -> dict:
        if self._loaded is not None:
            if self._loaded["generation"] == _DEVICES.generation(self.driver):
                return self._loaded
            # Moving to a fresh device: the old context goes, and with it
            # (once no result holds it) the old device's memory.
            self._unload()
        missing = [k for k in self.parameter_keys if k not in self._parameters]
        if missing:
            raise RuntimeError(
                f"the module reads frozen arguments not bound yet: {', '.join(missing)} (bind_parameters)"
            )
        import iree.runtime as rt

        try:
            generation, device = _DEVICES.get(self.driver)
            config = rt.Config(device=device)
        except Exception as e:
            # IREE's own reason (e.g. "CUDA driver library 'libcuda.so' not
            # available") is the chained exception.
            causes, cause = [str(e).strip()], e.__cause__ or e.__context__
            while cause is not None:
                causes.append(str(cause).strip())
                cause = cause.__cause__ or cause.__context__
            raise RuntimeError(
                f"device: IREE driver {self.driver!r} cannot open a device on this machine "
                f"({' '.join(c for c in causes if c)}). Drivers in this runtime: "
                f"{', '.join(rt.query_available_drivers())}. Run the module where such a device "
                "exists (CompiledModule.save, then ragged_mlir.load), or compile for llvm-cpu."
            ) from e
        ctx = rt.SystemContext(config=config)
        if self.parameter_keys:
            index = rt.ParameterIndex()
            for key in self.parameter_keys:
                index.add_buffer(key, self._parameters[key])
            provider = index.create_provider(scope=PARAMETER_SCOPE)
            ctx.add_vm_module(rt.create_io_parameters_module(config.vm_instance, provider))
        ctx.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, self.vmfb))
        host = HostImporter(config.device) if self.driver.startswith("local") else None
        entries = {name: getattr(ctx.modules.module, name) for name in self.signatures}
        if host is not None:
            entries = {name: warm_calls(fn) for name, fn in entries.items()}
        if self.driver == _RECYCLED_DRIVER:
            entries = {name: _recycling(fn, self.driver) for name, fn in entries.items()}
        self._loaded = {
            "generation": generation,
            "ctx": ctx,
            "host": host,
            "entries": entries,
            "functions": {
                name: CompiledFunction(name, sig, entries[name], host)
                for name, sig in self.signatures.items()
            },
        }
        _LOADED.add(self)
        return self._loaded

    def __getattr__(self, name: str) -> CompiledFunction:
        signatures = self.__dict__.get("signatures", {})
        if name not in signatures:
            raise AttributeError(f"no function {name!r}; this module has {sorted(signatures)}")
        return self._load()["functions"][name]

    def __getitem__(self, name: str) -> CompiledFunction:
        return self.__getattr__(name)

    @property
    def functions(self) -> list[str]:
        return sorted(self.signatures)

    def raw(self, name: str):
        """The IREE function itself, taking flat arguments (values,
        offsets..., arrays, scalars) without checks, for callers that already
        validated them; arrays go in without a copy on CPU devices."""
        loaded = self._load()
        if name not in loaded["entries"]:
            raise AttributeError(f"no function {name!r}; this module has {sorted(self.signatures)}")
        fn = loaded["entries"][name]
        host = loaded["host"]
        if host is None:
            return fn
        written = frozenset(self.signatures[name].get("written", ()))
        return lambda *args: fn(*_hand_over(host, args, written))

    def save(self, path: str | os.PathLike) -> Path:
        """Writes ``path`` (.vmfb) and its signature file (``.json``)."""
        if self.parameter_keys:
            raise ValueError(
                "save: this module reads frozen arguments bound at run time; compile it without `frozen`"
            )
        path = Path(path)
        path.write_bytes(self.vmfb)
        meta = {"functions": self.signatures, "device": self.driver, "target": self.target}
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return path


class HostImporter:
    """Hands numpy arrays to a CPU device without copying them: the HAL
    buffer wraps the array's memory (and keeps it alive). Passing arrays
    directly would copy every argument, weights included, on every call."""

    _ELEMENT_TYPES = {
        np.dtype(np.float32): "FLOAT_32",
        np.dtype(np.float64): "FLOAT_64",
        np.dtype(np.float16): "FLOAT_16",
        np.dtype(np.int64): "SINT_64",
        np.dtype(np.int32): "SINT_32",
        np.dtype(np.int8): "SINT_8",
        np.dtype(np.bool_): "BOOL_8",
    }

    #: IREE's CPU kernels assume buffers aligned like its own allocations.
    ALIGNMENT = 64

    def __init__(self, device):
        import iree.runtime as rt

        self._rt = rt
        self._allocator = device.allocator
        self._memory = rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE
        self._usage = rt.BufferUsage.DEFAULT

    def __call__(self, array: np.ndarray):
        kind = self._ELEMENT_TYPES.get(array.dtype)
        if (
            kind is None
            or array.ndim == 0
            or array.size == 0
            or not array.flags.c_contiguous
            or array.ctypes.data % self.ALIGNMENT
        ):
            return array  # the runtime's own (copying) path
        buffer = self._allocator.import_host_allocation(array, self._memory, self._usage)
        return self._rt.HalBufferView(buffer, array.shape, getattr(self._rt.HalElementType, kind))


def _hand_over(host: HostImporter, args, written: frozenset[int]) -> list:
    """Flat arguments for an IREE call on a CPU device: arrays without a
    copy, except those IREE may write in place (:mod:`.inplace`), which the
    runtime copies."""
    return [host(a) if isinstance(a, np.ndarray) and i not in written else a for i, a in enumerate(args)]


class CompiledFunction:
    """Calls one compiled function: checks and flattens ragged arguments,
    rebuilds ragged results."""

    def __init__(self, name: str, signature: dict, fn, host: HostImporter | None = None):
        self.name = name
        self.signature = signature
        self._fn = fn
        self._host = host
        self._written = frozenset(signature.get("written", ()))

    def __call__(self, *args):
        inputs = self.signature["inputs"]
        if len(args) != len(inputs):
            raise TypeError(f"{self.name}() takes {len(inputs)} arguments ({len(args)} given)")
        flat: list[np.ndarray] = []
        bound: dict[str, tuple[str, np.ndarray]] = {}
        for i, (arg, desc) in enumerate(zip(args, inputs, strict=False)):
            name = f"argument {i}"
            if desc["kind"] == "ragged":
                flat.extend(_flatten_ragged(name, arg, desc, bound))
            elif desc["kind"] == "scalar":
                flat.append(_check_scalar(name, arg, desc))
            else:
                flat.append(_check_dense(name, arg, desc))
        if self._host is not None:
            flat = _hand_over(self._host, flat, self._written)
        out = self._fn(*flat)
        if not isinstance(out, (list, tuple)):
            out = [out]
        # Copied out of IREE's memory: to_host() maps the result buffer, and
        # an array viewing that mapping keeps IREE objects (the mapping, the
        # buffer view) alive as long as it lives. One that outlives the
        # interpreter's teardown (held by a daemon thread, say) then shows as
        # nanobind leaks at exit; a copy owns its memory and holds nothing.
        host = [np.array(o.to_host()) for o in out]
        del out
        results, k = [], 0
        for desc in self.signature["results"]:
            if desc["kind"] == "ragged":
                n = len(desc["symbols"])
                values, parts = host[k], host[k + 1 : k + 1 + n]
                k += 1 + n
                results.append(RaggedArray(values, list(parts), layout=_layout_of(desc), _checked=True))
            else:
                results.append(host[k])
                k += 1
        return results[0] if len(results) == 1 else tuple(results)


def _layout_of(desc) -> tuple | None:
    """The RaggedArray layout of a ragged type (None for nested levels)."""
    dims = desc["dims"]
    ragged = [d for d in dims if isinstance(d, dict)]
    if any(d["parent"] for d in ragged) or (len(ragged) == 1 and isinstance(dims[0], dict)):
        return None
    last = max(i for i, d in enumerate(dims) if isinstance(d, dict))
    return tuple(
        (desc["symbols"].index(d["symbol"]),) if isinstance(d, dict) else d for d in dims[: last + 1]
    )


def _check_scalar(name: str, arg, desc):
    want = np.dtype(_np_dtype(desc["element"]))
    if isinstance(arg, np.ndarray) and arg.ndim != 0:
        raise TypeError(f"{name}: expected a {desc['type']} scalar, got an array of shape {arg.shape}")
    if want.kind in "iu" and not isinstance(arg, (int, np.integer)):
        raise TypeError(f"{name}: expected an int for {desc['type']}, got {type(arg).__name__}")
    return want.type(arg)


def _check_dense(name: str, arg, desc) -> np.ndarray:
    if isinstance(arg, RaggedArray):
        raise TypeError(f"{name}: expected a dense array {desc['type']}, got a RaggedArray")
    arr = np.asarray(arg)
    want = _np_dtype(desc["element"])
    if arr.dtype != want:
        raise TypeError(f"{name}: expected dtype {np.dtype(want)} for {desc['type']}, got {arr.dtype}")
    shape = desc["shape"]
    if arr.ndim != len(shape):
        raise ValueError(f"{name}: expected rank {len(shape)} for {desc['type']}, got shape {arr.shape}")
    for d, (have, need) in enumerate(zip(arr.shape, shape, strict=False)):
        if need is not None and have != need:
            raise ValueError(f"{name}: dim {d} must be {need} for {desc['type']}, got {have}")
    # np.ascontiguousarray would turn a rank-0 array into rank 1.
    return np.require(arr, requirements="C")


def _flatten_ragged(name: str, arg, desc, bound) -> list[np.ndarray]:
    if not isinstance(arg, RaggedArray):
        if isinstance(arg, (list, tuple)):
            arg = RaggedArray.from_list(arg)
        else:
            raise TypeError(
                f"{name}: expected a RaggedArray (or a list of arrays) for {desc['type']}, got {type(arg).__name__}"
            )
    symbols = desc["symbols"]
    if len(arg.partitions) != len(symbols):
        raise ValueError(
            f"{name}: {desc['type']} takes {len(symbols)} partitions ({', '.join(symbols)}), "
            f"got a RaggedArray with {len(arg.partitions)}"
        )
    want = _np_dtype(desc["element"])
    values = arg.values
    if values.dtype != want:
        raise TypeError(
            f"{name}: expected values of dtype {np.dtype(want)} for {desc['type']}, got {values.dtype}"
        )
    dims = desc["dims"]
    last = max(i for i, d in enumerate(dims) if isinstance(d, dict))
    trailing = dims[last + 1 :]
    if values.ndim != 1 + len(trailing):
        raise ValueError(
            f"{name}: values must have rank {1 + len(trailing)} ([rows, {', '.join(map(str, trailing))}]) "
            f"for {desc['type']}, got shape {values.shape}"
        )
    for j, (have, need) in enumerate(zip(values.shape[1:], trailing, strict=False)):
        if need is not None and have != need:
            raise ValueError(f"{name}: values dim {j + 1} must be {need} for {desc['type']}, got {have}")
    parents = {d["symbol"]: d["parent"] for d in dims if isinstance(d, dict)}
    parts = {
        s: check_offsets(f"{name}: offsets of {s}", p) for s, p in zip(symbols, arg.partitions, strict=False)
    }
    batch = desc["batch"]
    for s in symbols:
        p = parts[s]
        parent = parents[s]
        expected = (parts[parent][-1] + 1) if parent else (None if batch is None else batch + 1)
        if parent is None:
            first = parts[symbols[0]]
            if p.size != first.size:
                raise ValueError(
                    f"{name}: offsets of {s} have {p.size} entries, offsets of {symbols[0]} have {first.size}"
                )
        if expected is not None and p.size != expected:
            raise ValueError(f"{name}: offsets of {s} must have {int(expected)} entries, got {p.size}")
    rows = _rows([parts[s] for s in symbols], _layout_of(desc))
    if values.shape[0] != rows:
        raise ValueError(f"{name}: the partitions describe {rows} rows of values, got {values.shape[0]}")
    for s in symbols:
        if s in bound and not np.array_equal(bound[s][1], parts[s]):
            raise ValueError(
                f"{name}: symbol {s} must have the same partition as in {bound[s][0]} "
                f"(the types share the symbol), but the offsets differ"
            )
        bound.setdefault(s, (name, parts[s]))
    return [np.require(values, requirements="C")] + [parts[s] for s in symbols]


def load(path: str | os.PathLike, device: str | None = None) -> CompiledModule:
    """Loads a module saved by :meth:`CompiledModule.save` without recompiling."""
    path = Path(path)
    meta_path = path.with_suffix(".json")
    if not path.exists() or not meta_path.exists():
        raise FileNotFoundError(f"path: expected {path} and {meta_path} written by CompiledModule.save")
    meta = json.loads(meta_path.read_text())
    return CompiledModule(path.read_bytes(), meta["functions"], device or meta["device"], meta["target"])
