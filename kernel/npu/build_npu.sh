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

INCS=(-I "$PTO_INC" -I "$HERE" -I "$CANN/include" -I "$CANN/include/experiment/runtime"
      -I "$CANN/include/experiment/msprof" -I "$CANN/compiler/tikcpp/tikcfw" -I "$CANN/compiler/tikcpp/tikcfw/impl"
      -I "$CANN/compiler/tikcpp/tikcfw/interface")
LIBS=(-L "$CANN/lib64" -lruntime -lascendcl)

say "compiling with $BISHENG for dav-c220 (A2/A3 mixed cube+vector kernel)"
"$BISHENG" -fPIC -shared -xcce -O2 -std=c++17 --npu-arch=dav-2201 "${INCS[@]}" \
    "$HERE/pa_npu_host.cpp" -o "$OUT.tmp" "${LIBS[@]}"
mv "$OUT.tmp" "$OUT"
say "built $OUT"
