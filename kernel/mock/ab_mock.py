"""A/B of two or more builds of the mock in one process (the figures of kernel/mock/PERFORMANCE.md's steps).

    python kernel/mock/ab_mock.py OLD.so build/lib/libpa_mock.so [--reps 9] [--shapes b8_4k_fp16,b1_4k]
    python kernel/mock/ab_mock.py build/lib/libpa_mock.so --isas 3,4       (one build's AVX-512 and AVX512-BF16)

Every shape's inputs are made once; the libraries' launches alternate (so a busy neighbour slows them alike),
each after reading a clean 256 MiB buffer (the KV comes from DRAM, on 4 KiB pages as the benchmark's torch
tensors are, unless --hugepages); prints the median time and KV GB/s per library (and SIMD path, with --isas),
then each later one's time over the first's, launch by launch (median [p20, p80]): the host's memory moves the
times by several per cent from one run to the next, the ratio of neighbouring launches less.
The libraries must share the launch ABI (an older build with a shorter pa_mock_config ignores the fields it
lacks).  Shapes: the benchmark's default-set shapes on the mock's side of the ledger.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import mock_harness as h  # noqa: E402

from launcher import mock_api  # noqa: E402
from workloads.shapes import (  # noqa: E402
    ENGINE_RAGGED_BATCH,
    ENGINE_RAGGED_MAX_TOKENS,
    RAGGED_MIN_TOKENS,
    log_uniform_lengths,
)

FLUSH_BYTES = 256 << 20


def set_madvise_hugepage(enabled: bool) -> None:
    """numpy asks Linux for transparent huge pages for large arrays; torch's CPU allocator does not, so the
    benchmark's KV sits on 4 KiB pages.  The hardware prefetchers and the TLB see the two differently (the mock's
    step-25 probes read them at different rates), so by default the inputs here are made the benchmark's way."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray  # type: ignore[no-redef]
    multiarray._set_madvise_hugepage(enabled)  # numpy's own switch (private, stable since numpy 1.20)


BYTES_PER_GB = 1e9


#: id -> (lengths, query heads, kv heads, head_dim, dtype); pages of 128.
SHAPES: dict[str, tuple[list[int], int, int, int, str]] = {
    "b1_4k": ([4096], 32, 8, 128, "fp16"),
    "b8_4k_fp16": ([4096] * 8, 32, 8, 128, "fp16"),
    "b8_4k_bf16": ([4096] * 8, 32, 8, 128, "bf16"),
    "b32_2k": ([2048] * 32, 32, 8, 128, "fp16"),
    "b4_kv32_2k": ([2048] * 4, 32, 32, 128, "fp16"),
    "b16_ragged": (list(log_uniform_lengths(16, RAGGED_MIN_TOKENS, 8192, seed=5)), 32, 8, 128, "fp16"),
    "b64_ragged_bf16": (list(log_uniform_lengths(ENGINE_RAGGED_BATCH, RAGGED_MIN_TOKENS, ENGINE_RAGGED_MAX_TOKENS,
                                                 seed=5)), 32, 8, 128, "bf16"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("libs", nargs="+", help="paths of libpa_mock.so builds")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--isas", default="0",
                        help="SIMD paths each library runs (launcher.mock_api.Isa values, comma-separated; 0: AUTO)")
    parser.add_argument("--hugepages", action="store_true",
                        help="let numpy back the inputs with transparent huge pages (its default on Linux)")
    args = parser.parse_args()
    set_madvise_hugepage(args.hugepages)
    libs = []
    for path in args.libs:
        lib = ctypes.CDLL(str(Path(path).resolve()))
        mock_api.declare(lib)
        libs.append(lib)
    variants = [(lib, int(isa)) for lib in libs for isa in args.isas.split(",")]
    rng = np.random.default_rng(1)
    flush = np.ones(FLUSH_BYTES // 4, dtype=np.float32)
    for sid in args.shapes.split(","):
        lens, hq, hk, d, dtype = SHAPES[sid]
        case = h.make_case(rng, lens, num_heads=hq, num_kv_heads=hk, head_dim=d, block_size=128, dtype=dtype,
                           extra_pages=64)
        buffers = h.workspace(case, poison=False)
        times: list[list[float]] = [[] for _ in variants]
        for _ in range(args.reps):
            for i, (lib, isa) in enumerate(variants):
                flush.sum()
                start = time.perf_counter()
                run = h.launch(lib, case, checked=False, buffers=buffers, isa=isa)
                times[i].append(time.perf_counter() - start)
                assert run.code == 0, run.error.message
        kv_bytes = 2 * sum(lens) * hk * d * 2
        cells = [f"{float(np.median(t)) * 1e3:7.3f} ms {kv_bytes / float(np.median(t)) / BYTES_PER_GB:5.1f} GB/s"
                 for t in times]
        ratios = [np.asarray(t) / np.asarray(times[0]) for t in times[1:]]  # launch by launch, against the first
        cells += [f"x{float(np.median(r)):.3f} [{float(np.percentile(r, 20)):.3f}, {float(np.percentile(r, 80)):.3f}]"
                  for r in ratios]
        print(f"{sid:16s} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
