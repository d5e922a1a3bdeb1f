#!/usr/bin/env bash
# Fetch pto-isa's headers into <build_dir>/third_party/pto-isa (default build_dir: build); never committed.
#
#   bash kernel/npu/fetch_pto_isa.sh [build_dir]      prints nothing on success but the "[fetch_pto_isa]" lines
#
# The headers come from the registry package that carries them, pinned by version and sha256: today
# tilelang-ascend 0.1.4 (an aarch64 wheel; only its architecture-independent pto-isa headers are used).
# pto-isa is licensed under the CANN Open Software License v2, for software used with Huawei AI processors:
# pa-kit builds and tests a kernel for Ascend NPUs with it.  Idempotent; exit 3 when the download is impossible.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" && pwd)"

PTO_PKG="tilelang-ascend"
PTO_VERSION="0.1.4"
PTO_WHEEL="tilelang_ascend-0.1.4-cp311-cp311-manylinux2014_aarch64.whl"
PTO_SHA256="1afec13f59e18fd9133ae2345a9845d8b58e3f005bd773325664821db5990d03"
PTO_DIR="$BUILD/third_party/pto-isa"
PTO_INC="$PTO_DIR/include"

say() { echo "[fetch_pto_isa] $*"; }

if [[ -f "$PTO_DIR/.sha256" && "$(cat "$PTO_DIR/.sha256")" == "$PTO_SHA256" && -f "$PTO_INC/pto/pto-inst.hpp" ]]; then
    exit 0
fi
dl="$BUILD/third_party/download"
mkdir -p "$dl"
if [[ ! -f "$dl/$PTO_WHEEL" ]]; then
    command -v python3 >/dev/null || { say "python3 not found (needed to fetch pto-isa with pip)"; exit 3; }
    say "fetching pto-isa headers: $PTO_PKG==$PTO_VERSION"
    if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
        --python-version 3.11 "$PTO_PKG==$PTO_VERSION" -d "$dl" 2>"$dl/pip.log"; then
        cat "$dl/pip.log" >&2
        say "could not download $PTO_PKG==$PTO_VERSION (no registry access?)"
        exit 3
    fi
fi
got="$(sha256sum "$dl/$PTO_WHEEL" | cut -d' ' -f1)"
if [[ "$got" != "$PTO_SHA256" ]]; then
    rm -f "$dl/$PTO_WHEEL"
    echo "[fetch_pto_isa] error: $PTO_WHEEL has sha256 $got, expected $PTO_SHA256" >&2
    exit 1
fi
rm -rf "$PTO_DIR" "$BUILD/third_party/unpack"
python3 - "$dl/$PTO_WHEEL" "$BUILD/third_party/unpack" <<'EOF_PY'
import sys, zipfile
prefix = "tilelang/3rdparty/pto-isa/"
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(prefix)])
EOF_PY
mv "$BUILD/third_party/unpack/tilelang/3rdparty/pto-isa" "$PTO_DIR"
rm -rf "$BUILD/third_party/unpack"
echo "$PTO_SHA256" > "$PTO_DIR/.sha256"
say "pto-isa headers in $PTO_DIR ($PTO_PKG==$PTO_VERSION, CANN Open Software License v2)"
