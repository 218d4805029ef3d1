"""The operator, the agent and `kubectl gpuval` run under any UID, with no passwd entry and no HOME
(OpenShift's arbitrary UIDs, any runAsUser an image does not list): kopf asked getpass.getuser()
for its name (KeyError 'getpwuid(): uid not found') and the credentials loader expanded
~/.kube/config even when KUBECONFIG named a file ("Could not determine home directory") (issue 34
part 3).

The entry points run in a child process whose real UID has no passwd entry: that is the UID
getpass, os.path.expanduser and pathlib look up. Its effective UID stays root's, so it can still
read the interpreter (here under /root, mode 700); the image runs that way on the real node
(tests/integration/chart/test_chart_real_node.py)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from gpuval_credentials import CredentialsError, load

UID = 123456
BIN = Path(sys.executable).parent
IDENTITY_ENV = ("HOME", "USER", "LOGNAME", "LNAME", "USERNAME")


def _no_passwd_entry() -> bool:
    try:
        pwd.getpwuid(UID)
    except KeyError:
        return True
    return False


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not _no_passwd_entry(),
    reason=f"needs root to take a real UID ({UID}) that has no passwd entry",
)


def _as_uid() -> None:
    os.setresgid(UID, 0, 0)
    os.setresuid(UID, 0, 0)


def _spawn(argv: Sequence[str], **env: str) -> subprocess.Popen[str]:
    """`argv` under UID 123456 with no HOME (nor USER, LOGNAME...), from /."""
    base = {k: v for k, v in os.environ.items() if k not in IDENTITY_ENV and k != "KUBECONFIG"}
    return subprocess.Popen(
        list(argv),
        env={**base, **env},
        # Popen's user= sets the effective UID too; only the real one may go (see the module).
        preexec_fn=_as_uid,  # noqa: PLW1509
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig naming a server nothing listens on (the discard port of this machine)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


@needs_root
def test_the_child_really_has_a_uid_without_a_passwd_entry_and_no_home() -> None:
    probe = "import getpass, os, pathlib; print(os.getuid()); pathlib.Path.home()"
    child = _spawn([sys.executable, "-c", probe])
    out, _ = child.communicate(timeout=30)
    assert out.startswith(f"{UID}\n")
    assert "Could not determine home directory" in out


@needs_root
def test_the_operator_starts_under_a_uid_without_passwd_entry_and_no_home(tmp_path: Path) -> None:
    child = _spawn(
        [str(BIN / "gpuval-operator")], KUBECONFIG=str(_unreachable_kubeconfig(tmp_path))
    )
    assert child.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        # Past kopf's start and the credentials: it asks the (absent) API server.
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "127.0.0.1:9" in line:
                break
    finally:
        child.terminate()
        rest, _ = child.communicate(timeout=30)
    out = "".join(lines) + rest
    assert "getpwuid" not in out
    assert "Could not determine home directory" not in out
    assert "https://127.0.0.1:9" in out, out[-3000:]


@needs_root
def test_the_agent_runs_under_a_uid_without_passwd_entry_and_no_home() -> None:
    simulate = '{"gpus": 2, "timeScale": 0.01}'
    child = _spawn(
        [str(BIN / "gpuval-agent"), "run", "--backend", "simulated", "--simulate", simulate]
    )
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out[-3000:]
    assert "PASSED: 2 GPUs passed" in out


@needs_root
def test_kubectl_gpuval_reads_kubeconfig_under_a_uid_without_passwd_entry_and_no_home(
    tmp_path: Path,
) -> None:
    child = _spawn(
        [str(BIN / "kubectl-gpuval"), "status", "fleet"],
        KUBECONFIG=str(_unreachable_kubeconfig(tmp_path)),
    )
    out, _ = child.communicate(timeout=120)
    assert "Could not determine home directory" not in out
    assert "cannot reach the API server at https://127.0.0.1:9" in out, out[-3000:]


def _homeless(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one without a home: HOME unset, its UID unknown to the passwd database."""
    for name in IDENTITY_ENV:
        monkeypatch.delenv(name, raising=False)

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", unknown)


def test_without_a_home_kubeconfig_names_its_file_and_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _homeless(monkeypatch)
    path = _unreachable_kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert load().server == "https://127.0.0.1:9"
    assert load(str(path)).server == "https://127.0.0.1:9"


def test_without_a_home_in_a_pod_the_service_account_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _homeless(monkeypatch)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("a CA the loader names, never reads here\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert load(service_account=account).authorization == "Bearer pod-token"


def test_without_a_home_nor_kubeconfig_nor_a_pod_the_error_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _homeless(monkeypatch)
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CredentialsError, match="no home directory") as caught:
        load()
    assert "set KUBECONFIG or HOME" in str(caught.value)
