"""What goes into each of gpuval's images and how each runs: one place for the daemonless
builder (gpuval_devtools.images) and for the test that keeps it and the Dockerfiles installing
the same packages."""

from __future__ import annotations

from dataclasses import dataclass, field

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Debian bookworm's python3; the wheels in the lock are chosen for it and its glibc (2.36).
PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
# 2025-01-01T00:00:00Z: every file time and image timestamp, unless SOURCE_DATE_EPOCH says another.
DEFAULT_EPOCH = 1735689600
DEFAULT_REGISTRY = "localhost/gpuval"
VERSION = "0.1.0"
NON_ROOT = "65532"


@dataclass(frozen=True)
class ImageSpec:
    """One image: which workspace member (and extras) it installs and how it runs."""

    repository: str
    tag_suffix: str
    package: str
    members: tuple[str, ...]
    extras: tuple[str, ...] = ()
    # Debian packages (with their dependencies): python3, and what the wheels link but do not
    # carry (numpy's wheels, torch's: the C++ runtime).
    debian: tuple[str, ...] = ("python3",)
    # Modules imported in the finished tree at build time: what the image's programs need.
    smoke: tuple[str, ...] = ()
    # Folders of installed packages (relative to site-packages) that the image's programs never
    # import, left out of the image; the Dockerfile removes the same.
    unused: tuple[str, ...] = ()
    user: str | None = None
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    ports: tuple[str, ...] = ()
    description: str = ""
    labels: tuple[tuple[str, str], ...] = field(default=())

    def ref(self, registry: str = DEFAULT_REGISTRY) -> str:
        return f"{registry}/{self.repository}:{VERSION}{self.tag_suffix}"

    @property
    def name(self) -> str:
        return f"{self.repository}{self.tag_suffix}"

    def umoci_config(self) -> list[str]:
        """The image configuration as `umoci config` options."""
        args = ["--config.env=PATH=/usr/local/bin:/usr/bin:/bin"]
        args += [f"--config.env={key}={value}" for key, value in self.env]
        args += [f"--config.cmd={part}" for part in self.cmd]
        args += [f"--config.exposedports={port}" for port in self.ports]
        if self.user:
            args.append(f"--config.user={self.user}")
        labels = {
            "org.opencontainers.image.title": self.repository,
            "org.opencontainers.image.description": self.description,
            "org.opencontainers.image.version": VERSION,
            "org.opencontainers.image.licenses": "Apache-2.0",
            **dict(self.labels),
        }
        args += [f"--config.label={key}={value}" for key, value in labels.items()]
        return args


_PYTHON_ENV = (("PYTHONUNBUFFERED", "1"), ("PYTHONDONTWRITEBYTECODE", "1"))

OPERATOR = ImageSpec(
    repository="gpuval-operator",
    tag_suffix="",
    package="gpuval-operator",
    members=("api", "credentials", "operator"),
    smoke=(
        "gpuval_operator.main",
        "gpuval_operator.kube",
        "gpuval_credentials.load",
    ),
    # The kubernetes package's asyncio client (68 MB byte-compiled, of the package's 126): the
    # operator loads its credentials with the package's synchronous loaders and talks through its
    # own client (docs/operator/architecture.md, "Credentials");
    # tests/unit/chart/test_chart_images.py checks that nothing the operator runs imports it.
    unused=("kubernetes/aio",),
    user=f"{NON_ROOT}:{NON_ROOT}",
    cmd=("gpuval-operator",),
    # HOME on the chart's writable /tmp (the root filesystem is read-only); in a pod the
    # credentials are the ServiceAccount's (gpuval_credentials), not ~/.kube.
    env=(*_PYTHON_ENV, ("HOME", "/tmp")),
    ports=("8080/tcp",),
    description="gpuval operator: validates a cluster's GPU nodes",
)
# The agent for the CPU tiers: simulated backend only, no torch (GPUVAL_BACKEND=simulated).
AGENT_CPU = ImageSpec(
    repository="gpuval-agent",
    tag_suffix="-cpu",
    package="gpuval-agent",
    members=("api", "agent"),
    debian=("python3", "libstdc++6"),
    smoke=("gpuval_agent.cli", "gpuval_agent.backends.simulated.backend", "numpy"),
    cmd=("gpuval-agent", "run"),
    env=_PYTHON_ENV,
    description="gpuval agent without the GPU stack (simulated backend, for tests)",
)
# The agent for GPU nodes: torch's CUDA wheels bring the CUDA user-space libraries, the NVIDIA
# container toolkit injects the driver's (NVML, libcuda) at run time, so no nvidia/cuda base.
AGENT_GPU = ImageSpec(
    repository="gpuval-agent",
    tag_suffix="",
    package="gpuval-agent",
    members=("api", "agent"),
    extras=("gpu",),
    debian=("python3", "libstdc++6"),
    smoke=("gpuval_agent.cli", "numpy", "torch"),
    cmd=("gpuval-agent", "run"),
    env=(
        *_PYTHON_ENV,
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ),
    description="gpuval agent: burns and measures the GPUs of one node",
)
IMAGES = {spec.name: spec for spec in (OPERATOR, AGENT_CPU, AGENT_GPU)}
TEST_IMAGES = (OPERATOR, AGENT_CPU)
