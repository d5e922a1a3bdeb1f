"""pto-isa's A2/A3 cost tables, read at run time from the fetched pto-isa headers.

The replay engine prices every recorded instruction with the numbers pto-isa ships for A2/A3 (fitted on
hardware by its authors), so that our model and pto-isa's own cost model start from the same per-instruction
facts and differ only in what pto-isa leaves out (overlap of pipes, cores sharing HBM, burst efficiency).
The headers are fetched into ``build/third_party/pto-isa/include`` by ``bash compile.sh`` and never
committed; this module reads them, it holds no copy of their numbers.

What pto-isa charges, in its own code (``pto/costmodel``), and what this module reproduces:

* **Transfers** (``a2a3/cce_costmodel/cce_costmodel_core.hpp``, ``EstimateBandwidthCycles``): cycles =
  bytes / (bandwidth in GiB/s x 2^30) x frequency, per pipe key (``arch_config.hpp``: ``BandwidthTable``, the
  default ``ArchConfig`` ``kA2A3ArchConfig``, ``kMainFrequencyHz`` 1.85 GHz).  pto-isa truncates to whole
  cycles; we keep the fraction (a 32-byte copy is 0.55 cycles, not 0), since the replay sums thousands.
  ``lightweight_costmodel.hpp`` hands the same table over as bytes per microsecond, about 1074x too slow;
  we follow the GiB/s reading of ``EstimateBandwidthCycles`` (``kBytesPerGb`` = 1024^3).
* **Tile-level vector ops** (``a2a3/formula_costmodel``: ``formula_params.csv`` with columns
  op,dtype,cols,slope,bias, and ``TryEstimateFormulaCycles``): cycles = slope x rows x cols + bias, the row
  looked up by the exact column count (``cols`` is a key, not a multiplier of its own: the slope is per
  element).  TEXP and TSQRT have one row for any dtype and any cols (dtype ``any``, cols ``*``).  pto-isa
  rounds to whole cycles; we do not.
* **Ops or widths missing from the csv**: pto-isa's lightweight model prices them at **0 cycles** with a
  warning (``WarnAndFallbackToZero``).  A zero would make the softmax free, so instead:
  (1) a width between two rows of the same op and dtype is interpolated linearly in cols between the two
  rows' costs at the same rows; (2) a width beyond the widest row (TROWMAX fp32 at 512: the csv stops at
  336) costs, per row, the widest row's per-row cost extended along a least-squares line through the op's
  per-row costs against cols (never less than the widest row's), plus the widest row's bias; a width below
  the narrowest costs as the narrowest;
  (3) an op with no row at all is priced by pto-isa's per-intrinsic model (``cce_costmodel_vector_*.hpp``):
  head + slope x repeats (+ a tail once the pipe drains), a repeat being 256 bytes of one row (8 blocks of
  32 B), so repeats = rows x ceil(cols x element bytes / 256); head and tail are charged once per tile
  instruction, as when pto-isa's queue is empty.  The op-to-intrinsic map is ``PROXY_INTRINSICS``;
  row-expand binaries are a TROWEXPAND plus the element-wise op, as A2/A3 implements them (a broadcast into
  the fixed temporary, then the op).
* **Cube** (``formula_backend_compute.hpp`` ``TryEstimateMadCycles``, and ``cce_costmodel_cube.hpp`` ``mad``):
  cycles = 6 + c x ceil(m/16) x ceil(k / (32 / element bytes)) x ceil(n/16), c = 2 for fp32 operands, 1 for
  fp16; bf16 is 2 bytes and costs as fp16 (the cce path uses the element size only).

bf16 vector ops have no rows in the csv; they are priced as fp16 (same width in bytes).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PTO_INCLUDE = REPO_ROOT / "build" / "third_party" / "pto-isa" / "include"

ARCH_CONFIG = Path("pto/costmodel/arch_config.hpp")
FORMULA_CSV = Path("pto/costmodel/a2a3/formula_costmodel/formula_params.csv")
FORMULA_COMPUTE = Path("pto/costmodel/a2a3/formula_costmodel/formula_backend_compute.hpp")
CCE_CORE = Path("pto/costmodel/a2a3/cce_costmodel/cce_costmodel_core.hpp")
CCE_VECTOR_GLOB = "pto/costmodel/a2a3/cce_costmodel/cce_costmodel_vector_*.hpp"

#: Bytes of one vector repeat on A2/A3: 8 blocks of 32 bytes.
REPEAT_BYTES = 256
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int32": 4, "int16": 2, "int8": 1}
#: dtypes the csv has no rows for, priced as the csv dtype of the same width.
CSV_DTYPE = {"fp32": "fp32", "fp16": "fp16", "bf16": "fp16"}
#: Tile ops without a csv row, priced by pto-isa's per-intrinsic model (intrinsic names as in its headers).
PROXY_INTRINSICS = {
    "TADD": "vadd", "TMAX": "vmax", "TMIN": "vmin", "TDIV": "vdiv", "TABS": "vabs", "TLOG": "vln",
    "TRSQRT": "vrsqrt", "TRELU": "vrelu", "TMAXS": "vmaxs", "TSUBS": "vadds", "TEXPANDS": "vector_dup",
    "TCVT": "vconv", "TSEL": "vsel", "TCOPY": "vcopy",
}
#: Row-expand binaries: the broadcast (TROWEXPAND) then the element-wise op.
ROW_EXPAND_BINARIES = {"TROWEXPANDSUB": "TSUB", "TROWEXPANDMUL": "TMUL", "TROWEXPANDDIV": "TDIV",
                       "TROWEXPANDADD": "TADD"}
#: pto-isa's temporary conversion model (``_EstimateVconvCycles``): head, slope, tail; read from the header.
VCONV = "vconv"


@dataclass(frozen=True)
class FormulaRow:
    """One csv row: cycles = slope x rows x cols + bias for tiles of exactly ``cols`` columns (0 = any)."""

    cols: int
    slope: float
    bias: float

    def cycles(self, rows: int, cols: int) -> float:
        return self.slope * rows * cols + self.bias


@dataclass(frozen=True)
class IntrinsicCost:
    """pto-isa's per-intrinsic charge: ``head`` when the pipe is idle, ``slope`` per repeat, ``tail`` at drain."""

    head: int
    slope: int
    tail: int

    def cycles(self, repeats: int) -> float:
        return float(self.head + self.slope * repeats + self.tail)


