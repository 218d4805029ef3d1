"""The krew archive of kubectl gpuval and its manifest's checksum (`make krew`).

krew installs a plugin from a per-platform archive and links its `bin` onto PATH. kubectl gpuval is
a Python package, so its archive holds one file, the launcher kubectl-gpuval/krew/kubectl-gpuval,
which installs the package once into a virtual environment of its own and runs it; one archive
serves every platform the manifest lists (linux and darwin: the launcher is POSIX sh). The archive
is built byte for byte the same every time (fixed times, owners and modes; gzip without a time
stamp), so the sha256 in kubectl-gpuval/krew/gpuval.yaml names exactly what `make krew` builds,
and `--check` (and tests/unit/plugin/test_kubectl_gpuval.py) fails when the launcher changed
without it.

    python -m gpuval_devtools.krew [--out out/krew] [--check]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
KREW_DIR = REPO_ROOT / "kubectl-gpuval" / "krew"
LAUNCHER = KREW_DIR / "kubectl-gpuval"
MANIFEST = KREW_DIR / "gpuval.yaml"
LICENSE = REPO_ROOT / "kubectl-gpuval" / "LICENSE"
# 2025-01-01T00:00:00Z, as the images' files (gpuval_devtools.imagespecs.DEFAULT_EPOCH).
EPOCH = 1735689600
_SHA256 = re.compile(r"^(\s*sha256:\s*)([0-9a-f]{64})\s*$", re.M)


def archive_name(version: str) -> str:
    return f"kubectl-gpuval-{version}.tar.gz"


def launcher_version() -> str:
    found = re.search(r"^VERSION=(\S+)$", LAUNCHER.read_text(), re.M)
    if found is None:
        raise SystemExit(f"{LAUNCHER}: no VERSION= line")
    return found.group(1)


def archive_bytes() -> bytes:
    """The .tar.gz krew downloads: the launcher, executable, and the license (krew-index asks
    every plugin to ship one); nothing that varies between builds."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, mode in ((LAUNCHER, 0o755), (LICENSE, 0o644)):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.name)
            info.size, info.mtime, info.mode = len(data), EPOCH, mode
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def manifest_sha256() -> str:
    found = _SHA256.search(MANIFEST.read_text())
    if found is None:
        raise SystemExit(f"{MANIFEST}: no sha256 line")
    return found.group(2)


def build(out: Path) -> tuple[Path, str]:
    """Write the archive under `out` and the manifest's sha256 of it; (archive, sha256)."""
    data = archive_bytes()
    digest = hashlib.sha256(data).hexdigest()
    out.mkdir(parents=True, exist_ok=True)
    path = out / archive_name(launcher_version())
    path.write_bytes(data)
    MANIFEST.write_text(_SHA256.sub(lambda m: m.group(1) + digest, MANIFEST.read_text()))
    return path, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuval_devtools.krew", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "krew")
    parser.add_argument("--check", action="store_true", help="fail when the manifest is stale")
    args = parser.parse_args(argv)
    digest = hashlib.sha256(archive_bytes()).hexdigest()
    if args.check:
        if digest != manifest_sha256():
            print(f"{MANIFEST}: sha256 is stale (the archive is {digest}): run make krew")
            return 1
        return 0
    path, digest = build(args.out)
    print(f"{path} sha256 {digest} (written into {MANIFEST.relative_to(REPO_ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
