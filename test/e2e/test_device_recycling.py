"""Modules on IREE's `local-task` device move to a fresh device once the
process has grown too far on one (compiler.runtime._Devices): IREE 3.13 keeps the
slabs of a call's transient memory until its device is destroyed, and a
six-layer training backward took new ones on every call. The growth is
simulated here; the results must not change, results of calls on the
old device must stay readable, and threads that cross the limit together
start one device."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np

import ragged_mlir
import ragged_mlir.compiler.runtime as C
from ragged_mlir import RaggedArray
from ragged_mlir.builders import Program, ragged, tensor


def _module():
    prog = Program()

    @prog.func(x=ragged(None, "L", 4), w=tensor(4, 3))
    def proj(x, w):
        return (x @ w).relu()

    return ragged_mlir.compile(prog)


def test_modules_move_to_a_fresh_local_task_device_when_the_process_grows(monkeypatch):
    devices = C._Devices()
    peak = [0]
    monkeypatch.setattr(devices, "_usage_bytes", lambda: peak[0])
    monkeypatch.setattr(C, "_DEVICES", devices)
    module = _module()
    assert module.driver == "local-task"
    rng = np.random.default_rng(0)
    lengths = [3, 0, 1, 7]
    x = RaggedArray.from_list([rng.standard_normal((n, 4), dtype=np.float32) for n in lengths])
    w = rng.standard_normal((4, 3), dtype=np.float32)
    ref = np.maximum(x.values.astype(np.float64) @ w, 0)

    first = module.proj(x, w)
    old_device = devices._current["local-task"][1]
    # Growth below the limit keeps the device.
    peak[0] = C._DEVICE_GROWTH_LIMIT
    module.proj(x, w)
    assert devices.generation("local-task") == 0
    # Past it, the call that crossed it finishes on the old device, and the
    # next one loads the module onto a fresh device.
    peak[0] = C._DEVICE_GROWTH_LIMIT + 1
    crossed = module.proj(x, w)
    assert devices.generation("local-task") == 1
    # The old context is freed by reference counting, without a collection
    # (a full one took about 230 ms in a training process).
    old_context = weakref.ref(module._loaded["ctx"])

    def no_collection(*args):
        raise AssertionError("moving a module to a fresh device ran the garbage collector")

    gc.disable()
    try:
        with monkeypatch.context() as m:
            m.setattr(gc, "collect", no_collection)
            moved = module.proj(x, w)
        assert old_context() is None
    finally:
        gc.enable()
    assert module._loaded["generation"] == 1
    assert devices._current["local-task"][1] is not old_device
    for out in (first, crossed, moved):
        np.testing.assert_array_equal(np.asarray(out.offsets), np.concatenate([[0], np.cumsum(lengths)]))
        np.testing.assert_allclose(out.values, ref, rtol=1e-5, atol=1e-5)
    # No further growth: the fresh device stays.
    module.proj(x, w)
    assert devices.generation("local-task") == 1


def test_other_drivers_keep_the_cached_device(monkeypatch):
    devices = C._Devices()
    monkeypatch.setattr(devices, "_usage_bytes", lambda: 1 << 60)
    monkeypatch.setattr(C, "_DEVICES", devices)
    generation, device = devices.get("local-sync")
    assert generation == 0 and "local-sync" not in devices._current
    assert devices.get("local-sync")[1] is device


def test_threads_crossing_the_limit_together_start_one_device(monkeypatch):
    devices = C._Devices()
    peak = [0]

    def slow_peak():
        # Long enough for every thread to read the device before any replaces it.
        time.sleep(0.05)
        return peak[0]

    starts = []
    start = devices._start

    def counted_start(driver, generation):
        starts.append(generation)
        start(driver, generation)

    monkeypatch.setattr(devices, "_usage_bytes", slow_peak)
    monkeypatch.setattr(devices, "_start", counted_start)
    assert devices.get("local-task")[0] == 0
    peak[0] = C._DEVICE_GROWTH_LIMIT + 1
    threads = [threading.Thread(target=devices.after_call, args=("local-task",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert starts == [0, 1]
    assert devices.generation("local-task") == 1


def test_growth_counts_from_the_least_usage_since_the_device_started(monkeypatch):
    # The old device's memory is freed after the new one starts: growth is
    # measured from where usage fell to, not from where it stood at the start.
    devices = C._Devices()
    usage = [5 << 30]
    monkeypatch.setattr(devices, "_usage_bytes", lambda: usage[0])
    assert devices.get("local-task")[0] == 0
    usage[0] = 1 << 30
    devices.after_call("local-task")
    usage[0] = (1 << 30) + C._DEVICE_GROWTH_LIMIT
    devices.after_call("local-task")
    assert devices.generation("local-task") == 0
    usage[0] += 1
    devices.after_call("local-task")
    assert devices.generation("local-task") == 1
