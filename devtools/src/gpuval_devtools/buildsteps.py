"""Build steps shared by the control plane, the real node and the images: one cache directory, one
log per step, keys that say when a cached output is stale, and Debian packages unpacked (not
installed) or, for the few that need the system's libraries, installed.

Every step that fails raises :class:`BuildError` naming the step, the exit code and the log file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DEBIAN_NEWER_SUITE = "trixie"

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A build step failed; the message names the step and where its log is."""


def cache_dir() -> Path:
    return Path(os.environ.get("GPUVAL_CACHE", "~/.cache/gpuval")).expanduser()


def stderr_log(message: str) -> None:
    print(f"[controlplane] {message}", file=sys.stderr, flush=True)


def quiet(_message: str) -> None:
    """A log that drops everything (for callers that only want the paths)."""


def uv_command() -> list[str]:
    """The uv of this build: the one `uv run` exported, else one on PATH, else python3's."""
    found = os.environ.get("UV") or shutil.which("uv")
    return [found] if found else ["python3", "-m", "uv"]


def go_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        GOPATH=str(root / "go" / "path"),
        GOTOOLCHAIN="local",
        GOFLAGS="-buildvcs=false -trimpath",
    )
    return env


def run_step(
    step: str,
    argv: Sequence[str],
    *,
    log: Log,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{step}.log"
    started = time.monotonic()
    log(f"{step}: {' '.join(argv)}  (log: {log_path})")
    with log_path.open("w") as out:
        proc = subprocess.run(
            list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(
            f"build step {step!r} failed with exit code {proc.returncode}; "
            f"full log: {log_path}\n" + "\n".join(tail)
        )
    log(f"{step}: done in {time.monotonic() - started:.0f}s")


def tree_digest(paths: Sequence[Path], extra: str) -> str:
    """A key over the files under ``paths`` (names and contents), byte-compiled caches left out:
    running the tests writes those into source trees, and they must not make a build stale."""
    digest = hashlib.sha256(extra.encode())
    for base in paths:
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            digest.update(str(f.relative_to(REPO_ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def stamped(stamp: Path, key: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == key


def parse_version(text: str) -> tuple[int, ...]:
    for token in text.replace(",", " ").split():
        parts = token.lstrip("v").split(".")
        if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            return tuple(int(p) for p in parts[:3])
    return ()


def _need_root(step: str, why: str) -> None:
    if os.geteuid() != 0:
        raise BuildError(f"build step {step!r} needs root to {why}; run it as root once")


def ensure_debian_suite(suite: str, *, log: Log) -> None:
    """Adds a newer Debian suite at low priority: only packages asked for by name come from it."""
    sources = Path(f"/etc/apt/sources.list.d/gpuval-{suite}.sources")
    prefs = Path(f"/etc/apt/preferences.d/gpuval-{suite}")
    if not sources.exists():
        _need_root(f"debian-{suite}", f"add the Debian {suite} package source (for etcd >= 3.5.11)")
        sources.write_text(
            "Types: deb\nURIs: http://deb.debian.org/debian\n"
            f"Suites: {suite}\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        prefs.write_text(f"Package: *\nPin: release n={suite}\nPin-Priority: 100\n")
        log(f"added Debian {suite} at pin priority 100: {sources}")
    lists = list(Path("/var/lib/apt/lists").glob(f"*_dists_{suite}_*Packages*"))
    if not lists:
        run_step(f"apt-update-{suite}", ["apt-get", "update"], log=log)


def _download_deb(package: str, suite: str | None, *, log: Log) -> Path:
    debs = cache_dir() / "debian" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for old in debs.glob(f"{package}_*.deb"):
        old.unlink()
    download = ["apt-get", "download", f"{package}/{suite}" if suite else package]
    try:
        run_step(f"apt-download-{package}", download, cwd=debs, log=log)
    except BuildError:
        # Package lists older than the mirror name a .deb that is gone: refresh once and retry.
        run_step(f"apt-update-{suite or 'default'}", ["apt-get", "update"], log=log)
        run_step(f"apt-download-{package}", download, cwd=debs, log=log)
    deb = next(iter(sorted(debs.glob(f"{package}_*.deb"))), None)
    if deb is None:
        raise BuildError(f"build step 'apt-download-{package}' produced no .deb in {debs}")
    return deb


def debian_files(
    package: str, files: Sequence[str], *, log: Log, suite: str | None = DEBIAN_NEWER_SUITE
) -> dict[str, Path]:
    """Unpacks ``package`` (from ``suite``; None: the machine's own) into the cache without
    installing it; returns the named files (paths inside the package, e.g. ``usr/bin/ctr``)."""
    root = (
        cache_dir() / "debian" / (package if suite == DEBIAN_NEWER_SUITE else f"{package}-{suite}")
    )
    found = {f: root / f for f in files}
    if all(p.is_file() for p in found.values()):
        return found
    if suite == DEBIAN_NEWER_SUITE:
        ensure_debian_suite(suite, log=log)
    deb = _download_deb(package, suite, log=log)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    run_step(f"unpack-{package}", ["dpkg-deb", "-x", str(deb), str(root)], log=log)
    missing = [f for f, p in found.items() if not p.is_file()]
    if missing:
        raise BuildError(f"Debian package {package} has no {missing} under {root}")
    return found


def debian_binary(package: str, binaries: Sequence[str], *, log: Log) -> dict[str, Path]:
    """Unpacks ``package`` from Debian's newer suite into the cache; returns the named binaries."""
    files = debian_files(package, [f"usr/bin/{b}" for b in binaries], log=log)
    return {b: files[f"usr/bin/{b}"] for b in binaries}


def apt_install(commands: Mapping[str, str], *, log: Log) -> None:
    """Installs the Debian package of each command missing from PATH (command -> package).

    For tools that need the system's shared libraries or its alternatives (iptables), or that
    run Debian's own apt (mmdebstrap): unpacking them into the cache would not run.
    """
    missing = sorted({pkg for cmd, pkg in commands.items() if shutil.which(cmd) is None})
    if not missing:
        return
    _need_root("apt-install", f"install the Debian packages {missing}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    try:
        run_step("apt-install", argv, env=env, log=log)
    except BuildError:
        run_step("apt-update", ["apt-get", "update"], log=log)
        run_step("apt-install", argv, env=env, log=log)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """``count`` free TCP ports on loopback, all different (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def stop_process(proc: subprocess.Popen[bytes], grace: float = 15) -> None:
    """Ends a process this code started: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