@dataclass(frozen=True)
class MadModel:
    """The cube's ``mad``: head + per-repeat cycles x fractal repeats (16 x k-fractal x 16)."""

    head: int
    m_tile: int
    n_tile: int
    k_fractal_bytes: int


@dataclass(frozen=True)
class CostTables:
    """Cycle costs of A2/A3 instructions as pto-isa prices them (see the module docstring for each rule)."""

    frequency_hz: float
    bandwidth_bytes_per_s: Mapping[str, float]
    formula: Mapping[tuple[str, str], tuple[FormulaRow, ...]] = field(repr=False)
    intrinsics: Mapping[str, IntrinsicCost] = field(repr=False)
    mad: MadModel
    source: Path

    def vector_cycles(self, op: str, dtype: str, rows: int, cols: int) -> float:
        """Cycles of one tile-level vector instruction on a ``rows x cols`` tile of ``dtype``."""
        if rows <= 0 or cols <= 0:
            return 0.0
        op = op.upper()
        if op in ROW_EXPAND_BINARIES:
            return (self.vector_cycles("TROWEXPAND", dtype, rows, cols)
                    + self.vector_cycles(ROW_EXPAND_BINARIES[op], dtype, rows, cols))
        cost = self._formula_cycles(op, dtype, rows, cols)
        if cost is not None:
            return cost
        intrinsic = PROXY_INTRINSICS.get(op)
        if intrinsic is None or intrinsic not in self.intrinsics:
            raise KeyError(f"no cost for vector op {op!r} ({dtype}): not in {FORMULA_CSV} and no intrinsic "
                           f"proxy in timing.costs.PROXY_INTRINSICS")
        repeats = rows * math.ceil(cols * _element_bytes(dtype) / REPEAT_BYTES)
        return self.intrinsics[intrinsic].cycles(repeats)

    def matmul_cycles(self, m: int, k: int, n: int, dtype: str) -> float:
        """Cycles of one cube ``mad`` of (m x k) by (k x n) with operands of ``dtype``."""
        if m <= 0 or k <= 0 or n <= 0:
            return 0.0
        size = _element_bytes(dtype)
        k_tile = self.mad.k_fractal_bytes // size
        per_repeat = 2 if dtype == "fp32" else 1
        repeats = math.ceil(m / self.mad.m_tile) * math.ceil(k / k_tile) * math.ceil(n / self.mad.n_tile)
        return float(self.mad.head + per_repeat * repeats)

    def transfer_cycles(self, pipe_key: str, nbytes: int) -> float:
        """Cycles to move ``nbytes`` on ``pipe_key`` at pto-isa's bandwidth (no burst or contention effects)."""
        if pipe_key not in self.bandwidth_bytes_per_s:
            raise KeyError(f"unknown pipe key {pipe_key!r}; known: {sorted(self.bandwidth_bytes_per_s)}")
        bandwidth = self.bandwidth_bytes_per_s[pipe_key]
        if bandwidth <= 0.0:
            raise ValueError(f"pto-isa gives pipe {pipe_key} no bandwidth")
        return nbytes / bandwidth * self.frequency_hz if nbytes > 0 else 0.0

    def _formula_cycles(self, op: str, dtype: str, rows: int, cols: int) -> float | None:
        """The csv rule with our interpolation for missing widths; None when the op has no row at all."""
        table = self.formula.get((op, CSV_DTYPE.get(dtype, dtype))) or self.formula.get((op, "any"))
        if not table:
            return None
        if table[0].cols == 0:  # cols "*": one row for every width
            return table[0].cycles(rows, cols)
        for row in table:
            if row.cols == cols:
                return row.cycles(rows, cols)
        if cols < table[0].cols:
            return table[0].cycles(rows, cols)
        if cols > table[-1].cols:
            return rows * _per_row_beyond(table, cols) + table[-1].bias
        upper = next(i for i, row in enumerate(table) if row.cols > cols)
        lo, hi = table[upper - 1], table[upper]
        weight = (cols - lo.cols) / (hi.cols - lo.cols)
        return (1 - weight) * lo.cycles(rows, lo.cols) + weight * hi.cycles(rows, hi.cols)


