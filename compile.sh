#!/usr/bin/env bash
# Build pa-kit's kernel libraries into build/lib/ and say what was built, skipped or failed, and why.
#
#   bash compile.sh            build what the mock backend needs (mock device, planner helper, run() checks) and
#                              the NPU library where CANN is found, and keep every clang part already built up to
#                              date; on a fresh clone the clang parts are not built (say so, and how) - the
#                              accuracy suite's first result does not wait for them (idempotent: unchanged
#                              sources are not rebuilt)
#   bash compile.sh --all      also build the clang parts (sim backend, emulator, A2/A3 check) on a fresh clone:
#                              what the `sim` tests need; CI builds with --all
#   bash compile.sh --setup    first install what the project needs (torch if no torch imports, then
#                              `pip install -e ".[test,bench]"`), then build; torch comes from
#                              $PA_KIT_TORCH_INDEX_URL when set (the CPU build:
#                              https://download.pytorch.org/whl/cpu), else from pip's own index
#   bash compile.sh --clean    remove build/
#   bash compile.sh --force    rebuild even when up to date
#
# Libraries:
#   libpa_mock.so  the mock NPU device (kernel/mock and the contract checker kernel/contract, gcc, portable
#                  flags; SIMD paths are chosen at run time)
#   libpa_sim.so   the `sim` backend: our NPU kernel's A2/A3 code path (pto-isa's A2/A3 implementations) on the
#                  intrinsic emulator, clusters scheduled from a seed (kernel/npu/devsim, built by build_emu.sh)
#   libpa_npu.so   our NPU kernel (kernel/npu/build_npu.sh, only where CANN's bisheng/ccec is installed)
#   libpa_plan.so  the planner's balancer placement in C (tiling/csrc/pa_balance.c; optional, numpy fallback)
#   pa_run_check*.so  PagedAttentionRunner.run()'s per-call checks in C, against the installed torch
#                  (launcher/run_check/); without it run() keeps its Python checks (slower, same answers)
#   build/aarch64/  on x86-64 hosts with Debian's aarch64 cross compiler (installed when root): the mock, its
#                  launch replayer and the planner's helper for aarch64, which tests run under qemu-user
#                  (kernel/mock/cross/build_aarch64.sh; the run() check is compile-checked only)
#   libpa_emu.so  the A2/A3 intrinsic emulator (kernel/npu/emu/build_emu.sh: also the kernel compiled against it,
#                 the coverage list, the differential harnesses against pto-isa's CPU implementations (the only
#                 use of those: the emulator's oracle), and libpa_sim.so)
# Check:
#   NPU kernel A2/A3 check   the same kernel against pto-isa's A2/A3 implementations (kernel/npu/check_a2a3.sh);
#                            a failure fails compile.sh (and CI); libpa_a2a3_{cube,vec}.so are its _DEBUG builds
# The clang parts are libpa_emu.so with libpa_sim.so, and the A2/A3 check.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD_DIR="$ROOT/build"
LIB_DIR="$BUILD_DIR/lib"
CC="${CC:-gcc}"
TORCH_PIN="torch==2.13.0"
# Portable: the x86-64 (or aarch64) baseline only.  AVX2/AVX-512 code carries per-file target pragmas and
# is dispatched at run time.  -ffp-contract=off keeps every SIMD path bitwise equal to the portable one.
MOCK_CFLAGS=(-O3 -fPIC -shared -std=gnu11 -Wall -Wextra -ffp-contract=off -fno-math-errno
             -fvisibility=hidden -pthread)
MOCK_LIBS=(-lm)
PLAN_CFLAGS=(-O2 -fPIC -shared -std=c11 -Wall -Wextra -Werror -ffp-contract=off)

SUMMARY=()
STATUS=0

say() { printf 'compile.sh: %s\n' "$*"; }
host_arch() { uname -m; }
record() { SUMMARY+=("$1"); say "$1"; }

python_bin() {
    if command -v python >/dev/null 2>&1; then echo python; else echo python3; fi
}

# Where --setup installs torch from: an index given here (e.g. https://download.pytorch.org/whl/cpu, the CPU
# build) or, when empty, pip's own index, which on stock PyPI serves Linux x86-64 the CUDA build.
TORCH_INDEX_URL="${PA_KIT_TORCH_INDEX_URL:-}"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

# The torch install --setup runs, said before it runs: on stock PyPI the default is a download of several GB
# that a user on a CPU machine never wants, so the plain way to get the CPU build is printed beside it.
install_torch() {
    local py="$1"
    if [[ -n "$TORCH_INDEX_URL" ]]; then
        say "setup: torch not importable, installing $TORCH_PIN from $TORCH_INDEX_URL (PA_KIT_TORCH_INDEX_URL)"
        "$py" -m pip install --index-url "$TORCH_INDEX_URL" "$TORCH_PIN"
        return
    fi
    say "setup: torch not importable, installing $TORCH_PIN from pip's configured index \
(${PIP_INDEX_URL:-PyPI unless pip.conf or PIP_INDEX_URL names another})"
    say "setup: on stock PyPI the Linux x86-64 wheel of torch is the CUDA build, several GB; for the CPU build, \
stop now (Ctrl-C) and run: PA_KIT_TORCH_INDEX_URL=$TORCH_CPU_INDEX bash compile.sh --setup"
    "$py" -m pip install "$TORCH_PIN"
}

