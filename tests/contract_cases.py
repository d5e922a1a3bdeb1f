"""The negative-control set of the kernel contract: corrupted launches every library must refuse alike.

Each case starts from a valid plan (the planner's tiling, exact buffers) and breaks one thing: a tiling word,
a workspace size, the gather map, an offset, a block id, a pointer or the binding.  ``tests/test_contract.py``
runs the whole set on the mock and on the simulation, each in a child process (this file run as a script
prints every case's error record as JSON), and requires both libraries to report the same code, buffer and
coordinates.  Cases are built from fixed seeds, so parent and children see the same bytes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import mock_harness as h

from tiling import abi

Slot = abi.ArgSlot
Word = abi.TilingWord
Field = abi.BatchField
Err = abi.ErrorCode
#: Logical cores of each strategy's plan: few, so that the cases that do run cores stay quick on sim, and
#: enough for split-KV's batch guard (batch <= 0.8 x cores) to allow a split.
CORES = {"bn": 4, "split_kv": 8}


@dataclass(frozen=True)
class Corruption:
    """One broken launch: what to break (``apply``) and the record every library must give."""

    strategy: str
    apply: Callable[[h.Case], dict[str, Any]]
    code: Err
    slot: Slot | None
    #: Record fields that must hold these values (beyond code and slot).
    expect: dict[str, Callable[[h.Case], int]] = field(default_factory=dict)


def make_case(strategy: str, seed: int) -> h.Case:
    """Four ragged sequences (one empty), GQA, small pages: every tiling field is exercised."""
    rng = np.random.default_rng(seed)
    return h.make_case(rng, [300, 40, 0, 129], num_heads=8, num_kv_heads=2, head_dim=64, block_size=32,
                       strategy=strategy, core_count=CORES[strategy])


def word(value: int | Callable[[np.ndarray], int], index: int) -> Callable[[h.Case], dict[str, Any]]:
    """Set tiling word ``index`` to ``value`` (or ``value(tiling)``)."""
    def apply(case: h.Case) -> dict[str, Any]:
        tiling = case.plan.tiling.copy()
        tiling[index] = value(tiling) if callable(value) else value
        return {"tiling": tiling}
    return apply


def pair(seq: int, hi: Field, lo: Field, value: Callable[[np.ndarray], int]) -> Callable[[h.Case], dict[str, Any]]:
    """Set the (hi, lo) offset pair of sequence ``seq`` to ``value(tiling)``."""
    def apply(case: h.Case) -> dict[str, Any]:
        tiling = case.plan.tiling.copy()
        new = value(tiling)
        tiling[abi.batch_word(seq, hi)], tiling[abi.batch_word(seq, lo)] = new >> 32, new & 0xFFFFFFFF
        return {"tiling": tiling}
    return apply


def get_pair(tiling: np.ndarray, seq: int, hi: Field, lo: Field) -> int:
    return int(tiling[abi.batch_word(seq, hi)]) << 32 | int(tiling[abi.batch_word(seq, lo)])


def short(slot: Slot, by: int = 4) -> Callable[[h.Case], dict[str, Any]]:
    """Bind ``slot`` ``by`` bytes shorter than the plan's buffer."""
    def apply(case: h.Case) -> dict[str, Any]:
        sizes = {Slot.Q: case.q.nbytes, Slot.O: case.q.nbytes, Slot.K: case.k.nbytes, Slot.V: case.v.nbytes,
                 Slot.BLOCK_TABLES: case.block_table.nbytes, Slot.TILING: case.plan.tiling.nbytes,
                 **case.plan.workspace.by_slot()}
        return {"extents": {slot: sizes[slot] - by}}
    return apply


def block_id(seq: int, column: int, value: Callable[[h.Case], int]) -> Callable[[h.Case], dict[str, Any]]:
    def apply(case: h.Case) -> dict[str, Any]:
        case.block_table[seq, column] = value(case)
        return {}
    return apply


def at_word(index: int) -> dict[str, Callable[[h.Case], int]]:
    return {"element_offset": lambda case: index}


def at_slot_word(seq: int, f: Field) -> dict[str, Callable[[h.Case], int]]:
    return {"element_offset": lambda case: abi.batch_word(seq, f), "seq": lambda case: seq}


def tiling_word(index: int, value: int | Callable[[np.ndarray], int], strategy: str = "bn") -> Corruption:
    return Corruption(strategy, word(value, index), Err.BAD_TILING, Slot.TILING, at_word(index))


def offset_moved(seq: int, hi: Field, lo: Field, strategy: str, to_seq: int) -> Corruption:
    """Sequence ``seq`` pointed at ``to_seq``'s rows: inside the buffer, at the wrong place."""
    return Corruption(strategy, pair(seq, hi, lo, lambda t: get_pair(t, to_seq, hi, lo)), Err.BAD_TILING,
                      Slot.TILING, at_slot_word(seq, hi))


CORRUPTIONS: dict[str, Corruption] = {
    # tiling words
    "key_invalid": Corruption("bn", word(2, Word.KEY), Err.BAD_KEY, Slot.TILING, at_word(Word.KEY)),
    "headsize": tiling_word(Word.HEADSIZE, 45),
    "parasize": tiling_word(Word.PARASIZE, 16),
    "decoder_bs_zero": tiling_word(Word.DECODER_BS, 0),
    "batch_word": tiling_word(Word.BATCH, 5),
    "numblocks": tiling_word(Word.NUMBLOCKS, lambda t: int(t[Word.NUMBLOCKS]) + 1),
    "kv_heads_zero": tiling_word(Word.KVHEADS, 0),
    "kv_heads_not_dividing": tiling_word(Word.KVHEADS, 3),
    "head_dim_40": tiling_word(Word.HEADDIM, 40),
    "head_dim_over_max": tiling_word(Word.HEADDIM, abi.MAX_HEAD_DIM + 16),
    "block_size_not_power_of_two": tiling_word(Word.BLOCKSIZE, 48),
    "groupnum": tiling_word(Word.GROUPNUM, 2),
    "dv": tiling_word(Word.HEADDIM_V, 32),
    "tor_nan": tiling_word(Word.TOR, int(np.float32(np.nan).view(np.uint32))),
    "mask_max_len": tiling_word(Word.MASK_MAX_LEN, 128),
    "prefill_bs": tiling_word(Word.PREFILL_BS, 1),
    "scaletype": tiling_word(Word.SCALETYPE, 2),
    "former_tail_sum": tiling_word(Word.FORMER_BATCH, 3),
    "head_split_over_limit": tiling_word(Word.FORMER_HEAD, 9),
    "group_move_straddles": tiling_word(Word.FORMER_GROUP_MOVE, 3),
    "headnum_move": tiling_word(Word.HEADNUM_MOVE, 3),
    "tile_not_page_multiple": tiling_word(Word.BLOCKSIZE_CALC, 16),
    "kvsplit_not_page_multiple": tiling_word(Word.KVSPLIT, lambda t: int(t[Word.KVSPLIT]) + 8, "split_kv"),
    "kvcn_inconsistent": tiling_word(Word.KVCORENUM, lambda t: int(t[Word.KVCORENUM]) + 1, "split_kv"),
    "kvcn_without_split_key": tiling_word(Word.KVCORENUM, 2),
    # ABI v2: the hand-off word and the S/P stage word
    "handoff_without_stage": tiling_word(Word.SCORE_STAGE_ELEMS, 0),
    "handoff_not_piece_multiple": tiling_word(Word.HANDOFF_TOKENS, abi.HANDOFF_ALIGN_TOKENS + 16),
    # a longer hand-off than the stage was sized for: the stage word is named (the planner derives it)
    "handoff_overflows_stage": Corruption("bn", word(lambda t: 2 * int(t[Word.HANDOFF_TOKENS]), Word.HANDOFF_TOKENS),
                                          Err.BAD_TILING, Slot.TILING, at_word(Word.SCORE_STAGE_ELEMS)),
    "stage_below_a_tile": tiling_word(Word.SCORE_STAGE_ELEMS, 16),
    # ABI v3: the decode-feature words, judged alike whatever the library executes
    "q_len_zero": tiling_word(Word.Q_LEN, 0),
    "q_len_over_max": tiling_word(Word.Q_LEN, abi.MAX_Q_LEN + 1),
    "window_negative": tiling_word(Word.WINDOW_LEFT, 0x80000000),
    "sinks_dtype_unknown": tiling_word(Word.SINKS_DTYPE, abi.SINKS_BF16 + 1),
    "lse_word_not_boolean": tiling_word(Word.LSE, 2),
    "q_seqlen_not_q_len": Corruption(
        "bn", word(2, abi.batch_word(1, Field.Q_SEQLEN)), Err.BAD_TILING, Slot.TILING,
        at_slot_word(1, Field.Q_SEQLEN)),
    "sinks_asked_without_pointer": Corruption(
        "bn", word(abi.SINKS_FP32, Word.SINKS_DTYPE), Err.NULL_POINTER, Slot.SINKS),
    "lse_asked_without_pointer": Corruption("split_kv", word(1, Word.LSE), Err.NULL_POINTER, Slot.LSE),
    "context_longer_than_row": Corruption(
        "bn", word(lambda t: int(t[Word.MAXBLOCKS]) * 32 + 1, abi.batch_word(1, Field.KV_SEQLEN)), Err.BAD_TILING,
        Slot.TILING, at_slot_word(1, Field.KV_SEQLEN)),
    # workspace and buffer sizes
    "s_short": Corruption("bn", short(Slot.S), Err.BAD_LAUNCH, Slot.S),
    "p_short": Corruption("bn", short(Slot.P), Err.BAD_LAUNCH, Slot.P),
    "o_tmp_short": Corruption("bn", short(Slot.O_TMP), Err.BAD_LAUNCH, Slot.O_TMP),
    "o_core_short": Corruption("split_kv", short(Slot.O_CORE), Err.OUT_OF_BOUNDS, Slot.O_CORE),
    "l_short": Corruption("split_kv", short(Slot.L), Err.OUT_OF_BOUNDS, Slot.L),
    "q_short": Corruption("bn", short(Slot.Q, 2), Err.OUT_OF_BOUNDS, Slot.Q),
    "o_short": Corruption("bn", short(Slot.O, 2), Err.OUT_OF_BOUNDS, Slot.O),
    "k_short": Corruption("bn", short(Slot.K, 2), Err.OUT_OF_BOUNDS, Slot.K),
    "v_short": Corruption("bn", short(Slot.V, 2), Err.OUT_OF_BOUNDS, Slot.V),
    "block_table_short": Corruption("bn", short(Slot.BLOCK_TABLES), Err.OUT_OF_BOUNDS, Slot.BLOCK_TABLES),
    "tiling_header_short": Corruption(
        "bn", lambda case: {"extents": {Slot.TILING: 4 * (abi.TILING_HEADER_WORDS - 1)}}, Err.OUT_OF_BOUNDS,
        Slot.TILING),
    "tiling_short_of_its_batch": Corruption("bn", short(Slot.TILING), Err.OUT_OF_BOUNDS, Slot.TILING),
    "block_dim_beyond_scratch": Corruption(
        "bn", lambda case: {"block_dim": case.plan.block_dim + 1}, Err.BAD_LAUNCH, Slot.S),
    "block_dim_zero": Corruption("bn", lambda case: {"block_dim": 0}, Err.BAD_LAUNCH, None),
    # gather map
    "gather_duplicate": Corruption(
        "bn", word(lambda t: int(t[abi.batch_word(0, Field.GATHER)]), abi.batch_word(2, Field.GATHER)),
        Err.BAD_GATHER, Slot.TILING, at_slot_word(2, Field.GATHER)),
    "gather_out_of_range": Corruption(
        "bn", word(4, abi.batch_word(2, Field.GATHER)), Err.BAD_GATHER, Slot.TILING, at_slot_word(2, Field.GATHER)),
    # offsets inside their buffer, at another sequence's place
    "q_offset_moved": offset_moved(1, Field.ADDR_Q_HI, Field.ADDR_Q_LO, "bn", 3),
    "q_offset_doubled": Corruption(
        "bn", pair(1, Field.ADDR_Q_HI, Field.ADDR_Q_LO, lambda t: 2 * get_pair(t, 1, Field.ADDR_Q_HI, Field.ADDR_Q_LO)),
        Err.BAD_TILING, Slot.TILING, at_slot_word(1, Field.ADDR_Q_HI)),
    "o_offset_moved": offset_moved(0, Field.ADDR_O_HI, Field.ADDR_O_LO, "bn", 1),
    "l_offset_moved": offset_moved(1, Field.ADDR_L_HI, Field.ADDR_L_LO, "split_kv", 3),
    "o_core_offset_moved": offset_moved(3, Field.ADDR_OFD_HI, Field.ADDR_OFD_LO, "split_kv", 0),
    "block_table_row": Corruption(
        "bn", word(0, abi.batch_word(1, Field.BATCH_IDX)), Err.BAD_TILING, Slot.TILING,
        at_slot_word(1, Field.BATCH_IDX)),
    # block ids (found while cores run)
    "block_id_num_blocks": Corruption(
        "bn", block_id(0, 5, lambda case: case.k.shape[0]), Err.BAD_BLOCK_ID, Slot.BLOCK_TABLES,
        {"element_offset": lambda case: 5, "seq": lambda case: 0}),
    "block_id_negative": Corruption(
        "split_kv", block_id(3, 2, lambda case: -7), Err.BAD_BLOCK_ID, Slot.BLOCK_TABLES,
        {"element_offset": lambda case: 3 * case.block_table.shape[1] + 2, "seq": lambda case: 3}),
    # pointers and binding
    "q_null": Corruption("bn", lambda case: {"pointers": {Slot.Q: None}}, Err.NULL_POINTER, Slot.Q),
    "l_null_in_split_kv": Corruption("split_kv", lambda case: {"pointers": {Slot.L: None}}, Err.NULL_POINTER, Slot.L),
    "mask_not_null": Corruption(
        "bn", lambda case: {"pointers": {Slot.MASK: case.q.ctypes.data}}, Err.NULL_POINTER, Slot.MASK),
    "num_blocks_unbound": Corruption("bn", lambda case: {"num_blocks": 0}, Err.BAD_LAUNCH, Slot.K),
}