def _per_row_beyond(table: tuple[FormulaRow, ...], cols: int) -> float:
    """Cycles per row at a width past the widest csv row: the table's own trend, never below its widest row.

    Per row, the csv's cost (slope x cols) grows slowly with width (TROWMAX fp32: 7 cycles at 32 columns, 14 at
    336; TROWEXPAND: about 14 at every width), so scaling the widest row's per-element slope would overprice a
    512-column TROWEXPAND fourfold.  A least-squares line through (cols, slope x cols) follows the trend.
    """
    xs = [float(row.cols) for row in table]
    ys = [row.slope * row.cols for row in table]
    widest = ys[-1]
    if len(xs) < 2:
        return widest * cols / xs[-1]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    gradient = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return max(widest, widest + gradient * (cols - xs[-1]))


def _element_bytes(dtype: str) -> int:
    if dtype not in ELEMENT_BYTES:
        raise KeyError(f"unknown dtype {dtype!r}; known: {sorted(ELEMENT_BYTES)}")
    return ELEMENT_BYTES[dtype]


def _read(include: Path, relative: Path) -> str:
    path = include / relative
    if not path.is_file():
        raise FileNotFoundError(f"pto-isa cost-model file {path} not found; fetch the pinned pto-isa headers "
                                f"with `bash compile.sh` (they are never committed)")
    return path.read_text(encoding="utf-8")


def _parse_error(relative: Path, what: str) -> ValueError:
    return ValueError(f"{relative}: could not find {what}; pto-isa's cost-model header changed, update "
                      f"timing/costs.py")


def parse_arch_config(text: str) -> tuple[float, dict[str, float]]:
    """(frequency in Hz, bandwidth in bytes/s per pipe key) of pto-isa's default A2/A3 ArchConfig."""
    freq = re.search(r"kMainFrequencyHz\s*=\s*([0-9.eE+]+)L?\s*;", text)
    gib = re.search(r"kBytesPerGb\s*=\s*1024\.0L?\s*\*\s*1024\.0L?\s*\*\s*1024\.0L?\s*;", text)
    fields = re.search(r"struct BandwidthTable\s*\{(.*?)constexpr", text, re.S)
    default = re.search(r"GetDefaultArchConfig\(\)\s*\{\s*return\s+(\w+)\s*;", text)
    if not (freq and gib and fields and default):
        raise _parse_error(ARCH_CONFIG, "the frequency, the GiB unit, BandwidthTable or GetDefaultArchConfig")
    names = re.findall(r"double\s+(\w+)\s*=\s*0\.0\s*;", fields.group(1))
    init = re.search(rf"ArchConfig\s+{default.group(1)}\s*\{{(.*?)\}};", text, re.S)
    if init is None:
        raise _parse_error(ARCH_CONFIG, f"the initialiser of {default.group(1)}")
    inner = re.search(r"\{([^{}]*)\}", init.group(1))
    if inner is None:
        raise _parse_error(ARCH_CONFIG, "the bandwidth list of the default ArchConfig")
    values = [float(v) for v in re.findall(r"[0-9]+(?:\.[0-9]*)?", inner.group(1))]
    if len(values) != len(names) or not names:
        raise _parse_error(ARCH_CONFIG, f"{len(names)} bandwidths (found {len(values)})")
    gib_bytes = 1024.0 ** 3
    return float(freq.group(1)), {name: value * gib_bytes for name, value in zip(names, values, strict=True)}


