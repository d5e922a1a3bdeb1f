# Sourced by emu/build_emu.sh and check_a2a3.sh: the clang and the pinned pto-isa headers both builds use.
#
#   pto_toolchain <build_dir>   sets CXX (clang++ >= 19; PA_SIM_CXX overrides; installs clang-19 with apt-get
#                               when missing and possible) and PTO_INC (fetch_pto_isa.sh); returns 3 with a
#                               reason in PTO_SKIP when a tool cannot be had, non-zero on other failures.
PTO_TOOLCHAIN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

pto_find_clang() {
    for c in clang++-19 clang++-20 clang++-21 clang++-22; do
        if command -v "$c" >/dev/null; then echo "$c"; return 0; fi
    done
    return 1
}

pto_toolchain() {
    local build="$1" rc=0
    PTO_SKIP=""
    CXX="${PA_SIM_CXX:-}"
    if [[ -z "$CXX" ]]; then
        if ! CXX="$(pto_find_clang)"; then
            if command -v apt-get >/dev/null && [[ "$(id -u)" == "0" ]]; then
                echo "[pto_toolchain] installing clang-19 with apt-get"
                (apt-get install -y -q clang-19 >/dev/null 2>&1 ||
                    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q clang-19 >/dev/null 2>&1; }) || true
            fi
            if ! CXX="$(pto_find_clang)"; then
                PTO_SKIP="clang++-19 not found and not installable here (pto-isa's headers need clang >= 19)"
                return 3
            fi
        fi
    fi
    bash "$PTO_TOOLCHAIN_DIR/fetch_pto_isa.sh" "$build" || rc=$?
    if [[ $rc -eq 3 ]]; then
        PTO_SKIP="pto-isa headers could not be fetched"
        return 3
    fi
    [[ $rc -ne 0 ]] && return "$rc"
    PTO_INC="$build/third_party/pto-isa/include"
    return 0
}
