"""gpuval_operator.kube.credentials: a kubeconfig read as kubectl reads it, in-cluster credentials,
exec credential plugins, and errors that name the file, the entry and the field. (The integration
tests use it for every request to the real API server: client certificates and tokens.)"""

from __future__ import annotations

import base64
import json
import ssl
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_operator.kube.credentials import CredentialsError, load_connection, load_credentials

CA = b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"


def kubeconfig(
    path: Path,
    *,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    name: str = "one",
    current: str | None = "one",
) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": cluster
                or {"server": "https://10.0.0.1:6443/", "insecure-skip-tls-verify": True},
            },
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    if current is not None:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(autouse=True)
def _no_cluster_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_a_token_kubeconfig_gives_the_server_and_a_bearer_header(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", user={"token": "abc"})
    found = load_credentials(str(path))
    assert found.server == "https://10.0.0.1:6443"
    assert found.headers == {"Authorization": "Bearer abc"}
    # insecure-skip-tls-verify: the server's certificate is not checked.
    assert isinstance(found.ssl_context, ssl.SSLContext)
    assert found.ssl_context.verify_mode is ssl.CERT_NONE
    assert found.token_file is None


def test_kubeconfig_lists_merge_first_definition_wins_and_paths_are_relative_to_their_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "token").write_text("from-file\n")
    first = kubeconfig(tmp_path / "a" / "config", user={"tokenFile": "token"})
    second = kubeconfig(tmp_path / "second", user={"token": "ignored"}, current="other")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    found = load_credentials()
    assert found.headers == {"Authorization": "Bearer from-file"}
    assert found.token_file == str(tmp_path / "a" / "token")  # re-read as it rotates


def test_certificate_data_fields_load_and_leave_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file, cert_file = _self_signed(tmp_path)
    encoded = {
        "client-certificate-data": base64.b64encode(cert_file.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key_file.read_bytes()).decode(),
    }
    cluster = {"server": "https://h:1", "certificate-authority": str(cert_file)}
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    found = load_credentials(str(kubeconfig(tmp_path / "config", user=encoded, cluster=cluster)))
    assert isinstance(found.ssl_context, ssl.SSLContext)
    assert found.headers == {}
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_exec_plugin_is_run_with_its_env_and_its_token_used(tmp_path: Path) -> None:
    plugin = tmp_path / "bin" / "token-plugin"
    plugin.parent.mkdir()
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': os.environ['CLUSTER'] + '-' + sys.argv[1]}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "./bin/token-plugin",
            "args": ["prod"],
            "env": [{"name": "CLUSTER", "value": "eu1"}],
        }
    }
    found = load_credentials(str(kubeconfig(tmp_path / "config", user=user)))
    assert found.headers == {"Authorization": "Bearer eu1-prod"}


@pytest.mark.parametrize(
    ("user", "current", "said"),
    [
        ({"token": "t"}, None, "current-context is not set"),
        ({"token": "t"}, "elsewhere", "current-context is 'elsewhere', which names no entry"),
        (
            {"auth-provider": {"name": "gcp"}},
            "one",
            "users['one'].user.auth-provider is not supported",
        ),
        ({"exec": {"command": "false"}}, "one", "users['one'].user.exec: false exited with 1"),
        ({"exec": {"command": "true"}}, "one", "printed no ExecCredential JSON"),
        ({"client-certificate-data": "bm90"}, "one", "client-key(-data) is missing"),
        ({"tokenFile": "gone"}, "one", "users['one'].user.tokenFile:"),
    ],
)
def test_what_cannot_be_used_is_named(
    tmp_path: Path, user: dict[str, Any], current: str | None, said: str
) -> None:
    path = kubeconfig(tmp_path / "config", user=user, current=current)
    with pytest.raises(CredentialsError, match="kubeconfig ") as caught:
        load_credentials(str(path))
    assert said in str(caught.value)
    assert str(path) in str(caught.value)


def test_no_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=f"kubeconfig {tmp_path / 'none'}: no such file"):
        load_credentials(str(tmp_path / "none"))


def test_in_a_pod_the_service_account_and_the_service_address_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cert_file = _self_signed(tmp_path)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token\n")
    (account / "ca.crt").write_bytes(cert_file.read_bytes())
    (account / "namespace").write_text("gpuval-system\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # kopf's login gets the same identity, with the namespace its Events of cluster objects use.
    info = load_connection(service_account=account).info
    assert (info.server, info.token, info.default_namespace) == (
        "https://[fd00::1]:443",
        "pod-token",
        "gpuval-system",
    )
    found = load_credentials(service_account=account)
    assert found.server == "https://[fd00::1]:443"
    assert found.headers == {"Authorization": "Bearer pod-token"}
    assert found.token_file == str(account / "token")
    # $KUBECONFIG still wins when it is set, as for kubectl in a pod.
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    assert load_credentials(service_account=account).server == "https://10.0.0.1:6443"
    (account / "token").unlink()
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(CredentialsError, match="automountServiceAccountToken"):
        load_credentials(service_account=account)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway key and self-signed certificate, made with the openssl command."""
    import subprocess  # noqa: PLC0415

    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=test",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_exec_credential_certificates_are_pem_text(tmp_path: Path) -> None:
    key_file, cert_file = _self_signed(tmp_path)
    plugin = tmp_path / "cert-plugin"
    status = {"clientCertificateData": cert_file.read_text(), "clientKeyData": key_file.read_text()}
    plugin.write_text(
        f"#!{sys.executable}\nimport json\n"
        f"print(json.dumps({{'kind': 'ExecCredential', 'status': {json.dumps(status)}}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    cluster = {"server": "https://h:1", "certificate-authority": str(cert_file)}
    path = kubeconfig(tmp_path / "config", user={"exec": {"command": str(plugin)}}, cluster=cluster)
    found = load_credentials(str(path))
    assert isinstance(found.ssl_context, ssl.SSLContext) and found.headers == {}


def test_an_exec_plugin_asking_for_cluster_info_gets_it_and_a_missing_one_its_install_hint(
    tmp_path: Path,
) -> None:
    plugin = tmp_path / "cluster-plugin"
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        "cluster = json.loads(os.environ['KUBERNETES_EXEC_INFO'])['spec']['cluster']\n"
        "token = cluster['server'] + '|' + cluster['config']['region']\n"
        "print(json.dumps({'kind': 'ExecCredential', 'status': {'token': token}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    cluster = {
        "server": "https://h:1",
        "insecure-skip-tls-verify": True,
        "extensions": [
            {"name": "client.authentication.k8s.io/exec", "extension": {"region": "eu-west-1"}}
        ],
    }
    user = {"exec": {"command": str(plugin), "provideClusterInfo": True}}
    found = load_credentials(str(kubeconfig(tmp_path / "config", user=user, cluster=cluster)))
    assert found.headers == {"Authorization": "Bearer https://h:1|eu-west-1"}

    missing = {"exec": {"command": "gpuval-no-such-plugin", "installHint": "brew install it\n"}}
    path = kubeconfig(tmp_path / "missing", user=missing)
    with pytest.raises(CredentialsError, match=r"did not run: .*\(brew install it\)"):
        load_credentials(str(path))