def parse_formula_csv(text: str) -> dict[tuple[str, str], tuple[FormulaRow, ...]]:
    """Rows of ``formula_params.csv`` per (op, dtype), sorted by cols; cols ``*`` becomes 0."""
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames != ["op", "dtype", "cols", "slope", "bias"]:
        raise _parse_error(FORMULA_CSV, f"the header op,dtype,cols,slope,bias (got {reader.fieldnames})")
    grouped: dict[tuple[str, str], list[FormulaRow]] = {}
    for row in reader:
        cols = 0 if row["cols"].strip() == "*" else int(row["cols"])
        key = (row["op"].strip(), row["dtype"].strip().lower())
        grouped.setdefault(key, []).append(FormulaRow(cols, float(row["slope"]), float(row["bias"])))
    return {key: tuple(sorted(rows, key=lambda r: r.cols)) for key, rows in grouped.items()}


def parse_intrinsics(texts: list[str], core_text: str) -> dict[str, IntrinsicCost]:
    """Per-intrinsic (head, slope, tail) from the cce vector headers; defaults from ``EstimateLinearCycles``."""
    signature = re.search(r"EstimateLinearCycles\(uint64_t repeat,\s*uint64_t head = (\d+),\s*uint64_t slope = "
                          r"(\d+),\s*uint64_t tail = (\d+)\)", core_text)
    vconv = re.search(r"_EstimateVconvCycles\(uint64_t repeat\)\s*\{\s*return EstimateLinearCycles\(repeat,\s*"
                      r"(\d+),\s*(\d+),\s*(\d+)\)", core_text)
    if signature is None or vconv is None:
        raise _parse_error(CCE_CORE, "EstimateLinearCycles' defaults or _EstimateVconvCycles")
    default = tuple(int(v) for v in signature.groups())
    costs = {VCONV: IntrinsicCost(*(int(v) for v in vconv.groups()))}
    body = re.compile(r"inline void (\w+)\([^)]*\)\s*\{\s*const uint64_t cycles = EstimateLinearCycles\(repeat"
                      r"((?:,\s*\d+)*)\)", re.S)
    for text in texts:
        for name, args in body.findall(text):
            given = [int(v) for v in re.findall(r"\d+", args)]
            costs[name] = IntrinsicCost(*(given + list(default[len(given):])))
    return costs


def parse_mad(text: str) -> MadModel:
    """The ``mad`` constants of ``TryEstimateMadCycles`` (head, m and n tiles, k fractal bytes)."""
    values = {}
    for name in ("kHeadCycles", "kMTile", "kNTile", "kKFractalBytes"):
        found = re.search(rf"constexpr uint64_t {name}\s*=\s*(\d+)\s*;", text)
        if found is None:
            raise _parse_error(FORMULA_COMPUTE, name)
        values[name] = int(found.group(1))
    return MadModel(values["kHeadCycles"], values["kMTile"], values["kNTile"], values["kKFractalBytes"])


def load_cost_tables(pto_include: Path | None = None) -> CostTables:
    """Read pto-isa's A2/A3 cost tables from ``pto_include`` (default ``build/third_party/pto-isa/include``)."""
    include = Path(pto_include) if pto_include is not None else DEFAULT_PTO_INCLUDE
    if not include.is_dir():
        raise FileNotFoundError(f"pto-isa headers not found at {include}; fetch them with `bash compile.sh` "
                                f"(they are never committed)")
    frequency, bandwidth = parse_arch_config(_read(include, ARCH_CONFIG))
    formula = parse_formula_csv(_read(include, FORMULA_CSV))
    vector_headers = sorted(include.glob(CCE_VECTOR_GLOB))
    intrinsics = parse_intrinsics([p.read_text(encoding="utf-8") for p in vector_headers],
                                  _read(include, CCE_CORE))
    mad = parse_mad(_read(include, FORMULA_COMPUTE))
    return CostTables(frequency_hz=frequency, bandwidth_bytes_per_s=MappingProxyType(bandwidth),
                      formula=MappingProxyType(formula), intrinsics=MappingProxyType(intrinsics), mad=mad,
                      source=include)
