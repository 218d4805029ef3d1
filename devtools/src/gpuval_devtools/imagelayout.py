"""The file-level steps of gpuval_devtools.images: a Debian tree made fit for a container, byte
code compiled by the image's own interpreter, times clamped, layers laid out by umoci, and the OCI
layout written as one archive with fixed metadata so that equal inputs give equal bytes."""

from __future__ import annotations

import configparser
import gzip
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuval_devtools.buildsteps import Log, run_step

SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"

# Left behind by the extraction, or supplied by the container runtime at run time.
_BASE_LEFTOVERS = (
    "dev",
    "var/cache/apt",
    "var/lib/apt",
    "var/log",
    "etc/apt",
    "etc/resolv.conf",
    "etc/hostname",
)


def prepare_base(root: Path, *, non_root: str) -> None:
    """Removes what a container runtime supplies or an image must not carry, adds the users."""
    for rel in _BASE_LEFTOVERS:
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    (root / "dev").mkdir(mode=0o755)
    # No base-passwd postinst ran (extract variant): the two users the images run as.
    (root / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"gpuval:x:{non_root}:{non_root}:gpuval:/nonexistent:/usr/sbin/nologin\n"
    )
    (root / "etc" / "group").write_text(f"root:x:0:\ngpuval:x:{non_root}:\n")
    tmp = root / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)


# compileall, whose failures are logged and not fatal (as pip and uv treat them): wheels carry
# files for other Python versions (torch's py312_intrinsics.py) that 3.11 cannot compile.
_COMPILE = (
    "import compileall, py_compile, sys\n"
    "mode = py_compile.PycInvalidationMode.UNCHECKED_HASH\n"
    "for top in sys.argv[1:]:\n"
    "    compileall.compile_dir(top, quiet=1, invalidation_mode=mode)\n"
)


def compile_bytecode(base: Path, layer: Path, *, log: Log) -> None:
    """Byte-compiles a layer's Python with the image's interpreter, so the read-only operator
    container never compiles at start. Unchecked-hash .pyc files: no source time in them (the
    bytes are reproducible) and no source read at import (the image never changes)."""
    if layer == base:
        targets = ["/usr/lib/python3.11"]
        parked: Path | None = None
    else:
        parked = base / SITE_PACKAGES
        if parked.exists():
            parked.rmdir()  # empty in the base; the layer's tree takes its place for a moment
        parked.parent.mkdir(parents=True, exist_ok=True)
        (layer / SITE_PACKAGES).rename(parked)
        targets = ["/" + SITE_PACKAGES]
    try:
        run_step(
            f"image-compile-{layer.name}",
            ["chroot", str(base), "/usr/bin/python3", "-c", _COMPILE, *targets],
            log=log,
        )
    finally:
        if parked is not None:
            parked.rename(layer / SITE_PACKAGES)


def smoke_test(
    base: Path, deps: Path, app: Path, imports: Sequence[str], *, step: str, log: Log
) -> None:
    """Imports the image's entry modules with its own interpreter, so a library that a wheel
    links but the image lacks fails the build, not the first pod."""
    site = base / SITE_PACKAGES
    if site.exists():
        site.rmdir()
    site.parent.mkdir(parents=True, exist_ok=True)
    (deps / SITE_PACKAGES).rename(site)
    moved: list[str] = []
    try:
        _device_nodes(base / "dev", create=True)
        for entry in sorted((app / SITE_PACKAGES).iterdir()):
            entry.rename(site / entry.name)
            moved.append(entry.name)
        code = "; ".join(f"import {module}" for module in imports)
        run_step(
            step,
            ["chroot", str(base), "/usr/bin/python3", "-B", "-c", code],
            log=log,
        )
    finally:
        _device_nodes(base / "dev", create=False)
        for name in moved:
            (site / name).rename(app / SITE_PACKAGES / name)
        site.rename(deps / SITE_PACKAGES)


# The devices a program expects (torch reads /dev/urandom at import); a container runtime
# supplies them, the image carries none, so they exist only while the smoke test runs.
_DEVICES = {"null": (1, 3), "zero": (1, 5), "random": (1, 8), "urandom": (1, 9)}


