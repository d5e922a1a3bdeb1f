"""How often the kernel zeroes an L1 operand buffer (kernel/npu/pa_cube_state.hpp, ``L1Box``), counted in the
device's instruction stream on the emulator (``create_cbuf_matrix`` on the cube).

A matmul reads more of a K/V buffer than a short piece writes (K^T's columns past the piece, V's columns past D),
so those bytes must be zero (the mad operand check, tests/test_sim_device_path.py, shows what happens otherwise);
the kernel keeps per buffer what may be non-zero and zeroes a buffer only when a read could reach it.  With every
piece the same shape that is once per buffer and core, whatever the number of pieces: a fill per piece (the rule
this replaced, 8.5x slower on pages of 16 in the timing model) fails these counts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
for path in (ROOT, TESTS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from test_sim_kernel import needs_sim  # noqa: E402

from timing import trace as tr  # noqa: E402

#: (shape arguments, the most fills a cube core may issue): pieces shorter than the K tile on the chunk path and on
#: the head path, D below DCap on both; each core loads many pieces into its two K/V buffers
CASES = {
    "chunk_pages_of_16": (dict(num_heads=8, num_kv_heads=2, head_dim=64, block_size=16), 2),
    "chunk_d96": (dict(num_heads=8, num_kv_heads=2, head_dim=96, block_size=64), 2),
    "head_pages_of_16": (dict(num_heads=64, num_kv_heads=2, head_dim=64, block_size=16), 2),
    "head_d96": (dict(num_heads=64, num_kv_heads=2, head_dim=96, block_size=64), 2),
}
CORES = 4


def cube_fills_and_kv_loads(shape_args: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per cube core of a two-sequence launch: its L1 fills and its K/V loads."""
    from timing.predictions import trace_of
    from workloads.shapes import uniform_shape

    trace = trace_of(uniform_shape(2, 1024, **shape_args), CORES)
    ev = trace.events
    cube = (ev["role"] == 0) & (ev["kind"] == tr.EV_INSTR)
    fills = [i for i, name in enumerate(trace.op_names) if name.startswith("create_cbuf_matrix")]
    fill = cube & np.isin(ev["op"], fills)
    kv = cube & tr.kv_loads(ev)
    cores = int(ev["core"].max()) + 1
    return np.bincount(ev["core"][fill], minlength=cores), np.bincount(ev["core"][kv], minlength=cores)


@needs_sim
@pytest.mark.parametrize("name", CASES)
def test_a_buffer_is_zeroed_once_per_core_not_once_per_piece(name: str) -> None:
    shape_args, most = CASES[name]
    fills, loads = cube_fills_and_kv_loads(shape_args)
    assert loads.max() >= 8 * most, f"{name}: too few pieces per core to tell ({loads.tolist()})"
    assert fills.sum() > 0, f"{name}: the first loads must zero their buffers ({fills.tolist()})"
    assert fills.max() <= most, f"{name}: fills per core {fills.tolist()}, K/V loads {loads.tolist()}"


def p_conversions_and_s_loads(shape: object) -> tuple[np.ndarray, np.ndarray]:
    """Per vector sub-core of a launch: its fp16/bf16 -> fp32 widenings and its loads of S from the scratch."""
    from tiling import abi
    from timing.predictions import trace_of

    trace = trace_of(shape, CORES)  # type: ignore[arg-type]
    ev = trace.events
    vec = (ev["role"] > 0) & (ev["kind"] == tr.EV_INSTR)
    widen = [i for i, name in enumerate(trace.op_names) if name in ("vconv_f162f32", "vconv_bf162f32")]
    loads = [i for i, name in enumerate(trace.op_names) if name == "copy_gm_to_ubuf_align_b32"]
    key = ev["core"] * 3 + ev["role"]
    size = int(key.max()) + 1
    return (np.bincount(key[vec & np.isin(ev["op"], widen)], minlength=size),
            np.bincount(key[vec & np.isin(ev["op"], loads) & (ev["slot"] == int(abi.ArgSlot.S))], minlength=size))


@needs_sim
@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
def test_a_whole_piece_of_p_converts_in_one_instruction(mla: bool) -> None:
    """pto-isa's TCVT issues one vconv per row; a whole piece's rows are contiguous, so the kernel converts them
    as one flat row (``VectorCore::CvtPiece``): one widening of P per S piece a sub-core loads, whatever its rows
    (8 per sub-core here), where a per-row conversion issues 8."""
    from workloads.shapes import mla_shape, uniform_shape

    shape = (mla_shape(2, 1024, num_heads=16) if mla
             else uniform_shape(2, 2048, num_heads=32, num_kv_heads=2, head_dim=128, block_size=128))
    widen, s_loads = p_conversions_and_s_loads(shape)
    assert s_loads.sum() >= 8, s_loads.tolist()
    assert np.array_equal(widen, s_loads), (widen.tolist(), s_loads.tolist())
