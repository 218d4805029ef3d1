"""nccl-tests as a third opinion: built here from an unpacked copy of its public sources against the
NCCL of the pip wheel torch uses (the `nvidia.nccl` package), then run.

    python benchmarks/nccl_tests.py build --src .ref/nccl-tests --into /tmp/nccl-tests
    python benchmarks/nccl_tests.py run --bin /tmp/nccl-tests/all_reduce_perf [-g 2]

The sources stay outside the project (.ref/ is gitignored): nothing of them is copied here. The
wheel ships include/ and lib/libnccl.so.2 but no unversioned libnccl.so, so the build links
against a temporary NCCL_HOME of symlinks, and the run puts the wheel's lib/ first on
LD_LIBRARY_PATH: torch, the agent and nccl-tests then use one and the same NCCL.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_ROW = re.compile(r"^\s*(\d+)\s+\d+\s+\w+\s")


def wheel_nccl() -> Path:
    """The directory of the `nvidia.nccl` package (include/, lib/libnccl.so.2)."""
    module = importlib.import_module("nvidia.nccl")
    return Path(next(iter(module.__path__)))


def cuda_home() -> Path | None:
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        return Path(nvcc).resolve().parent.parent
    for candidate in sorted(Path("/usr/local").glob("cuda*"), reverse=True):
        if (candidate / "bin" / "nvcc").exists():
            return candidate
    return None


def nccl_home(into: Path) -> Path:
    """A NCCL_HOME of symlinks into the wheel, with the libnccl.so the linker looks for."""
    wheel = wheel_nccl()
    home = into / "nccl-home"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    include = home / "include"
    if not include.exists():
        include.symlink_to(wheel / "include")
    for name in ("libnccl.so", "libnccl.so.2"):
        link = home / "lib" / name
        if not link.exists():
            link.symlink_to(wheel / "lib" / "libnccl.so.2")
    return home


def build(src: Path, into: Path, jobs: int) -> Path:
    """all_reduce_perf built for sm_90 (H100/H200); raises with the compiler's words."""
    cuda = cuda_home()
    if cuda is None:
        raise RuntimeError("no nvcc on PATH or under /usr/local/cuda*: cannot build nccl-tests")
    into.mkdir(parents=True, exist_ok=True)
    home = nccl_home(into)
    variables = [
        f"CUDA_HOME={cuda}",
        f"NCCL_HOME={home}",
        "MPI=0",
        f"BUILDDIR={into.resolve()}",
        "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90",
    ]
    binary = into.resolve() / "all_reduce_perf"
    for target in (str(binary), "build"):  # one binary; else the whole set (older Makefiles)
        done = subprocess.run(
            ["make", "-C", str(src / "src"), f"-j{jobs}", *variables, target],
            capture_output=True,
            text=True,
            check=False,
        )
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
        if binary.exists():
            return binary
    raise RuntimeError(f"nccl-tests did not build (make exit {done.returncode}); see above")


def run(binary: Path, gpus: int, low: str = "1M", high: str = "4G") -> dict[int, dict[str, float]]:
    """busbw per size, out of place and in place (the agent's all-reduce is in place)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(wheel_nccl() / "lib"), env.get("LD_LIBRARY_PATH")) if p
    )
    done = subprocess.run(
        [str(binary), "-b", low, "-e", high, "-f", "2", "-g", str(gpus)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    print(done.stdout, done.stderr, sep="\n", flush=True)
    figures: dict[int, dict[str, float]] = {}
    for line in done.stdout.splitlines():
        if _ROW.match(line) is None:
            continue
        fields = line.split()
        # ... | out-of-place: time algbw busbw #wrong | in-place: time algbw busbw #wrong
        try:
            figures[int(fields[0])] = {
                "outOfPlaceBusbw": float(fields[-6]),
                "inPlaceBusbw": float(fields[-2]),
            }
        except ValueError:
            continue
    if not figures:
        raise RuntimeError(f"all_reduce_perf printed no result (exit {done.returncode})")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build")
    make.add_argument("--src", type=Path, default=Path(".ref/nccl-tests"))
    make.add_argument("--into", type=Path, default=Path("/tmp/nccl-tests"))
    make.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    use = sub.add_parser("run")
    use.add_argument("--bin", type=Path, required=True)
    use.add_argument("-g", "--gpus", type=int, default=2)
    use.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        if args.command == "build":
            print(build(args.src, args.into, args.jobs))
            return 0
        figures = run(args.bin, args.gpus)
    except (RuntimeError, OSError, ImportError) as error:
        print(f"nccl-tests: {error}", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps({str(k): v for k, v in figures.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