#: Record fields compared between libraries.  Errors found while cores run are compared without the core,
#: head and split (each library schedules its cores its own way) and without the extent.
LAUNCH_FIELDS = ("code", "arg_slot", "element_offset", "extent_elems", "core", "seq", "head", "split")
RUNTIME_FIELDS = ("code", "arg_slot", "element_offset", "seq")


def compared_fields(name: str) -> tuple[str, ...]:
    return RUNTIME_FIELDS if CORRUPTIONS[name].code == Err.BAD_BLOCK_ID else LAUNCH_FIELDS


def run_all(library: Path) -> dict[str, dict[str, Any]]:
    """Every case on ``library``: name -> error record (and the expected values of its checked fields)."""
    from launcher.library import load_library

    handle = load_library(library).handle
    records: dict[str, dict[str, Any]] = {}
    for seed, (name, corruption) in enumerate(sorted(CORRUPTIONS.items())):
        case = make_case(corruption.strategy, seed)
        overrides = corruption.apply(case)
        run = h.launch(handle, case, **overrides)
        e = run.error
        record: dict[str, Any] = {name_: int(getattr(e, name_)) for name_ in LAUNCH_FIELDS}
        record["rc"] = int(run.code)
        record["message"] = e.message.decode(errors="replace")
        record["expect"] = {key: int(value(case)) for key, value in corruption.expect.items()}
        records[name] = record
    return records


if __name__ == "__main__":
    print(json.dumps(run_all(Path(sys.argv[1]))))
