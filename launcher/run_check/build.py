"""Build ``pa_run_check`` (``launcher/run_check/pa_run_check.cpp``) against the installed torch, for compile.sh.

    python -m launcher.run_check.build OUT_DIR

Prints one line (built / up to date / skipped: why) and exits 0 unless the compiler fails; run() keeps its
Python checks whenever the module is absent.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "pa_run_check.cpp"
MODULE = "pa_run_check"


def module_path(out_dir: Path) -> Path:
    return out_dir / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"


def command(out: Path) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [shutil.which("c++") or "g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-DPA_TORCH_VERSION={torch.__version__}",
           f"-I{sysconfig.get_paths()['include']}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [str(SOURCE), "-o", str(out)]
    cmd += [f"-L{p}" for p in cpp_extension.library_paths()]
    cmd += [f"-Wl,-rpath,{p}" for p in cpp_extension.library_paths()]
    cmd += ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    return cmd


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0] if argv else "build/lib").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = module_path(out_dir)
    try:
        cmd = command(out)
    except ImportError as exc:
        print(f"run() checks in C: skipped (torch not importable: {exc})")
        return 0
    stamp = hashlib.sha256((" ".join(cmd) + SOURCE.read_text()).encode()).hexdigest()
    stamp_file = out_dir / f".{MODULE}.stamp"
    if out.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        print(f"run() checks in C: skipped ({out.name} is up to date)")
        return 0
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"run() checks in C: FAILED ({' '.join(cmd[:3])} ...)\n{result.stderr[-2000:]}")
        return 1
    stamp_file.write_text(stamp)
    print(f"run() checks in C: built {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
