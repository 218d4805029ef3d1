"""The control plane's build steps: failures name the step and its log; the cache is keyed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_devtools import binaries, buildsteps, controlplane, kwoknodes
from gpuval_devtools.controlplane import GPU_RESOURCE, BuildError, GpuNode


def test_failing_build_step_names_the_step_and_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUVAL_CACHE", str(tmp_path))
    with pytest.raises(BuildError) as err:
        controlplane._run_step(
            "build-widget",
            ["sh", "-c", "echo compiling; echo 'undefined: frobnicate' >&2; exit 3"],
            log=lambda _m: None,
        )
    message = str(err.value)
    log_path = tmp_path / "logs" / "build-widget.log"
    assert "build step 'build-widget' failed with exit code 3" in message
    assert str(log_path) in message
    assert "undefined: frobnicate" in message
    assert "undefined: frobnicate" in log_path.read_text()


def test_successful_build_step_keeps_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUVAL_CACHE", str(tmp_path))
    seen: list[str] = []
    controlplane._run_step("hello", ["sh", "-c", "echo built"], log=seen.append)
    assert (tmp_path / "logs" / "hello.log").read_text() == "built\n"
    assert any("hello: done" in line for line in seen)


def test_tree_digest_changes_when_the_go_module_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "mod"
    module.mkdir()
    (module / "go.mod").write_text("module x\n")
    monkeypatch.setattr(buildsteps, "REPO_ROOT", tmp_path)
    before = controlplane._tree_digest([module], "v1.36.3")
    same = controlplane._tree_digest([module], "v1.36.3")
    other_version = controlplane._tree_digest([module], "v1.36.4")
    (module / "go.mod").write_text("module x\n\ngo 1.26\n")
    after = controlplane._tree_digest([module], "v1.36.3")
    assert before == same
    assert len({before, other_version, after}) == 3


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("etcd Version: 3.5.16\nGit SHA: Not provided", (3, 5, 16)),
        ("etcd Version: 3.4.23", (3, 4, 23)),
        ("no version here", ()),
    ],
)
def test_etcd_version_is_parsed_from_its_banner(text: str, version: tuple[int, ...]) -> None:
    assert controlplane._parse_version(text) == version
    assert (controlplane._parse_version(text) >= controlplane.ETCD_MIN_VERSION) == (
        version >= (3, 5, 11)
    )


def test_gpu_node_manifest_advertises_gpus_and_product_labels() -> None:
    node = GpuNode(
        name="n1",
        gpus=4,
        product="NVIDIA-A100-SXM4-80GB",
        labels={"pool": "a"},
        annotations={"gpuval.dev/simulate": "{}"},
        taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
    ).manifest()
    assert node["status"]["capacity"][GPU_RESOURCE] == "4"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "4"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "4"
    assert node["metadata"]["labels"]["pool"] == "a"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["annotations"]["gpuval.dev/simulate"] == "{}"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]


def test_loopback_args_bind_every_component_to_loopback() -> None:
    args = kwoknodes.loopback_args()
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "--extra-args"]
    components = {o.split("=", 1)[0] for o in overrides}
    assert components == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok-controller",
    }
    for override in overrides:
        value = override.split("=", 2)[2]
        assert "0.0.0.0" not in value
        assert "127.0.0.1" in value


def test_loopback_args_name_every_port_so_control_planes_started_together_differ() -> None:
    """kwokctl picks the API server's, the controller manager's and the scheduler's ports itself,
    counting down from 32765: control planes started at the same moment (one per pytest-xdist
    worker) took the same ones and all but one never came up. Each port is chosen here instead."""
    args = kwoknodes.loopback_args()
    flags = [
        "--etcd-port",
        "--controller-port",
        "--kube-apiserver-port",
        "--kube-controller-manager-port",
        "--kube-scheduler-port",
    ]
    ports = [int(args[args.index(flag) + 1]) for flag in flags]
    assert len(set(ports)) == len(flags), ports
    assert not {32763, 32764, 32765} & set(ports), "kwokctl's own picks, shared by every cluster"


def test_tree_digest_ignores_byte_compiled_caches_the_tests_write_into_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(buildsteps, "REPO_ROOT", tmp_path)
    before = buildsteps.tree_digest([source], "image")
    (source / "pkg" / "__pycache__").mkdir()
    (source / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00")
    assert buildsteps.tree_digest([source], "image") == before
    (source / "pkg" / "mod.py").write_text("X = 2\n")
    assert buildsteps.tree_digest([source], "image") != before


def test_kube_binaries_of_different_module_states_live_in_different_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worktrees on different states of hack/controlplane share one cache: each state gets its
    own directory, so they never rebuild over each other."""
    module = tmp_path / "hack" / "controlplane"
    (module / "cmd" / "kubelet").mkdir(parents=True)
    (module / "go.mod").write_text("module x\n")
    (module / "go.sum").write_text("")
    (module / "cmd" / "kubelet" / "main.go").write_text("package main\n")
    monkeypatch.setattr(buildsteps, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(binaries, "GO_MODULE_DIR", module)
    monkeypatch.setenv("GPUVAL_CACHE", str(tmp_path / "cache"))
    built: list[Path] = []

    def fake_go_build(step: str, argv: list[str], **_kwargs: object) -> None:
        out = Path(argv[argv.index("-o") + 1])
        built.append(out)
        for component in binaries.KUBE_COMPONENTS:
            (out / component).write_text("binary")

    monkeypatch.setattr(binaries, "run_step", fake_go_build)
    first = binaries._ensure_kube(log=lambda _m: None)["kubelet"].parent
    (module / "go.sum").write_text("k8s.io/x v0.1.0 h1:abc\n")
    second = binaries._ensure_kube(log=lambda _m: None)["kubelet"].parent
    again = binaries._ensure_kube(log=lambda _m: None)["kubelet"].parent
    assert first != second
    assert again == second
    assert first.name.startswith(f"kube-{binaries.KUBE_VERSION}-")
    assert len(built) == 2, "the second state's binaries are reused, not rebuilt"
    assert (first / "kubelet").is_file(), "the first state's binaries are still there"
