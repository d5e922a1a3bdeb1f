#!/usr/bin/env bash
# Build the CPU-implementation simulation of the pa-kit NPU kernel: <build_dir>/lib/libpa_sim_cpu.so (default
# build_dir: build).  The oracle of differential tests and the source of the timing model's instruction trace;
# the `sim` backend is the device-path build (kernel/npu/emu/build_emu.sh: libpa_sim.so).
#
#   bash kernel/npu/build_sim.sh [build_dir]
#
# 1. Fetches pto-isa's headers (fetch_pto_isa.sh: tilelang-ascend 0.1.4, sha256-pinned) into
#    <build_dir>/third_party/pto-isa; never committed.  pto-isa is under the CANN Open Software License v2
#    (use with Huawei AI processors): we build and test a kernel for Ascend.
# 2. Installs clang-19 with apt-get when it is missing and apt-get is usable (gcc 12 and clang 14 cannot
#    compile the pto-isa CPU headers).
# 3. Compiles with -D__CPU_SIM.  Idempotent: an up-to-date library is left alone.
# Exits 0 with a "skipped: ..." line when a tool is missing; non-zero only when a compile fails.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" && pwd)"

PTO_SHA256="1afec13f59e18fd9133ae2345a9845d8b58e3f005bd773325664821db5990d03"  # keep equal to fetch_pto_isa.sh
OUT="$BUILD/lib/libpa_sim_cpu.so"

say() { echo "[build_sim] $*"; }
skip() { say "skipped: $*"; exit 0; }

# shellcheck source=pto_toolchain.sh
source "$HERE/pto_toolchain.sh"
rc=0
pto_toolchain "$BUILD" || rc=$?
[[ $rc -eq 3 ]] && skip "$PTO_SKIP"
[[ $rc -ne 0 ]] && exit "$rc"

SOURCES=("$HERE/pa_kernel.cpp" "$HERE/sim/pa_sim_runtime.cpp" "$HERE/sim/pa_sim_hazard.cpp" "$HERE/sim/pa_record.cpp" "$HERE/pa_sim_races.cpp" "$HERE/sim/pa_sim_host.cpp" "$HERE/sim/pa_sim_contract.cpp" "$HERE/sim/pa_sim_layout.cpp")
if [[ -f "$OUT" && -f "$OUT.stamp" && "$(cat "$OUT.stamp")" == "$PTO_SHA256 $CXX" ]]; then
    newer="$(find "$HERE" "$ROOT/kernel/contract" "$ROOT/kernel/pa_kernel_abi.h" "$ROOT/kernel/pa_mock_api.h" -type f -newer "$OUT" | head -1)"
    if [[ -z "$newer" ]]; then
        say "up to date: $OUT"
        exit 0
    fi
fi

# -D__STDCPP_BFLOAT16_T__ with sim/shim/stdfloat: native bf16 in the CPU simulation (see that file).
# No -DNDEBUG: pto-isa's on-chip memory model reports buffer overflows through assert().
FLAGS=(-std=c++23 -O2 -g0 -fPIC -pthread -D__CPU_SIM -D__STDCPP_BFLOAT16_T__=1 -isystem "$HERE/sim/shim"
       -include stdint.h -include stddef.h -isystem "$PTO_INC" -I "$HERE" -Wno-pass-failed
       -Wall -Wno-ignored-attributes -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable
       -Wno-builtin-macro-redefined -Wno-reserved-macro-identifier -Wno-sign-compare)
# PA_SIM_EXTRA_FLAGS: extra compiler flags for experiments, e.g. -O0 -g for a debugger (then always rebuilt).
if [[ -n "${PA_SIM_EXTRA_FLAGS:-}" ]]; then
    read -r -a extra <<< "$PA_SIM_EXTRA_FLAGS"
    FLAGS+=("${extra[@]}")
    rm -f "$OUT.stamp"
fi
OBJ="$BUILD/obj/pa_sim"
mkdir -p "$OBJ" "$BUILD/lib"
say "compiling with $CXX ($(${CXX} --version | head -1))"
pids=()
objs=()
for src in "${SOURCES[@]}"; do
    obj="$OBJ/$(basename "${src%.cpp}").o"
    objs+=("$obj")
    "$CXX" "${FLAGS[@]}" -c "$src" -o "$obj" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if [[ $status -ne 0 ]]; then
    echo "[build_sim] error: compile failed" >&2
    exit 1
fi
"$CXX" -shared -pthread -o "$OUT.tmp" "${objs[@]}"
mv "$OUT.tmp" "$OUT"
echo "$PTO_SHA256 $CXX" > "$OUT.stamp"
say "built $OUT (CPU simulation of the A2/A3 kernel, pto-isa from tilelang-ascend 0.1.4)"
