"""Tensor-parallel decode of the tiny Llama model over ``torch.distributed``: heads sharded, one pa-kit
launch per rank and layer on that rank's heads, the attention output projection all-reduced.

    python examples/llama_tp.py --ranks 2            # gloo on the CPU (mock device); prints rank 0's tokens

Each rank builds the same model from the same seed, keeps the KV cache of its own KV heads only, and runs
:class:`paged_llama.PagedLlamaDecoder` with ``tp_rank``/``tp_size``.  On an NPU the same worker would run with the
``hccl`` backend that torch_npu registers (``tp_worker``'s ``dist_backend``; the command line runs gloo only, and
hccl has not been tried).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from paged_llama import PagedLlamaDecoder, build_model, decode, random_prompts, tiny_llama_config

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def tp_worker(rank: int, world: int, init_file: str, result: str, dtype: str, steps: int, prompt_lens: tuple[int, ...],
              forced: list[list[int]] | None, dist_backend: str = "gloo") -> None:
    """One rank: join the group, decode, and (rank 0) save ``{"streams", "logits"}`` to ``result``."""
    dist.init_process_group(dist_backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)  # ranks share the host's cores
        config = tiny_llama_config()
        model = build_model(config, dtype=DTYPES[dtype])
        prompts = random_prompts(prompt_lens, config.vocab_size, seed=1)
        decoder = PagedLlamaDecoder(model, batch=len(prompts), tp_rank=rank, tp_size=world)
        streams, logits = decode(decoder, prompts, steps, forced=forced)
        if rank == 0:
            torch.save({"streams": streams, "logits": logits}, result)
    finally:
        dist.destroy_process_group()


def run_tensor_parallel(world: int, dtype: str, steps: int, prompt_lens: tuple[int, ...],
                        forced: list[list[int]] | None = None) -> dict[str, object]:
    """Spawn ``world`` ranks on this host (gloo) and return rank 0's streams and logits."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, result = os.path.join(tmp, "init"), os.path.join(tmp, "result.pt")
        mp.spawn(tp_worker, args=(world, init_file, result, dtype, steps, prompt_lens, forced), nprocs=world)
        return torch.load(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    out = run_tensor_parallel(args.ranks, args.dtype, args.steps, (5, 9))
    for seq, stream in enumerate(out["streams"]):  # type: ignore[union-attr]
        print(f"sequence {seq}: {stream}")


if __name__ == "__main__":
    main()
