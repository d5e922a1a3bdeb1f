"""Python mirror of ``kernel/pa_kernel_abi.h`` (kernel ABI v4).

Every number the host needs to talk to a kernel lives in that header; this module gives each one a name so
that no other file indexes the tiling tensor or the argument list with a bare number.
``tests/test_abi_mirror.py`` parses the header and fails if any value here differs from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

ABI_VERSION = 6


class ArgSlot(IntEnum):
    """Pointer slots of ``call_kernel`` after ``block_dim`` and ``stream`` (header ``PA_ARG_*``)."""

    Q = 0
    K = 1
    V = 2
    BLOCK_TABLES = 3
    MASK = 4
    DEQ_SCALE1 = 5
    DEQ_OFFSET1 = 6
    DEQ_SCALE2 = 7
    DEQ_OFFSET2 = 8
    RAZOR_OFFSET = 9
    SCALE = 10
    LOGN = 11
    SINKS = 12
    O = 13  # noqa: E741 - the contract's name for the output slot
    S = 14
    P = 15
    O_TMP = 16
    LSE = 17
    O_CORE = 18
    L = 19
    Q_ROPE = 20
    K_ROPE = 21
    TILING = 22


NUM_PTR_ARGS = 23

#: Slots a decode launch fills; every other slot is passed as NULL.
USED_SLOTS = (
    ArgSlot.Q, ArgSlot.K, ArgSlot.V, ArgSlot.BLOCK_TABLES, ArgSlot.O,
    ArgSlot.S, ArgSlot.P, ArgSlot.O_TMP, ArgSlot.O_CORE, ArgSlot.L, ArgSlot.TILING,
)


class TilingWord(IntEnum):
    """Header words of the tiling tensor (header ``PA_TW_*``)."""

    BATCH = 0
    NUMHEADS = 1
    HEADDIM = 2
    NUMBLOCKS = 3
    BLOCKSIZE = 4
    MAXBLOCKS = 5
    TOR = 6
    KVHEADS = 7
    FORMER_BATCH = 8
    FORMER_HEAD = 9
    TAIL_BATCH = 10
    TAIL_HEAD = 11
    HEADNUM_MOVE = 12
    MASK_MAX_LEN = 13
    BATCH_STRIDE = 14
    HEAD_STRIDE = 15
    KEY = 16
    HEADSIZE = 17
    PARASIZE = 18
    GROUPNUM = 19
    FORMER_GROUP_MOVE = 20
    TAIL_GROUP_MOVE = 21
    MAX_KVSEQLEN = 22
    KVSPLIT = 23
    KVCORENUM = 24
    BLOCKSIZE_CALC = 25
    TOTAL_BLOCK_NUM = 26
    PREFILL_BS = 27
    DECODER_BS = 28
    HEADDIM_V = 29
    MODCOEF = 30
    DIVCOEF = 31
    QHEADORIGINAL = 32
    COMPRESSHEAD = 33
    QUANTYPE = 34
    DATA_SHAPE_TYPE = 35
    SCALETYPE = 36
    MASK_TYPE_ND = 37
    HEADDIM_K_SPLIT = 38
    HEADDIM_V_SPLIT = 39
    HEADDIM_V_SPLIT_VECTOR_FORMER = 40
    HEADDIM_V_SPLIT_VECTOR_TAIL = 41
    HANDOFF_TOKENS = 42
    SCORE_STAGE_ELEMS = 43
    Q_LEN = 44
    WINDOW_LEFT = 45
    SINKS_DTYPE = 46
    LSE = 47
    ROPE_DIM = 48
    MLA_RESCALE = 49


TILING_HEADER_WORDS = 50

SINKS_NONE = 0
SINKS_FP32 = 1
SINKS_FP16 = 2
SINKS_BF16 = 3
WINDOW_NONE = 0xFFFFFFFF
MAX_Q_LEN = 16
MAX_TASK_ROWS = 128


class Feature(IntEnum):
    """``pa_supported_features()`` bits (header ``PA_FEATURE_*``): what a library executes beyond ABI v2."""

    MULTI_TOKEN = 1
    WINDOW = 2
    SINKS = 4
    LSE = 8
    MLA = 16


FEATURES_ALL = 31

# MLA (ABI v4, header "MLA"): the latent width D, the rope width R, and the query heads one launch takes.
MLA_LATENT_DIM = 512
MLA_ROPE_DIM = 64
MLA_MAX_HEADS = 128
# The MLA task (ABI v5): every q head of a split, at most this many rows (heads x q_len), a hand-off of this many
# tokens, and how the output accumulator is rescaled (word MLA_RESCALE).
MLA_MAX_TASK_ROWS = 128
MLA_HANDOFF_TOKENS = 128
MLA_RESCALE_POW2 = 0
MLA_RESCALE_PLAIN = 1


class BatchField(IntEnum):
    """Fields of one per-sequence slot (header ``PA_BF_*``)."""

    Q_SEQLEN = 0
    KV_SEQLEN = 1
    M_UBD = 2
    BLOCK_SIZE = 3
    ADDR_Q_HI = 4
    ADDR_Q_LO = 5
    ADDR_O_HI = 6
    ADDR_O_LO = 7
    BATCH_IDX = 8
    TOTAL_Q_BLK = 9
    MASK_OFFSET_HI = 10
    ADDR_L_HI = 11
    ADDR_L_LO = 12
    GATHER = 13
    MASK_OFFSET_LO = 14
    ADDR_OFD_HI = 15
    ADDR_OFD_LO = 16


TILING_BATCH_WORDS = 17


def batch_word(slot: int, field: BatchField) -> int:
    """Index in the tiling tensor of ``field`` of per-sequence ``slot``."""
    return TILING_HEADER_WORDS + TILING_BATCH_WORDS * slot + int(field)


def tiling_words(batch: int) -> int:
    """Length in uint32 words of the tiling tensor for ``batch`` sequences."""
    return TILING_HEADER_WORDS + TILING_BATCH_WORDS * batch


class TilingKey(IntEnum):
    """Valid tiling keys (header ``PA_KEY_*``): bf16 bit 0, split-KV bit 4, split-block bit 7."""

    FP16 = 0
    BF16 = 1
    FP16_SPLIT_KV = 16
    BF16_SPLIT_KV = 17
    FP16_SPLIT_BLOCK = 128
    BF16_SPLIT_BLOCK = 129
    FP16_SPLIT_KV_SPLIT_BLOCK = 144
    BF16_SPLIT_KV_SPLIT_BLOCK = 145


KEY_BF16_BIT = 1
KEY_SPLIT_KV_BIT = 16
KEY_SPLIT_BLOCK_BIT = 128
#: Order of the bits of ``pa_supported_keys()``.
KEY_LIST = tuple(TilingKey)
SUPPORTED_KEYS_ATB = 15
SUPPORTED_KEYS_ALL = 255


def make_key(*, bf16: bool, split_kv: bool, split_block: bool) -> TilingKey:
    """The tiling key for a dtype and a split choice."""
    return TilingKey(
        (KEY_BF16_BIT if bf16 else 0)
        | (KEY_SPLIT_KV_BIT if split_kv else 0)
        | (KEY_SPLIT_BLOCK_BIT if split_block else 0)
    )


def keys_from_mask(mask: int) -> frozenset[TilingKey]:
    """Decode a ``pa_supported_keys()`` bit mask into the set of keys it names."""
    return frozenset(key for bit, key in enumerate(KEY_LIST) if mask >> bit & 1)


# Tile rule and per-core scratch geometry.
TILE_ELEMS_LIMIT = 16384
SPLIT_BLOCK_TILE_TOKENS = 128
TILE_ALIGN_TOKENS = 16
S_CORE_STRIDE_ELEMS = 32768
S_HALF_ELEMS = 16384
P_CORE_STRIDE_ELEMS = 65536
P_HALF_ELEMS = 32768
O_TMP_CORE_STRIDE_ELEMS = 65536
O_TMP_HALF_ELEMS = 32768
#: an MLA launch: two task output accumulators of O_TMP_CORE_STRIDE_ELEMS per core (one per task parity)
MLA_O_TMP_CORE_STRIDE_ELEMS = 2 * O_TMP_CORE_STRIDE_ELEMS
DEFAULT_HANDOFF_TOKENS = 512
HANDOFF_ALIGN_TOKENS = 512

# Split limits.
COMBINE_UB_FLOATS = 8192
COMBINE_ROW_ALIGN = 8
HEAD_SPLIT_LIMIT = 32
HEADNUM_MOVE_MAX = 2

# Supported shapes (header "supported shapes"): the planner refuses anything else, the contract checker too.
HEAD_DIM_ALIGN = 16
MAX_HEAD_DIM = 256
MIN_BLOCK_SIZE = 16
MAX_BLOCK_SIZE = 512
MAX_NUM_HEADS = 256
MAX_GROUP = 64
MAX_BATCH = 65535
#: Powers of two in [MIN_BLOCK_SIZE, MAX_BLOCK_SIZE].
SUPPORTED_BLOCK_SIZES = tuple(1 << n for n in range(MIN_BLOCK_SIZE.bit_length() - 1, MAX_BLOCK_SIZE.bit_length()))

#: Pointer arguments by name in slot order (header ``PA_PTR_ARGS``): each ArgSlot's lower-case name.
PTR_ARG_NAMES = tuple(slot.name.lower() for slot in ArgSlot)


def kv_splits(kv_len: int, block_size: int, kv_split: int) -> int:
    """KV splits a sequence of ``kv_len`` tokens runs (header ``pa_kv_splits``; 0 for an empty sequence).

    ``PA_TW_KVCORENUM`` must be this count for the longest sequence (1 when all are empty).
    """
    aligned = -(-kv_len // block_size) * block_size
    return -(-aligned // kv_split)


def kv_first_token(kv_len: int, q_len: int, window_left: int, block_size: int) -> int:
    """The first KV token a sequence reads (header ``pa_kv_first_token``): 0 without a window (-1), else the
    start of the page holding its first query token's window start ``kv_len - q_len - window_left``."""
    if window_left < 0 or kv_len <= q_len + window_left:
        return 0
    return (kv_len - q_len - window_left) // block_size * block_size


class ErrorCode(IntEnum):
    """Return codes of ``call_kernel`` (header ``PA_OK`` / ``PA_ERR_*``)."""

    OK = 0
    BAD_KEY = 1
    BAD_TILING = 2
    BAD_GATHER = 3
    OUT_OF_BOUNDS = 4
    BAD_BLOCK_ID = 5
    NULL_POINTER = 6
    BAD_LAUNCH = 7
    INTERNAL = 8
    HAZARD = 9
    NON_FINITE = 10


def scratch_halves(tiling: Sequence[int]) -> tuple[int, int]:
    """Elements of one S and one P stage per core (a core holds two of each): tiling word 43 under ABI v2, or
    v1's fixed halves when it is 0."""
    stage = int(tiling[TilingWord.SCORE_STAGE_ELEMS])
    return (stage, stage) if stage else (S_HALF_ELEMS, P_HALF_ELEMS)
