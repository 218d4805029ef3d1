"""gpuval's container images, built here without a daemon or a registry, reproducibly.

No Docker engine runs on the machines gpuval is built and tested on, and no registry can be
pulled from, so the images are assembled from package registries directly:

1. a Debian root filesystem with python3 and its libraries, nothing else (no shell tools, no dpkg,
   no apt): ``mmdebstrap --variant=extract`` from Debian's mirror;
2. the locked Python packages of one workspace member (``uv export --frozen``, hashes required,
   wheels only) installed with ``uv pip install --target`` into Debian's
   ``/usr/local/lib/python3.11/dist-packages``, byte-compiled by the image's own interpreter;
3. gpuval's own packages, as wheels built from this checkout, with their console scripts;

each a layer, laid out and configured by ``umoci`` as an OCI image, then written as an OCI archive
that ``ctr images import`` loads. Every input is pinned (the lock's versions and hashes, the Debian
suite's package versions, recorded per image) and every timestamp is ``SOURCE_DATE_EPOCH``, so two
builds at the same Debian mirror state give the same digest.

Beside each archive: ``<image>.packages.json``, the image's digest, layers, sizes and every Debian
and Python package in it with its version.

``python -m gpuval_devtools.images build [--gpu] [--load] [--out DIR] [--no-cache]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuval_devtools import imagelayout
from gpuval_devtools.buildsteps import (
    REPO_ROOT,
    BuildError,
    Log,
    apt_install,
    cache_dir,
    debian_files,
    run_step,
    stderr_log,
    tree_digest,
    uv_command,
)
from gpuval_devtools.imagespecs import (
    AGENT_GPU,
    DEBIAN_MIRROR,
    DEBIAN_SUITE,
    DEFAULT_EPOCH,
    DEFAULT_REGISTRY,
    NON_ROOT,
    PYTHON_PLATFORM,
    PYTHON_VERSION,
    SITE_PACKAGES,
    TEST_IMAGES,
    VERSION,
    ImageSpec,
)
from gpuval_devtools.nodetools import load_into_running_node


@dataclass(frozen=True)
class BuiltImage:
    name: str
    ref: str
    archive: Path
    packages: Path
    digest: str


def source_date_epoch() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH))


_BUILDER_SOURCES = (
    Path(__file__),
    Path(imagelayout.__file__),
    Path(imagelayout.__file__).with_name("imagespecs.py"),
)
PAUSE_SOURCE = REPO_ROOT / "images" / "pause" / "pause.c"


def image_key(spec: ImageSpec, registry: str) -> str:
    """Changes whenever something that goes into the image does (Debian's mirror aside)."""
    inputs = [
        REPO_ROOT / "uv.lock",
        REPO_ROOT / "pyproject.toml",
        *(REPO_ROOT / m / "pyproject.toml" for m in spec.members),
        *(REPO_ROOT / m / "src" for m in spec.members),
        *_BUILDER_SOURCES,
    ]
    extra = f"{spec!r} {registry} {DEBIAN_SUITE} {source_date_epoch()}"
    return tree_digest(inputs, extra)


def tools(*, log: Log) -> dict[str, Path]:
    """mmdebstrap (installed: it drives the machine's apt) and umoci (unpacked from Debian)."""
    apt_install({"mmdebstrap": "mmdebstrap"}, log=log)
    umoci = debian_files("umoci", ["usr/bin/umoci"], suite=DEBIAN_SUITE, log=log)
    return {"umoci": umoci["usr/bin/umoci"]}


def debian_rootfs(spec: ImageSpec, target: Path, *, log: Log) -> list[dict[str, str]]:
    """Debian's python3 and the image's other packages, with their dependencies, extracted into
    ``target`` (nothing installed: no maintainer script runs); returns the packages."""
    listing = target.parent / f"{target.name}.debs"
    hook = (
        'cd "$1"/var/cache/apt/archives && for f in *.deb; do '
        "dpkg-deb --show --showformat='${Package} ${Version} ${Architecture}\\n' \"$f\"; "
        f"done > {listing}"
    )
    suites = f"{DEBIAN_SUITE} {DEBIAN_SUITE}-updates"
    run_step(
        "image-debian-rootfs",
        [
            "mmdebstrap",
            "--variant=extract",
            "--mode=root",
            f"--include={','.join(spec.debian)}",
            f"--extract-hook={hook}",
            DEBIAN_SUITE,
            str(target),
            f"deb {DEBIAN_MIRROR} {suites} main",
            f"deb {DEBIAN_MIRROR}-security {DEBIAN_SUITE}-security main",
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())},
        log=log,
    )
    packages = []
    for line in sorted(listing.read_text().splitlines()):
        name, version, arch = line.split()
        packages.append({"name": name, "version": version, "architecture": arch})
    return packages


