#!/usr/bin/env bash
# A2/A3 compile check of the NPU kernel, on any machine with clang >= 19 (no CANN needed).
#
#   bash kernel/npu/check_a2a3.sh [build_dir]
#
# pto-isa's CPU implementations accept code the device rejects (column tiles in element-wise ops, ...).  This
# check compiles the kernel source against pto-isa's A2/A3 implementations (-D__COSTMODEL: the real a2a3 headers with the hardware calls stubbed), so their
# static_asserts and type rules run:
#   1. every instantiation: the cube binary (-D__DAV_C220_CUBE__) and the vector binary (-D__DAV_C220_VEC__),
#      each instantiating fp16/bf16 x head-dim classes 64/128/256 through the kernel's dispatch;
#   2. the kernel sources as C++17, the standard of pto-isa's own device builds, both roles (the cost-model
#      headers themselves need C++20, so this pass compiles against the CPU headers with a2a3/pa_cxx17_shim.hpp);
#   3. the two roles as cost-model libraries with -D_DEBUG (build/lib/libpa_a2a3_{cube,vec}.so): tests run
#      a few launches through them so the A2/A3 implementations' run-time asserts (PTO_ASSERT) execute.
# Gaps of the pinned cost-model headers are filled in a2a3/pa_costmodel_shim.hpp, each with its reason.
# Prints "NPU kernel A2/A3 check: passed" or "NPU kernel A2/A3 check: FAILED: <why>" as its last line;
# exits 0 (passed), 1 (failed) or 3 (skipped: no clang or no headers).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
mkdir -p "$BUILD/lib" "$BUILD/obj/a2a3"
BUILD="$(cd "$BUILD" && pwd)"
LOG="$BUILD/obj/a2a3/check.log"

# shellcheck source=pto_toolchain.sh
source "$HERE/pto_toolchain.sh"
rc=0
pto_toolchain "$BUILD" || rc=$?
if [[ $rc -eq 3 ]]; then
    echo "NPU kernel A2/A3 check: skipped ($PTO_SKIP)"
    exit 3
fi
if [[ $rc -ne 0 ]]; then
    echo "NPU kernel A2/A3 check: FAILED: pto-isa headers could not be prepared (exit $rc)"
    exit 1
fi

COMMON=(-include stdint.h -include stddef.h -isystem "$PTO_INC" -I "$HERE" -I "$ROOT/kernel" -Wall -Wno-ignored-attributes
        -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable -Werror)
# -D__NPU_ARCH__=2201 selects A2/A3 (dav-c220) in pto-isa's headers; PTO_COMM_NOT_SUPPORTED leaves out the
# collective-communication headers the cost model cannot compile.
A2A3=(-std=c++23 -D__COSTMODEL -D__NPU_ARCH__=2201 -DPTO_COMM_NOT_SUPPORTED -include "$HERE/a2a3/pa_costmodel_shim.hpp")
CXX17=(-std=c++17 -D__CPU_SIM -D__STDCPP_BFLOAT16_T__=1 -isystem "$HERE/emu/shim" -include "$HERE/a2a3/pa_cxx17_shim.hpp")

STAMP="$BUILD/lib/.libpa_a2a3.stamp"
PTO_SHA256="$(cat "$BUILD/third_party/pto-isa/.sha256")"
if [[ -z "${FORCE:-}" && -f "$STAMP" && "$(cat "$STAMP")" == "$PTO_SHA256 $CXX" ]]; then
    newer="$(find "$HERE" "$ROOT/kernel/pa_kernel_abi.h" -type f -newer "$STAMP" | head -1)"
    if [[ -z "$newer" ]]; then
        echo "NPU kernel A2/A3 check: passed (up to date with kernel/npu)"
        exit 0
    fi
fi
rm -f "$STAMP"

: >"$LOG"
fail() {
    echo "NPU kernel A2/A3 check: FAILED: $1 (first errors below; full log $LOG)"
    grep -m 8 -E ": (fatal )?error:" "$LOG" | sed 's/^/  /'
    exit 1
}
run() { echo "+ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }

echo "[check_a2a3] compiling against pto-isa's A2/A3 implementations with $CXX"
pids=() names=()
for role in CUBE VEC; do
    run "$CXX" "${COMMON[@]}" "${A2A3[@]}" -D__DAV_C220_${role}__ -fsyntax-only "$HERE/pa_kernel.cpp" &
    pids+=($!) names+=("${role,,} role does not compile for A2/A3")
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "${names[$i]}"; done
for role in CUBE VEC; do
    run "$CXX" "${COMMON[@]}" "${CXX17[@]}" -D__DAV_C220_${role}__ -fsyntax-only "$HERE/pa_kernel.cpp" ||
        fail "kernel sources are not C++17 (${role,,} role)"
done
if [[ -n "${PA_A2A3_SYNTAX_ONLY:-}" ]]; then  # tests' negative controls: steps 1 and 2 only
    echo "NPU kernel A2/A3 check: passed (syntax only)"
    exit 0
fi
pids=() names=()
for role in CUBE VEC; do
    run "$CXX" "${COMMON[@]}" "${A2A3[@]}" -D_DEBUG -D__DAV_C220_${role}__ -O1 -g0 -fPIC -shared \
        "$HERE/pa_kernel.cpp" -o "$BUILD/lib/libpa_a2a3_${role,,}.so" &
    pids+=($!) names+=("${role,,} role cost-model library (-D_DEBUG) does not build")
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "${names[$i]}"; done
echo "$PTO_SHA256 $CXX" >"$STAMP"
echo "NPU kernel A2/A3 check: passed (cube and vector roles, fp16/bf16 x D 64/128/256, C++17; _DEBUG libraries in build/lib)"