def _device_nodes(dev: Path, *, create: bool) -> None:
    for name, (major, minor) in _DEVICES.items():
        node = dev / name
        node.unlink(missing_ok=True)
        if create:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def write_layer(tree: Path, tar_path: Path, epoch: int) -> None:
    """``tree`` as an uncompressed layer tar: entries sorted, times ``epoch``, owners by number
    only, so equal trees give equal bytes (gzip is umoci's, and deterministic)."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = epoch
        info.uname = info.gname = ""
        return info

    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames.sort()
            here = Path(dirpath)
            for name in sorted([*dirnames, *filenames]):
                path = here / name
                tar.add(
                    path, arcname=str(path.relative_to(tree)), recursive=False, filter=normalise
                )


def drop_scripts(site: Path) -> None:
    """Removes the console scripts uv wrote beside ``--target`` and their RECORD lines: they
    start with this machine's interpreter path (so their hashes differ per checkout), and the
    image gets its own (:func:`write_console_scripts`)."""
    shutil.rmtree(site / "bin", ignore_errors=True)
    for record in site.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith("bin/")]
        if kept != lines:
            record.write_text("".join(kept))


def drop_unused(site: Path, parts: Sequence[str]) -> None:
    """Removes `parts` (folders of installed packages, relative to ``site``) that the image's
    programs never import, with their RECORD lines."""
    for part in parts:
        shutil.rmtree(site / part)
    prefixes = tuple(f"{part.rstrip('/')}/" for part in parts)
    for record in site.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith(prefixes)]
        if kept != lines:
            record.write_text("".join(kept))


# Where and when uv installed a local wheel: the checkout's path, a timestamp.
_INSTALL_SOURCE_FILES = ("direct_url.json", "uv_cache.json")


def forget_install_source(site: Path) -> None:
    """Drops what records where and when gpuval's own wheels were installed from, so the image
    does not depend on where or when it was built."""
    for record in site.glob("*.dist-info/RECORD"):
        for name in _INSTALL_SOURCE_FILES:
            path = record.with_name(name)
            if path.exists():
                path.unlink()
                lines = record.read_text().splitlines(keepends=True)
                record.write_text("".join(x for x in lines if f"/{name}," not in x))


def write_console_scripts(site: Path, bin_dir: Path) -> list[str]:
    """The console scripts of the packages in ``site``, for the image's /usr/bin/python3."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for entry_points in sorted(site.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser()
        parser.read_string(entry_points.read_text())
        if not parser.has_section("console_scripts"):
            continue
        for name, target in parser.items("console_scripts"):
            module, _, func = target.partition(":")
            script = bin_dir / name
            script.write_text(
                "#!/usr/bin/python3\nimport sys\n"
                f"from {module.strip()} import {func.strip()}\n"
                f"sys.exit({func.strip()}())\n"
            )
            script.chmod(0o755)
            names.append(name)
    return names


def python_packages(site: Path) -> list[dict[str, str]]:
    """Name and version of every distribution installed in ``site`` (from its METADATA)."""
    found = []
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        fields: dict[str, str] = {}
        for line in metadata.read_text(errors="replace").splitlines():
            if not line:
                break
            key, _, value = line.partition(": ")
            fields.setdefault(key, value)
        found.append({"name": fields["Name"], "version": fields["Version"]})
    return found


def assemble(
    umoci: Path,
    layout: Path,
    ref: str,
    layers: Sequence[tuple[Path, str]],
    *,
    config: Sequence[str],
    epoch: int,
    log: Log,
) -> None:
    """An OCI layout at ``layout`` with one layer per tree, configured, tagged and cleaned."""
    created = _rfc3339(epoch)
    image = f"{layout}:{ref.rpartition(':')[2]}"
    run_step("image-umoci-init", [str(umoci), "init", "--layout", str(layout)], log=log)
    run_step("image-umoci-new", [str(umoci), "new", "--image", image], log=log)
    for tree, what in layers:
        # Our own tar, not `umoci insert`: umoci 0.4.7's insert ends its tar without the
        # end-of-archive blocks (and pads no last file), which containerd refuses to unpack.
        tar_path = layout.parent / f"{what}.tar"
        write_layer(tree, tar_path, epoch)
        run_step(
            f"image-umoci-add-layer-{what}",
            [
                str(umoci),
                "raw",
                "add-layer",
                "--image",
                image,
                "--history.created",
                created,
                "--history.created_by",
                f"gpuval_devtools.images: {what}",
                str(tar_path),
            ],
            log=log,
        )
        tar_path.unlink()
    run_step(
        "image-umoci-config",
        [
            str(umoci),
            "config",
            "--image",
            image,
            "--created",
            created,
            "--architecture",
            "amd64",
            "--os",
            "linux",
            "--no-history",
            *config,
        ],
        log=log,
    )
    run_step("image-umoci-gc", [str(umoci), "gc", "--layout", str(layout)], log=log)
    _name_for_containerd(layout, ref)


def _name_for_containerd(layout: Path, ref: str) -> None:
    """umoci tags the manifest `0.1.0`; `ctr images import` names the image by this annotation."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    for manifest in index["manifests"]:
        manifest.setdefault("annotations", {})[CONTAINERD_NAME] = ref
    index_path.write_text(json.dumps(index, separators=(",", ":")))


def _rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_archive(layout: Path, archive: Path, epoch: int) -> str:
    """The OCI layout as a tar with fixed order, owners, modes and times; returns the manifest
    digest (the image's digest)."""
    tmp = archive.with_suffix(".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            info.mode = 0o755 if stat.S_ISDIR(info.mode) else 0o644
            if info.isfile():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    tmp.rename(archive)
    index = json.loads((layout / "index.json").read_text())
    (manifest,) = index["manifests"]
    digest: str = manifest["digest"]
    return digest


def sizes(layout: Path) -> dict[str, Any]:
    """Compressed size (what a registry stores and a node pulls) and uncompressed size (of the
    layer tars), per layer."""
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_bytes())
    layers = []
    for layer in manifest["layers"]:
        unpacked = 0
        with gzip.open(_blob(layout, layer["digest"])) as tar:
            while chunk := tar.read(1 << 20):
                unpacked += len(chunk)
        layers.append({"digest": layer["digest"], "bytes": layer["size"], "unpacked": unpacked})
    config = manifest["config"]
    return {
        "configDigest": config["digest"],
        "layers": layers,
        "compressedBytes": sum(x["bytes"] for x in layers) + config["size"],
        "unpackedBytes": sum(x["unpacked"] for x in layers),
    }


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest
