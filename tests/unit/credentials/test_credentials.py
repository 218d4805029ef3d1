"""gpuval_credentials: a kubeconfig or a pod's ServiceAccount loaded by the kubernetes package's
own loaders, with what gpuval adds (impersonation, proxies as kubectl chooses them, the first
current-context, when to load again) and what it refuses, by name. (The integration tests use it
for every request to the real API server: exec plugins whose token expires, a 401, impersonation
and a proxy.)"""

from __future__ import annotations

import base64
import json
import ssl
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_credentials import CredentialsError, Identity, load
from gpuval_credentials.aio import check, ssl_context
from gpuval_credentials.identity import REREAD
from gpuval_credentials.impersonation import escape_extra_key, impersonation_headers
from gpuval_credentials.proxies import choose_proxy, env_proxy
from gpuval_credentials.sync import configuration

SERVER = "https://10.0.0.1:6443"


def kubeconfig(
    path: Path,
    *,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    name: str = "one",
    current: str | None = "one",
    namespace: str | None = None,
) -> Path:
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": cluster or {"server": SERVER, "insecure-skip-tls-verify": True},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": context}],
    }
    if current is not None:
        config["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def plugin(path: Path, body: str) -> Path:
    """An executable Python script at `path` (an exec credential plugin)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def exec_user(command: Path | str, **extra: Any) -> dict[str, Any]:
    return {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(command), **extra}
    }


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway key and self-signed certificate, made with the openssl command."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    request = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    subprocess.run(
        [
            "openssl",
            *request,
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=t",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


@pytest.fixture(autouse=True)
def _no_cluster_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_a_token_kubeconfig_gives_the_server_and_a_bearer_header(tmp_path: Path) -> None:
    found = load(str(kubeconfig(tmp_path / "config", user={"token": "abc"}, namespace="ops")))
    assert found.server == SERVER
    assert found.headers() == [("Authorization", "Bearer abc")]
    assert not found.verify and found.namespace == "ops"
    assert found.refresh_at() is None  # a static token is used until a 401
    assert "(context 'one', user 'one')" in found.where


def test_merged_kubeconfigs_keep_the_first_definition_and_the_first_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As kubectl merges $KUBECONFIG (the kubernetes package alone would take the last file's
    current-context); a token file's path is relative to the file that names it."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "token").write_text("from-file\n")
    first = kubeconfig(tmp_path / "a" / "config", user={"tokenFile": "token"})
    second = kubeconfig(tmp_path / "second", user={"token": "ignored"}, name="other")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    found = load()
    assert found.headers() == [("Authorization", "Bearer from-file")]
    assert found.token_file == "token"
    # A token file is read again a minute later: the kubelet rotates projected tokens.
    assert found.refresh_at() == found.loaded + REREAD
    assert load(context="other").authorization == "Bearer ignored"


def test_certificate_data_fields_give_a_client_certificate_context(tmp_path: Path) -> None:
    key_file, cert_file = _self_signed(tmp_path)
    encoded = {
        "client-certificate-data": base64.b64encode(cert_file.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key_file.read_bytes()).decode(),
    }
    cluster = {
        "server": "https://h:1",
        "certificate-authority-data": base64.b64encode(cert_file.read_bytes()).decode(),
    }
    found = load(str(kubeconfig(tmp_path / "config", user=encoded, cluster=cluster)))
    assert found.headers() == []
    assert found.ca_file and Path(found.ca_file).read_bytes() == cert_file.read_bytes()
    assert found.cert_file and found.key_file
    context = ssl_context(found)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


def test_an_exec_plugin_runs_with_its_env_and_its_expiry_decides_when_to_run_it_again(
    tmp_path: Path,
) -> None:
    expires = (datetime.now(UTC) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = plugin(
        tmp_path / "bin" / "token-plugin",
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "status = {'token': os.environ['CLUSTER'] + '-' + sys.argv[1],"
        f" 'expirationTimestamp': {expires!r}}}\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': status}))\n",
    )
    user = exec_user("./bin/token-plugin", args=["prod"], env=[{"name": "CLUSTER", "value": "eu1"}])
    assert command.is_file()
    found = load(str(kubeconfig(tmp_path / "config", user=user)))
    assert found.headers() == [("Authorization", "Bearer eu1-prod")]
    assert found.expires == datetime.strptime(expires, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    # Run again before it expires: a fifth of its life early (two minutes of ten).
    stale = found.stale_at()
    assert stale is not None and found.refresh_at() == stale
    assert timedelta(minutes=1, seconds=55) <= found.expires - stale <= timedelta(minutes=2)
    assert not found.due(found.loaded) and found.due(stale)


def test_an_exec_plugin_that_returns_an_expired_credential_is_refused(tmp_path: Path) -> None:
    command = plugin(
        tmp_path / "old-plugin",
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind':"
        " 'ExecCredential', 'status': {'token': 't', 'expirationTimestamp':"
        " '2020-01-01T00:00:00Z'}}))\n",
    )
    path = kubeconfig(tmp_path / "config", user=exec_user(command))
    with pytest.raises(CredentialsError, match=r"expired at 2020-01-01T00:00:00\+00:00"):
        load(str(path))


def test_exec_credential_certificates_are_pem_text(tmp_path: Path) -> None:
    key_file, cert_file = _self_signed(tmp_path)
    status = {"clientCertificateData": cert_file.read_text(), "clientKeyData": key_file.read_text()}
    command = plugin(
        tmp_path / "cert-plugin",
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind':"
        f" 'ExecCredential', 'status': {json.dumps(status)}}}))\n",
    )
    cluster = {"server": "https://h:1", "certificate-authority": str(cert_file)}
    found = load(str(kubeconfig(tmp_path / "config", user=exec_user(command), cluster=cluster)))
    assert found.headers() == []
    assert found.cert_file and Path(found.cert_file).read_text() == cert_file.read_text()
    assert isinstance(ssl_context(found), ssl.SSLContext)


def test_a_failing_or_missing_plugin_is_named_with_its_install_hint(tmp_path: Path) -> None:
    failing = plugin(
        tmp_path / "failing", "print('token expired, run login', file=sys.stderr)\nsys.exit(3)\n"
    )
    path = kubeconfig(tmp_path / "config", user=exec_user(failing))
    with pytest.raises(CredentialsError) as caught:
        load(str(path))
    said = str(caught.value)
    assert "users['one'].user.exec: exec: process returned 3" in said
    assert "token expired, run login" in said and str(path) in said
    missing = exec_user("gpuval-no-such-plugin", installHint="brew install it\n")
    with pytest.raises(CredentialsError, match=r"gpuval-no-such-plugin.*\(brew install it\)"):
        load(str(kubeconfig(tmp_path / "missing", user=missing)))


def test_an_exec_plugin_asking_for_cluster_info_gets_it(tmp_path: Path) -> None:
    command = plugin(
        tmp_path / "cluster-plugin",
        "cluster = json.loads(os.environ['KUBERNETES_EXEC_INFO'])['spec']['cluster']\n"
        "token = cluster['server'] + '|' + cluster['config']['region']\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind':"
        " 'ExecCredential', 'status': {'token': token}}))\n",
    )
    cluster = {
        "server": "https://h:1",
        "insecure-skip-tls-verify": True,
        "extensions": [
            {"name": "client.authentication.k8s.io/exec", "extension": {"region": "eu-west-1"}}
        ],
    }
    user = exec_user(command, provideClusterInfo=True)
    found = load(str(kubeconfig(tmp_path / "config", user=user, cluster=cluster)))
    assert found.authorization == "Bearer https://h:1|eu-west-1"


def _jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.signature"


def test_oidc_is_the_librarys_and_a_gone_auth_provider_is_refused_by_name(tmp_path: Path) -> None:
    token = _jwt({"sub": "alice", "exp": int(time.time()) + 3600})
    oidc = {"auth-provider": {"name": "oidc", "config": {"id-token": token, "client-id": "k"}}}
    assert load(str(kubeconfig(tmp_path / "oidc", user=oidc))).authorization == f"Bearer {token}"
    gcp = kubeconfig(tmp_path / "gcp", user={"auth-provider": {"name": "gcp"}})
    with pytest.raises(CredentialsError, match=r"auth-provider.name is 'gcp': only oidc") as caught:
        load(str(gcp))
    assert "gke-gcloud-auth-plugin" in str(caught.value)


@pytest.mark.parametrize(
    ("user", "current", "said"),
    [
        ({"token": "t"}, None, "current-context is not set"),
        ({"token": "t"}, "elsewhere", "elsewhere"),
        ({"as-groups": ["ops"], "token": "t"}, "one", "sets as-groups without as"),
        ({"as": ["alice"], "token": "t"}, "one", "users['one'].user.as is ['alice']"),
        ({"as": "a", "as-user-extra": {"k": "v"}, "token": "t"}, "one", "as-user-extra.k is 'v'"),
    ],
)
def test_what_cannot_be_used_is_named(
    tmp_path: Path, user: dict[str, Any], current: str | None, said: str
) -> None:
    path = kubeconfig(tmp_path / "config", user=user, current=current)
    with pytest.raises(CredentialsError, match="kubeconfig ") as caught:
        load(str(path))
    assert said in str(caught.value)
    assert str(path) in str(caught.value)


def test_no_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=f"no kubeconfig at {tmp_path / 'none'}: pass"):
        load(str(tmp_path / "none"))


def test_in_a_pod_the_service_account_is_the_librarys_and_kubeconfigs_still_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cert_file = _self_signed(tmp_path)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_bytes(cert_file.read_bytes())
    (account / "namespace").write_text("gpuval-system\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    found = load(service_account=account)
    assert found.server == "https://[fd00::1]:443"
    assert found.headers() == [("Authorization", "Bearer pod-token")]
    assert (found.namespace, found.token_file) == ("gpuval-system", str(account / "token"))
    assert found.refresh_at() == found.loaded + REREAD
    # kubectl's order: $KUBECONFIG, then ~/.kube/config, before the pod's ServiceAccount.
    home = kubeconfig(
        tmp_path / "home" / ".kube" / "config", user={"token": "home"}, name="h", current="h"
    )
    assert load(service_account=account).authorization == "Bearer home"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    assert load(service_account=account).authorization == "Bearer t"
    home.unlink()
    monkeypatch.delenv("KUBECONFIG")
    (account / "token").unlink()
    with pytest.raises(CredentialsError, match="automountServiceAccountToken"):
        load(service_account=account)


def test_impersonation_becomes_kubectls_headers_a_name_repeated_per_value() -> None:
    user = {
        "as": "alice",
        "as-uid": "42",
        "as-groups": ["ops", "viewers"],
        "as-user-extra": {"scopes": ["view", "edit"], "example.org/team name": ["gpu"]},
    }
    assert impersonation_headers(user, "users['me'].user") == (
        ("Impersonate-User", "alice"),
        ("Impersonate-Uid", "42"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Group", "viewers"),
        ("Impersonate-Extra-scopes", "view"),
        ("Impersonate-Extra-scopes", "edit"),
        ("Impersonate-Extra-example.org%2Fteam%20name", "gpu"),
    )
    assert escape_extra_key("a%b") == "a%25b"
    assert impersonation_headers({"token": "t"}, "u") == ()


def test_a_kubeconfigs_impersonation_reaches_the_identity_after_its_token(tmp_path: Path) -> None:
    user = {"token": "t", "as": "system:serviceaccount:ns:reader", "as-groups": ["g"]}
    found = load(str(kubeconfig(tmp_path / "config", user=user)))
    assert found.headers() == [
        ("Authorization", "Bearer t"),
        ("Impersonate-User", "system:serviceaccount:ns:reader"),
        ("Impersonate-Group", "g"),
    ]


def test_proxies_are_chosen_as_kubectl_chooses_them(tmp_path: Path) -> None:
    env = {"HTTPS_PROXY": "proxy.corp:3128", "NO_PROXY": "internal.corp,10.1.0.0/16"}
    assert env_proxy("https://api.example.com:6443", env) == ("HTTPS_PROXY", "proxy.corp:3128")
    assert choose_proxy("https://api.example.com", None, env, "f") == "http://proxy.corp:3128"
    assert choose_proxy("https://k8s.internal.corp", None, env, "f") is None
    assert choose_proxy("https://10.1.2.3:6443", None, env, "f") is None
    # Go never sends localhost or loopback through the environment's proxy...
    assert choose_proxy("https://127.0.0.1:6443", None, env, "f") is None
    assert choose_proxy("https://localhost:6443", None, env, "f") is None
    # ...but the kubeconfig's proxy-url is used for any server.
    assert choose_proxy("https://127.0.0.1:6443", "http://p:1", env, "f") == "http://p:1"
    assert env_proxy("http://api.example.com", {"http_proxy": "http://p:8"}) == (
        "http_proxy",
        "http://p:8",
    )
    cluster = {"server": SERVER, "insecure-skip-tls-verify": True, "proxy-url": "http://p:3128"}
    found = load(str(kubeconfig(tmp_path / "config", user={"token": "t"}, cluster=cluster)))
    assert found.proxy == "http://p:3128"
    assert configuration(found).proxy == "http://p:3128"


def test_a_socks_proxy_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = {"server": SERVER, "proxy-url": "socks5://p:1080"}
    path = kubeconfig(tmp_path / "config", user={"token": "t"}, cluster=cluster)
    with pytest.raises(CredentialsError, match=r"clusters\['one'\].cluster.proxy-url is 'socks5"):
        load(str(path))
    monkeypatch.setenv("HTTPS_PROXY", "socks5://p:1080")
    with pytest.raises(CredentialsError, match="HTTPS_PROXY is 'socks5://p:1080'"):
        load(str(kubeconfig(tmp_path / "plain", user={"token": "t"})))


def test_a_tls_server_name_is_the_librarys_and_refused_for_the_operators_sessions(
    tmp_path: Path,
) -> None:
    cluster = {"server": SERVER, "tls-server-name": "api.internal"}
    found = load(str(kubeconfig(tmp_path / "config", user={"token": "t"}, cluster=cluster)))
    assert configuration(found).tls_server_name == "api.internal"  # kubectl gpuval honours it
    with pytest.raises(CredentialsError, match=r"tls-server-name \(api.internal\)"):
        check(found)


def test_a_credential_is_loaded_again_a_fifth_of_its_life_early_at_most_five_minutes() -> None:
    loaded = datetime(2026, 1, 1, tzinfo=UTC)
    short = Identity(
        server=SERVER, where="w", loaded=loaded, expires=loaded + timedelta(seconds=30)
    )
    assert short.stale_at() == loaded + timedelta(seconds=24)
    hour = Identity(server=SERVER, where="w", loaded=loaded, expires=loaded + timedelta(hours=1))
    assert hour.stale_at() == loaded + timedelta(minutes=55)
    both = Identity(
        server=SERVER,
        where="w",
        loaded=loaded,
        expires=loaded + timedelta(hours=1),
        token_file="t",
    )
    assert both.refresh_at() == loaded + REREAD
    assert both.stale_at() == loaded + timedelta(minutes=55)  # kopf's session lives until then