def python_layer(spec: ImageSpec, target: Path, *, log: Log) -> None:
    """The lock's packages for ``spec.package`` (and its extras), wheels only, hashes checked."""
    requirements = target.parent / f"{target.name}.requirements.txt"
    export = [*uv_command(), "export", "--frozen", "--no-dev", "--no-emit-workspace", "--no-header"]
    export += ["--package", spec.package, "--output-file", str(requirements)]
    for extra in spec.extras:
        export += ["--extra", extra]
    run_step(f"image-{spec.name}-export", export, cwd=REPO_ROOT, log=log)
    run_step(
        f"image-{spec.name}-python-packages",
        [
            *uv_command(),
            "pip",
            "install",
            "--target",
            str(target / SITE_PACKAGES),
            "--python-version",
            PYTHON_VERSION,
            "--python-platform",
            PYTHON_PLATFORM,
            "--no-deps",
            "--require-hashes",
            "--no-build",
            "--requirements",
            str(requirements),
        ],
        cwd=REPO_ROOT,
        log=log,
    )
    # Console scripts of the dependencies (kopf, normalizer, ...) are not used in the image and
    # would carry this machine's interpreter path.
    imagelayout.drop_scripts(target / SITE_PACKAGES)
    imagelayout.drop_unused(target / SITE_PACKAGES, spec.unused)


def gpuval_layer(spec: ImageSpec, target: Path, wheels: Path, *, log: Log) -> None:
    """gpuval's own packages from this checkout, as wheels, and their console scripts."""
    for member in spec.members:
        run_step(
            f"image-wheel-{member}",
            [*uv_command(), "build", "--wheel", "--out-dir", str(wheels), str(REPO_ROOT / member)],
            env={**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())},
            log=log,
        )
    site = target / SITE_PACKAGES
    run_step(
        f"image-{spec.name}-gpuval-packages",
        [
            *uv_command(),
            "pip",
            "install",
            "--target",
            str(site),
            "--python-version",
            PYTHON_VERSION,
            "--python-platform",
            PYTHON_PLATFORM,
            "--no-deps",
            *map(str, sorted(wheels.glob("*.whl"))),
        ],
        cwd=REPO_ROOT,
        log=log,
    )
    imagelayout.drop_scripts(site)
    imagelayout.forget_install_source(site)
    imagelayout.write_console_scripts(site, target / "usr" / "local" / "bin")


def build_image(
    spec: ImageSpec, out_dir: Path, *, registry: str = DEFAULT_REGISTRY, log: Log = stderr_log
) -> BuiltImage:
    """Builds ``spec`` from scratch into ``out_dir`` (an OCI archive and its package list)."""
    umoci = tools(log=log)["umoci"]
    started = time.monotonic()
    epoch = source_date_epoch()
    out_dir.mkdir(parents=True, exist_ok=True)
    old_umask = os.umask(0o022)
    with tempfile.TemporaryDirectory(prefix=f"gpuval-image-{spec.name}-", dir=cache_dir()) as tmp:
        work = Path(tmp)
        base, deps, app = work / "base", work / "deps", work / "app"
        try:
            debian = debian_rootfs(spec, base, log=log)
            imagelayout.prepare_base(base, non_root=NON_ROOT)
            python_layer(spec, deps, log=log)
            gpuval_layer(spec, app, work / "wheels", log=log)
            smoke = f"image-{spec.name}-smoke-test"
            imagelayout.smoke_test(base, deps, app, spec.smoke, step=smoke, log=log)
            for layer in (base, deps, app):
                imagelayout.compile_bytecode(base, layer, log=log)
        finally:
            os.umask(old_umask)
        layout = work / "oci"
        ref = spec.ref(registry)
        imagelayout.assemble(
            umoci,
            layout,
            ref,
            [(base, "debian"), (deps, "python"), (app, "gpuval")],
            config=spec.umoci_config(),
            epoch=epoch,
            log=log,
        )
        archive = out_dir / f"{spec.name}.oci.tar"
        digest = imagelayout.write_archive(layout, archive, epoch)
        python = imagelayout.python_packages(app / SITE_PACKAGES) + imagelayout.python_packages(
            deps / SITE_PACKAGES
        )
        packages = out_dir / f"{spec.name}.packages.json"
        listing = {
            "image": ref,
            "digest": digest,
            **imagelayout.sizes(layout),
            "debian": {"suite": DEBIAN_SUITE, "packages": debian},
            "python": sorted(python, key=lambda p: p["name"].lower()),
        }
        packages.write_text(json.dumps(listing, indent=1) + "\n")
    log(f"image {ref}: {digest} in {time.monotonic() - started:.0f}s -> {archive}")
    return BuiltImage(spec.name, ref, archive, packages, digest)


