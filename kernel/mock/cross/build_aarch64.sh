#!/usr/bin/env bash
# Cross-builds pa-kit's host side for aarch64 (Kunpeng 920 and other Armv8-A Ascend servers) on an x86-64 host,
# so that CI runs the mock's aarch64 build under qemu-user (tests/test_mock_aarch64.py):
#
#   bash kernel/mock/cross/build_aarch64.sh BUILD_DIR
#
#   BUILD_DIR/aarch64/libpa_mock.so     the mock, compile.sh's flags, with its NEON path
#   BUILD_DIR/aarch64/pa_mock_replay    replays a launch file on it (pa_mock_replay.c)
#   BUILD_DIR/aarch64/libpa_plan.so     the planner's helper (tiling/csrc/pa_balance.c)
#   the compiled run() check (launcher/run_check/pa_run_check.cpp): compile-checked only (-fsyntax-only against
#   this host's torch headers): linking it needs an aarch64 torch (libtorch*.so), which an x86 host lacks.
#
# Debian's cross compiler (gcc/g++-aarch64-linux-gnu) and qemu-user are installed with apt-get when missing and
# this runs as root (as kernel/npu/pto_toolchain.sh installs clang-19); PA_CROSS_CC / PA_CROSS_CXX override.
# The last line says what was built; exit 3 with the reason when a tool cannot be had (compile.sh reports a
# skip), 1 when a compile fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/build}" && cd "${1:-$ROOT/build}" && pwd)/aarch64"
# shellcheck source=/dev/null
source "$ROOT/compile.sh" # MOCK_CFLAGS, MOCK_LIBS, PLAN_CFLAGS: one set of flags for both CPUs
CROSS_CC="${PA_CROSS_CC:-aarch64-linux-gnu-gcc}"
CROSS_CXX="${PA_CROSS_CXX:-aarch64-linux-gnu-g++}"
PACKAGES=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user)

have_tools() { command -v "$CROSS_CC" >/dev/null && command -v "$CROSS_CXX" >/dev/null && command -v qemu-aarch64 >/dev/null; }

if ! have_tools && command -v apt-get >/dev/null && [[ "$(id -u)" == "0" ]]; then
    echo "[build_aarch64] installing ${PACKAGES[*]} with apt-get"
    (apt-get install -y -q "${PACKAGES[@]}" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${PACKAGES[@]}" >/dev/null 2>&1; }) || true
fi
if ! have_tools; then
    echo "aarch64 cross build: skipped ($CROSS_CC, $CROSS_CXX or qemu-aarch64 not found and not installable here;" \
        "Debian: apt-get install ${PACKAGES[*]})"
    exit 3
fi

# Up to date when nothing that determines the outputs changed: sources, headers, this script, flags, compilers.
stamp="$({
    "$CROSS_CC" --version | head -n 1
    "$CROSS_CXX" --version | head -n 1
    printf '%s\n' "${MOCK_CFLAGS[@]}" "${MOCK_LIBS[@]}" "${PLAN_CFLAGS[@]}"
    find "$ROOT/kernel/mock" "$ROOT/kernel/contract" "$ROOT/kernel/pa_kernel_abi.h" "$ROOT/kernel/pa_mock_api.h" \
        "$ROOT/tiling/csrc" "$ROOT/launcher/run_check/pa_run_check.cpp" -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.sh' \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
        sed "s#$ROOT/##"
} | sha256sum | cut -d' ' -f1)"
if [[ -z "${FORCE:-}" && -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$stamp" ]]; then
    echo "aarch64 cross build: skipped (build/aarch64 is up to date)"
    exit 0
fi
rm -f "$OUT/.stamp"
mkdir -p "$OUT"
CROSS_WERROR=(-Werror) # the cross build is CI's only view of the aarch64 code: any warning fails it
"$CROSS_CC" "${MOCK_CFLAGS[@]}" "${CROSS_WERROR[@]}" -I"$ROOT/kernel" -I"$ROOT/kernel/mock" "$ROOT"/kernel/mock/*.c \
    "$ROOT"/kernel/contract/*.c -o "$OUT/libpa_mock.so" "${MOCK_LIBS[@]}"
"$CROSS_CC" -O2 -std=gnu11 -Wall -Wextra "${CROSS_WERROR[@]}" -I"$ROOT/kernel" "$ROOT/kernel/mock/cross/pa_mock_replay.c" \
    -L"$OUT" -lpa_mock -Wl,-rpath,'$ORIGIN' -o "$OUT/pa_mock_replay"
"$CROSS_CC" "${PLAN_CFLAGS[@]}" "$ROOT/tiling/csrc/pa_balance.c" -o "$OUT/libpa_plan.so" -lm

# run()'s check: this host's torch headers serve aarch64 as well (no architecture-specific code on the paths it
# includes; as system headers, so their own warnings are not ours); pyconfig.h is this host's, which a syntax
# check does not mind.
run_check="compile-checked only (linking needs an aarch64 torch)"
if ! includes="$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$(python_bin)" -c '
import sysconfig
from torch.utils import cpp_extension
print(" ".join(["-isystem" + p for p in [sysconfig.get_paths()["include"], *cpp_extension.include_paths()]]))
' 2>/dev/null)"; then
    run_check="not checked (torch not importable here)"
else
    # shellcheck disable=SC2086
    "$CROSS_CXX" -std=c++17 -fsyntax-only -Wall -Werror -Wno-unused-function $includes \
        "$ROOT/launcher/run_check/pa_run_check.cpp"
fi
echo "$stamp" >"$OUT/.stamp"
echo "aarch64 cross build: built build/aarch64/{libpa_mock.so,pa_mock_replay,libpa_plan.so} ($CROSS_CC);" \
    "run() check: $run_check"
