"""The cost of a compile-cache lookup with many entries (issue target: under
5 ms per lookup with a thousand entries).

    python bench/cache_lookup.py [--entries 1000] [--artifact-kib 512] [--ir-kib 2048]

Fills a temporary cache directory with ``--entries`` entries of
``--artifact-kib`` each, then times, per lookup: the key of an IR of
``--ir-kib`` (hashing it is part of every compile's lookup), a hit (read,
check the stamp and checksum) and a miss, each the median of 50.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--artifact-kib", type=int, default=512)
    ap.add_argument("--ir-kib", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as root:
        os.environ["RAGGED_CACHE_DIR"] = root
        os.environ.pop("RAGGED_CACHE", None)
        from ragged_mlir import cache

        flags = ["--iree-llvmcpu-target-cpu=host"]
        artifact = os.urandom(args.artifact_kib * 1024)
        keys = []
        for i in range(args.entries):
            k = cache.key(f"module @m{i} {{}}", "llvm-cpu", flags)
            cache.compile_cached(k, lambda: artifact)
            keys.append(k)
        ir = "x" * (args.ir_kib * 1024)

        def median_ms(fn) -> float:
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return statistics.median(times) * 1e3

        key_ms = median_ms(lambda: cache.key(ir, "llvm-cpu", flags))
        hit_ms = median_ms(lambda: cache.lookup(keys[len(keys) // 2]))
        miss_ms = median_ms(lambda: cache.lookup("0" * 64))
        info = cache.info()
        print(f"{info['entries']} entries, {info['bytes'] / 2**20:.0f} MiB in {root}")
        print(f"key of a {args.ir_kib} KiB IR: {key_ms:.2f} ms")
        print(f"hit ({args.artifact_kib} KiB artifact, checksum checked): {hit_ms:.2f} ms")
        print(f"miss: {miss_ms:.3f} ms")
        print(f"lookup (key + hit): {key_ms + hit_ms:.2f} ms")


if __name__ == "__main__":
    main()