def _cached(
    name: str, key: str, build: Callable[[Path], BuiltImage], *, no_cache: bool
) -> BuiltImage:
    out = cache_dir() / "images" / f"{name}-{key}"
    stamp = out / ".stamp"
    if not stamp.is_file() or no_cache:
        # Built beside and renamed into place: sessions sharing the cache never see half an image.
        partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        image = build(partial)
        (partial / ".stamp").write_text(json.dumps({"digest": image.digest, "ref": image.ref}))
        if no_cache:
            shutil.rmtree(out, ignore_errors=True)
        try:
            partial.rename(out)
        except OSError:  # another session finished the same image first: theirs is as good
            shutil.rmtree(partial, ignore_errors=True)
    cached = json.loads(stamp.read_text())
    return BuiltImage(
        name,
        cached["ref"],
        out / f"{name}.oci.tar",
        out / f"{name}.packages.json",
        cached["digest"],
    )


def ensure(
    specs: Sequence[ImageSpec] = TEST_IMAGES,
    *,
    registry: str = DEFAULT_REGISTRY,
    no_cache: bool = False,
    log: Log = stderr_log,
) -> list[BuiltImage]:
    """Each image from the cache when nothing that goes into it changed, else built anew."""
    return [
        _cached(
            spec.name,
            image_key(spec, registry),
            functools.partial(build_image, spec, registry=registry, log=log),
            no_cache=no_cache,
        )
        for spec in specs
    ]


def build_pause(out_dir: Path, *, registry: str = DEFAULT_REGISTRY, log: Log) -> BuiltImage:
    """The sandbox image of the test node's pods: images/pause/pause.c, linked statically."""
    umoci = tools(log=log)["umoci"]
    out_dir.mkdir(parents=True, exist_ok=True)
    ref = f"{registry}/pause:{VERSION}"
    with tempfile.TemporaryDirectory(prefix="gpuval-image-pause-", dir=cache_dir()) as tmp:
        tree = Path(tmp) / "rootfs"
        tree.mkdir()
        run_step(
            "image-pause-compile",
            ["gcc", "-static", "-O2", "-s", "-o", str(tree / "pause"), str(PAUSE_SOURCE)],
            log=log,
        )
        layout = Path(tmp) / "oci"
        config = ["--config.entrypoint=/pause", "--config.user=65535:65535"]
        epoch = source_date_epoch()
        imagelayout.assemble(
            umoci, layout, ref, [(tree, "pause")], config=config, epoch=epoch, log=log
        )
        archive = out_dir / "pause.oci.tar"
        digest = imagelayout.write_archive(layout, archive, epoch)
    packages = out_dir / "pause.packages.json"
    packages.write_text(json.dumps({"image": ref, "digest": digest, "source": "pause.c"}) + "\n")
    return BuiltImage("pause", ref, archive, packages, digest)


def ensure_pause(*, registry: str = DEFAULT_REGISTRY, log: Log = stderr_log) -> BuiltImage:
    key = tree_digest([PAUSE_SOURCE, *_BUILDER_SOURCES], f"{registry} {source_date_epoch()}")
    return _cached(
        "pause", key, functools.partial(build_pause, registry=registry, log=log), no_cache=False
    )


def export(images: Sequence[BuiltImage], out_dir: Path) -> None:
    """Copies the archives and package lists to ``out_dir`` (hard links where possible)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for image in images:
        for path in (image.archive, image.packages):
            target = out_dir / path.name
            target.unlink(missing_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the operator and the CPU agent image")
    build.add_argument("--gpu", action="store_true", help="also the GPU agent image (torch, GBs)")
    build.add_argument("--registry", default=DEFAULT_REGISTRY)
    build.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "images")
    build.add_argument("--no-cache", action="store_true", help="rebuild even when cached")
    build.add_argument(
        "--load", action="store_true", help="import them into the running real node's containerd"
    )
    args = parser.parse_args(argv)
    specs = [*TEST_IMAGES, AGENT_GPU] if args.gpu else list(TEST_IMAGES)
    try:
        images = ensure(specs, registry=args.registry, no_cache=args.no_cache)
        export(images, args.out)
        for image in images:
            print(f"{image.ref}  {image.digest}  {args.out / image.archive.name}")
        if args.load:
            load_into_running_node([i.archive for i in images])
            print("loaded into the containerd of the real node running on this machine")
    except (BuildError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
