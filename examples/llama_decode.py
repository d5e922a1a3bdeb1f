"""Greedy decoding of a tiny Llama-architecture model whose attention runs through pa-kit.

    pip install -e ".[e2e]"
    python examples/llama_decode.py                      # mock device, bf16, 3 sequences, 32 steps
    python examples/llama_decode.py --backend sim --dtype fp16 --steps 16 --batch-invariant

The model is built from a config with random weights (nothing is downloaded).  Each step plans once
(``runner.update``) and launches once per layer (``runner.run``) on the paged KV cache; at the end the
logits are compared with transformers' own forward pass on the same tokens, in the same dtype and in fp32.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from paged_llama import PagedLlamaDecoder, build_model, decode, random_prompts, reference_logits, tiny_llama_config

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mock", "sim", "npu"), default="mock")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch-invariant", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    config = tiny_llama_config(layers=args.layers)
    model = build_model(config, seed=args.seed, dtype=DTYPES[args.dtype])
    prompts = random_prompts((5, 11, 1), config.vocab_size, seed=args.seed + 1)
    decoder = PagedLlamaDecoder(model, batch=len(prompts), backend=args.backend,
                                batch_invariant=args.batch_invariant)
    start = time.perf_counter()
    streams, logits = decode(decoder, prompts, args.steps)
    elapsed = time.perf_counter() - start
    for seq, (prompt, stream) in enumerate(zip(prompts, streams, strict=True)):
        print(f"sequence {seq}: prompt {prompt}\n            generated {stream[len(prompt):]}")
    exact = reference_logits(build_model(config, seed=args.seed, dtype=torch.float32), streams)
    own = reference_logits(model, streams)
    print(f"{args.steps} steps x {args.layers} layers in {elapsed:.2f} s on {args.backend}; pages used "
          f"{decoder.cache.num_blocks - decoder.cache.allocator.free_pages} of {decoder.cache.num_blocks}")
    print(f"max |logits - fp32 transformers|: pa-kit {(logits - exact).abs().max():.3g}, transformers in "
          f"{args.dtype} {(own - exact).abs().max():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
