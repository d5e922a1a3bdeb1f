#!/usr/bin/env bash
# Build the pa-kit NPU kernel for Ascend A2/A3 (dav-c220: one cube + two vector cores per cluster) with
# CANN's bisheng: <build_dir>/lib/libpa_npu.so (default build_dir: build).
#
#   bash kernel/npu/build_npu.sh [build_dir]
#
# Needs a CANN toolkit (ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME, or bisheng on PATH) and the pto-isa
# headers, which fetch_pto_isa.sh fetches (pinned tilelang-ascend wheel) into <build_dir>/third_party/pto-isa;
# PTO_ISA_INCLUDE overrides that (e.g. CANN's own pto-isa).  Exits 0 with "skipped: ..." when no CANN
# compiler is found.  NOT TESTED: no CANN toolkit exists on the project's machines; only the CPU
# simulation of the same source is verified.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
mkdir -p "$BUILD/lib"
BUILD="$(cd "$BUILD" && pwd)"
OUT="$BUILD/lib/libpa_npu.so"

say() { echo "[build_npu] $*"; }

CANN="${ASCEND_HOME_PATH:-${ASCEND_TOOLKIT_HOME:-}}"
BISHENG=""
if [[ -n "$CANN" && -x "$CANN/compiler/ccec_compiler/bin/bisheng" ]]; then
    BISHENG="$CANN/compiler/ccec_compiler/bin/bisheng"
elif command -v bisheng >/dev/null; then
    BISHENG="$(command -v bisheng)"
    [[ -z "$CANN" ]] && CANN="$(cd "$(dirname "$BISHENG")/../../.." && pwd)"
fi
if [[ -z "$BISHENG" ]]; then
    say "skipped: CANN's bisheng not found (set ASCEND_HOME_PATH, e.g. source set_env.sh of the toolkit)"
    exit 0
fi

PTO_INC="${PTO_ISA_INCLUDE:-$BUILD/third_party/pto-isa/include}"
if [[ -z "${PTO_ISA_INCLUDE:-}" ]]; then
    bash "$HERE/fetch_pto_isa.sh" "$BUILD" || true
fi
[[ -f "$PTO_INC/pto/pto-inst.hpp" ]] || { echo "[build_npu] error: no pto-isa headers in $PTO_INC" >&2; exit 1; }

INCS=(-I "$PTO_INC" -I "$HERE" -I "$ROOT/kernel" -I "$CANN/include" -I "$CANN/include/experiment/runtime"
      -I "$CANN/include/experiment/msprof" -I "$CANN/compiler/tikcpp/tikcfw" -I "$CANN/compiler/tikcpp/tikcfw/impl"
      -I "$CANN/compiler/tikcpp/tikcfw/interface")
LIBS=(-L "$CANN/lib64" -lruntime -lascendcl)

# Flags as pto-isa's own A2/A3 kernel builds use them (its kernels/manual/common/flash_atten/CMakeLists.txt):
#   -xcce, -O2 -std=c++17            device C++ at the standard pto-isa's device code is written in
#   --cce-aicore-arch=dav-c220       A2/A3 (Atlas 800T/I A2, A3): one cube + two vector cores per cluster; the
#                                    kernel's cube/vector split uses the __DAV_C220_CUBE__/__DAV_C220_VEC__ this sets
#   -mllvm -cce-aicore-stack-size=0x8000, -cce-aicore-function-stack-size=0x8000
#                                    the per-core stack pto-isa's kernels are built with
#   -mllvm -cce-aicore-record-overflow=true   record arithmetic overflow status (as pto-isa's builds do)
#   -mllvm -cce-aicore-addr-transform         on-chip address transform pto-isa's TASSIGN plans rely on
#   -mllvm -cce-aicore-dcci-insert-for-scalar=false   no automatic cache invalidate before scalar GM reads: the
#                                    kernel reads only the tiling and block table with the scalar unit, which no
#                                    core writes
#   -include stdint.h/stddef.h       pto-isa's headers use the fixed-width types without including them
#   --cce-fatobj-link                link the cube and vector device objects into one fat object
# PA_NPU_DEBUG=1 adds -D_DEBUG --cce-enable-print (pto-isa's run-time asserts print on the device).
CCE_FLAGS=(-xcce -O2 -std=c++17 --cce-aicore-arch=dav-c220
           -mllvm -cce-aicore-stack-size=0x8000 -mllvm -cce-aicore-function-stack-size=0x8000
           -mllvm -cce-aicore-record-overflow=true -mllvm -cce-aicore-addr-transform
           -mllvm -cce-aicore-dcci-insert-for-scalar=false -include stdint.h -include stddef.h)
[[ -n "${PA_NPU_DEBUG:-}" ]] && CCE_FLAGS+=(-D_DEBUG --cce-enable-print)
INCS+=(-I "$CANN/pkg_inc" -I "$CANN/pkg_inc/runtime" -I "$CANN/pkg_inc/profiling")

say "compiling with $BISHENG for dav-c220 (A2/A3 mixed cube+vector kernel)"
"$BISHENG" -fPIC -shared "${CCE_FLAGS[@]}" "${INCS[@]}" "$HERE/pa_npu_host.cpp" -o "$OUT.tmp" --cce-fatobj-link \
    "${LIBS[@]}"
mv "$OUT.tmp" "$OUT"
say "built $OUT"