setup() {
    local py
    py="$(python_bin)"
    if TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c "import torch" >/dev/null 2>&1; then
        say "setup: torch $(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c 'import torch; print(torch.__version__)') \
already importable, kept"
    else
        install_torch "$py"
    fi
    say "setup: pip install -e \".[test,bench]\" (bench: matplotlib, for --plot and its test)"
    "$py" -m pip install -e "$ROOT[test,bench]"
}

# A stamp of everything that determines the library: sources, headers, flags and compiler version.
mock_stamp() {
    {
        "$CC" --version | head -n 1
        printf '%s\n' "${MOCK_CFLAGS[@]}" "${MOCK_LIBS[@]}"
        find "$ROOT/kernel/mock" "$ROOT/kernel/contract" "$ROOT/kernel/pa_kernel_abi.h" "$ROOT/kernel/pa_mock_api.h" -type f \
            \( -name '*.c' -o -name '*.h' \) \
            -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sed "s#$ROOT/##"
    } | sha256sum | cut -d' ' -f1
}

build_mock() {
    local out="$LIB_DIR/libpa_mock.so" stamp_file="$LIB_DIR/.libpa_mock.stamp" stamp
    if ! command -v "$CC" >/dev/null 2>&1; then
        record "mock device: FAILED ($CC not found; install gcc)"
        STATUS=1
        return
    fi
    stamp="$(mock_stamp)"
    if [[ -z "${FORCE:-}" && -f "$out" && -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]]; then
        record "mock device: skipped (build/lib/libpa_mock.so is up to date with kernel/mock)"
        return
    fi
    mkdir -p "$LIB_DIR"
    local tmp="$out.tmp.$$"
    if "$CC" "${MOCK_CFLAGS[@]}" -I"$ROOT/kernel" -I"$ROOT/kernel/mock" "$ROOT"/kernel/mock/*.c \
        "$ROOT"/kernel/contract/*.c -o "$tmp" \
        "${MOCK_LIBS[@]}"; then
        mv -f "$tmp" "$out"  # atomic: a process that has the old library mapped keeps a valid file
        echo "$stamp" >"$stamp_file"
        record "mock device: built build/lib/libpa_mock.so ($CC ${MOCK_CFLAGS[*]})"
        if [[ "$(host_arch)" == aarch64 ]]; then
            record "mock device: aarch64 host: the x86 SIMD paths (AVX2, AVX-512, AVX512-BF16, AMX) skipped; \
the NEON and portable paths built"
        fi
    else
        rm -f "$tmp"
        record "mock device: FAILED (gcc error above)"
        STATUS=1
    fi
}

# The planner's compiled helper (tiling/csrc/pa_balance.c): optional, the planner falls back to numpy.
build_plan() {
    local out="$LIB_DIR/libpa_plan.so" src="$ROOT/tiling/csrc/pa_balance.c"
    if ! command -v "$CC" >/dev/null 2>&1; then
        record "planner helper: skipped ($CC not found; the planner uses its numpy form)"
        return
    fi
    if [[ -z "${FORCE:-}" && -f "$out" && "$out" -nt "$src" ]]; then
        record "planner helper: skipped (build/lib/libpa_plan.so is up to date)"
        return
    fi
    mkdir -p "$LIB_DIR"
    if "$CC" "${PLAN_CFLAGS[@]}" "$src" -o "$out.tmp" -lm; then
        mv "$out.tmp" "$out"
        record "planner helper: built build/lib/libpa_plan.so"
    else
        record "planner helper: FAILED (tiling/csrc/pa_balance.c does not compile)"
        STATUS=1
    fi
}

# The host side for aarch64, cross-built on x86-64 for the tests that run it under qemu-user; an aarch64 host
# builds and tests it natively instead.
build_aarch64_cross() {
    local out rc=0
    if [[ "$(host_arch)" != x86_64 ]]; then
        record "aarch64 cross build: skipped (this host is $(host_arch), not x86-64; an aarch64 host tests its own build)"
        return
    fi
    out="$(FORCE="${FORCE:-}" bash "$ROOT/kernel/mock/cross/build_aarch64.sh" "$BUILD_DIR" 2>&1)" || rc=$?
    if [[ $rc -ne 0 && $rc -ne 3 ]]; then
        printf '%s\n' "$out"
        record "aarch64 cross build: FAILED (kernel/mock/cross/build_aarch64.sh exited $rc)"
        STATUS=1
    else
        record "$(printf '%s\n' "$out" | tail -n 1)"
    fi
}

# The A2/A3 intrinsic emulator, the kernel compiled against it, and the differential harnesses.
build_emu() {
    local script="$ROOT/kernel/npu/emu/build_emu.sh" out rc=0
    out="$(FORCE="${FORCE:-}" bash "$script" "$BUILD_DIR" 2>&1)" || rc=$?
    printf '%s\n' "$out"
    if [[ $rc -ne 0 ]]; then
        record "A2/A3 intrinsic emulator: FAILED (kernel/npu/emu/build_emu.sh exited $rc)"
        STATUS=1
    elif printf '%s\n' "$out" | grep -q "skipped"; then
        record "A2/A3 intrinsic emulator: $(printf '%s\n' "$out" | tail -n 1 | sed 's/^\[build_emu\] //')"
    else
        record "A2/A3 intrinsic emulator and device-path sim: built (build/lib/libpa_emu.so, libpa_sim.so, differential harnesses)"
    fi
}

# The A2/A3 compile check (kernel/npu/check_a2a3.sh): the kernel against pto-isa's A2/A3 implementations.
check_a2a3() {
    local script="$ROOT/kernel/npu/check_a2a3.sh" out rc=0
    out="$(FORCE="${FORCE:-}" bash "$script" "$BUILD_DIR" 2>&1)" || rc=$?
    printf '%s\n' "$out" | sed '$d'
    local last
    last="$(printf '%s\n' "$out" | tail -n 1)"
    if [[ $rc -eq 3 ]]; then
        record "$last"
    elif [[ $rc -ne 0 ]]; then
        record "$last"
        printf '%s\n' "$out" | sed -n '/FAILED/,$p' | tail -n +2
        STATUS=1
    else
        record "$last"
    fi
}

build_npu() {
    local compiler=""
    compiler="$(command -v bisheng || command -v ccec || true)"
    if [[ -z "$compiler" ]]; then
        record "NPU kernel: skipped (CANN compiler not found)"
        return
    fi
    local script="$ROOT/kernel/npu/build_npu.sh"
    if [[ ! -f "$script" ]]; then
        record "NPU kernel: skipped (CANN compiler $compiler found, but kernel/npu/build_npu.sh not present)"
        return
    fi
    if bash "$script" "$BUILD_DIR"; then
        record "NPU kernel: kernel/npu/build_npu.sh succeeded ($compiler)"
    else
        record "NPU kernel: FAILED (kernel/npu/build_npu.sh exited $?)"
        STATUS=1
    fi
}

# run()'s checks in C++ against the installed torch (launcher/run_check/build.py decides what is up to date).
build_run_check() {
    local py out rc=0
    py="$(python_bin)"
    out="$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -m launcher.run_check.build "$LIB_DIR" 2>&1)" || rc=$?
    if [[ $rc -ne 0 ]]; then
        printf '%s\n' "$out"
        record "run() checks in C: skipped (the compile failed, above; run() keeps its Python checks)"
    else
        record "$(printf '%s\n' "$out" | tail -n 1)"
    fi
}

# The clang parts (the emulator and libpa_sim.so, the A2/A3 check): with --all, or once any
# of them is in build/lib (then kept up to date: a stale sim library must never be what the tests load).
clang_parts_wanted() {
    [[ -n "${BUILD_ALL:-}" ]] && return 0
    local lib
    for lib in libpa_emu.so libpa_sim.so libpa_a2a3_cube.so libpa_a2a3_vec.so; do
        [[ -f "$LIB_DIR/$lib" ]] && return 0
    done
    return 1
}

build_clang_parts() {
    if ! clang_parts_wanted; then
        record "clang parts (sim backend, emulator, A2/A3 check): not built (fresh build/; the mock needs none of \
them): bash compile.sh --all builds them, and later plain runs keep them up to date"
        return
    fi
    build_emu
    check_a2a3
}

main() {
    local do_setup="" arg
    for arg in "$@"; do
        case "$arg" in
            --setup) do_setup=1 ;;
            --clean)
                rm -rf "$BUILD_DIR"
                say "removed build/"
                return 0
                ;;
            --force) FORCE=1 ;;
            --all) BUILD_ALL=1 ;;
            -h | --help)
                awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
                return 0
                ;;
            *)
                say "unknown option $arg (use --setup, --all, --clean, --force or --help)"
                return 2
                ;;
        esac
    done
    cd "$ROOT"
    if [[ -n "$do_setup" ]]; then
        setup
    fi
    build_mock
    build_plan
    build_run_check
    build_npu
    build_clang_parts
    # the aarch64 cross build (and its apt installs) only where the clang parts are wanted: a fresh plain build
    # stays the mock's fast path
    if clang_parts_wanted; then
        build_aarch64_cross
    else
        record "aarch64 cross build: skipped (built with --all, as CI does, or once the clang parts are present)"
    fi
    say "summary:"
    printf '  %s\n' "${SUMMARY[@]}"
    return "$STATUS"
}

# Sourced (`source compile.sh`), it only defines its functions: tests call setup() with a stand-in python.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
