"""Quick throughput probe of the mock device (the project's benchmark harness is bench_pa_performance.py).

    python kernel/mock/bench_mock.py [--batch 8 --heads 32 --kv-heads 8 --head-dim 128 --context 4096 --block 128]

Prints, per dtype and mode, the best launch time and the KV bytes read per second (K + V pages of every
sequence, each read once), next to this host's read bandwidth (pa_mock_read_bandwidth_gbs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import mock_harness as h  # noqa: E402

BYTES_PER_GB = 1e9
BANDWIDTH_PROBE_BYTES = 1 << 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--isa", type=int, default=0,
                        help="0 auto, 1 portable, 2 avx2, 3 avx512, 4 avx512bf16, 5 amx (launcher.mock_api.Isa)")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--dtypes", default="fp16,bf16")
    args = parser.parse_args()
    lib = h.load_mock()
    rng = np.random.default_rng(0)
    bandwidth = lib.pa_mock_read_bandwidth_gbs(BANDWIDTH_PROBE_BYTES, args.threads, 5)
    print(f"host read bandwidth: {bandwidth:.1f} GB/s (threads={args.threads or 'all'})")
    for dtype in args.dtypes.split(","):
        case = h.make_case(rng, [args.context] * args.batch, num_heads=args.heads, num_kv_heads=args.kv_heads,
                           head_dim=args.head_dim, block_size=args.block, dtype=dtype, strategy=args.strategy)
        kv_bytes = 2 * args.batch * args.context * args.kv_heads * args.head_dim * 2
        buffers = h.workspace(case)
        for checked in (False, True):
            times = []
            for i in range(args.iters + 2):
                start = time.perf_counter()
                run = h.launch(lib, case, checked=checked, threads=args.threads, isa=args.isa, buffers=buffers)
                elapsed = time.perf_counter() - start
                assert run.code == 0, run.error.message
                if i >= 2:
                    times.append(elapsed)
            best = min(times)
            print(f"{dtype} {case.plan.strategy} key {int(case.plan.key)} bd {case.plan.block_dim} "
                  f"{'checked  ' if checked else 'unchecked'}: {best * 1e3:8.2f} ms  "
                  f"{kv_bytes / best / BYTES_PER_GB:6.1f} GB/s KV (median {np.median(times) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
