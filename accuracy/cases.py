"""The accuracy case table (see ``test_pa_accuracy.py``); tolerances are per case, :mod:`accuracy.reference`."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch

from tiling import abi

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

#: Entries written past each sequence's last page: never read by the kernel, rejected if it did.
JUNK_IDS = (-1, 2**31 - 1, -(2**31), 1 << 30)


@dataclass(frozen=True)
class Case:
    """One accuracy case.  ``spare_pages`` more pages than needed exist in the cache (shuffled ids);
    ``shared_pool`` pages are drawn with repetition from a pool of that size instead (big batch x long
    context in little memory)."""

    name: str
    lens: tuple[int, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str = "fp16"
    strategy: str = "auto"
    spare_pages: int = 7
    extra_columns: int = 3
    shared_pool: int = 0
    core_count: int | None = None
    slow: bool = False

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    @property
    def mla(self) -> bool:
        """An absorbed-MLA case: the latent width as head_dim (one KV head, rope parts beside q and the cache)."""
        return self.head_dim == abi.MLA_LATENT_DIM

    @property
    def ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    def describe(self) -> str:
        return (f"b{len(self.lens)} h{self.num_heads}/{self.num_kv_heads} d{self.head_dim} bs{self.block_size} "
                f"{self.dtype} max_kv {max(self.lens)}")


def _edge(bs: int, *more: int) -> tuple[int, ...]:
    """Lengths at the page edges (1, bs-1, bs+1, empty) plus ``more``."""
    return (1, bs - 1, bs + 1, 0, *more)


# Pairwise coverage: every ratio (1..64 and MQA), head_dim, block_size, dtype and strategy appears, each
# value with several partners; test_case_table_covers_the_required_values keeps it that way.
CASES: tuple[Case, ...] = (
    Case("mha_d128_bs128", _edge(128, 300), 8, 8, 128, 128, "fp16"),
    Case("gqa2_d64_bs16_splitkv", _edge(16, 100, 1000), 16, 8, 64, 16, "bf16", "split_kv"),
    Case("gqa4_d96_bs32_bn", _edge(32, 500), 16, 4, 96, 32, "fp16", "bn"),
    Case("gqa5_d128_bs64", _edge(64, 1000), 10, 2, 128, 64, "bf16"),
    Case("gqa8_d256_bs128_splitkv", _edge(128, 2000), 32, 4, 256, 128, "fp16", "split_kv"),
    Case("gqa16_d64_bs256_bn", _edge(256, 3000), 32, 2, 64, 256, "bf16", "bn"),
    Case("gqa32_d128_bs512", _edge(512, 2500), 64, 2, 128, 512, "fp16"),
    Case("gqa64_d96_bs16_splitkv", _edge(16, 200), 128, 2, 96, 16, "bf16", "split_kv"),
    Case("mqa_d256_bs32", _edge(32, 777), 8, 1, 256, 32, "bf16"),
    Case("mqa64_d64_bs512_splitkv", _edge(512, 1500), 64, 1, 64, 512, "fp16", "split_kv"),
    Case("mha_d96_bs256_splitkv", _edge(256, 900), 4, 4, 96, 256, "bf16", "split_kv"),
    Case("gqa2_d256_bs512_bn", _edge(512, 1100), 4, 2, 256, 512, "fp16", "bn"),
    Case("gqa4_d256_bs64", _edge(64, 640), 8, 2, 256, 64, "bf16"),
    Case("gqa8_d64_bs32_bn", _edge(32, 2049), 32, 4, 64, 32, "bf16", "bn"),
    Case("gqa16_d96_bs128_splitkv", _edge(128, 1700), 16, 1, 96, 128, "fp16", "split_kv"),
    Case("gqa32_d256_bs16", _edge(16, 333), 32, 1, 256, 16, "bf16"),
    Case("gqa5_d64_bs512_splitkv", _edge(512, 1025), 20, 4, 64, 512, "bf16", "split_kv"),
    Case("gqa64_d128_bs64_bn", _edge(64, 700), 64, 1, 128, 64, "fp16", "bn"),
    Case("mha_d64_bs16_many_seqs", tuple(range(0, 80, 3)), 4, 4, 64, 16, "fp16", core_count=7),
    Case("single_token_batch", (1,) * 40, 16, 2, 128, 128, "bf16"),
    Case("all_empty", (0, 0, 0), 8, 2, 128, 64, "fp16"),
    Case("all_empty_splitkv", (0, 0), 8, 2, 64, 16, "bf16", "split_kv"),
    Case("long16k_splitkv", (16_390, 3, 0), 8, 1, 128, 128, "fp16"),
    Case("long16k_bn_bf16", (16_400, 16_383), 8, 2, 64, 64, "bf16", "bn"),
    # Long-sequence split-KV just under ATB's batch guard: o_core must hold B x Hq x kvCN x D.
    Case("splitkv_guard_b16_kv8k", tuple(8192 - 37 * i for i in range(16)), 32, 8, 128, 128, "fp16",
         shared_pool=96),
    # The upstream o_core overflow shape (b32 h32/8 kv 8192): ATB's batch guard makes it BN here.
    Case("upstream_overflow_b32_kv8k", tuple(8192 - 5 * i for i in range(32)), 32, 8, 128, 128, "fp16",
         shared_pool=96),
    Case("upstream_overflow_b256_mqa", tuple(8192 - i for i in range(256)), 16, 1, 128, 128, "bf16",
         shared_pool=96),
    Case("long32k_splitkv_d256", (32_768, 20_001), 16, 2, 256, 128, "bf16", "split_kv"),
    Case("long128k_mqa", (131_072, 65_537, 5), 32, 1, 128, 128, "fp16", slow=True),
)


#: DeepSeek-V3's softmax scale: 1/sqrt(qk_nope + qk_rope = 192) x YaRN's mscale(40, 1.0)^2.
DEEPSEEK_V3_SCALE = 192**-0.5 * (0.1 * math.log(40) + 1) ** 2

# Absorbed MLA (latent 512, rope 64, one KV head): DeepSeek-V3 at TP 1/2/4/8 (128/64/32/16 heads), the block sizes
# engines use (64, 128), both dtypes and every strategy, page-edge and empty rows.  Run by the backends whose
# kernel executes MLA (the mock today); the others report them skipped.
MLA_CASES: tuple[Case, ...] = (
    Case("mla_h128_bs128", _edge(128, 1000), 128, 1, 512, 128, "bf16"),
    Case("mla_h64_bs64_bn", _edge(64, 700), 64, 1, 512, 64, "fp16", "bn"),
    Case("mla_h32_bs128_splitkv", _edge(128, 3000), 32, 1, 512, 128, "fp16", "split_kv"),
    Case("mla_h16_bs64_long8k", (8192, 5000, 0), 16, 1, 512, 64, "bf16"),
)
