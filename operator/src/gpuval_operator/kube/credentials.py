"""Where the operator's API client and `kubectl gpuval` find the API server and who they are.

In a pod: the ServiceAccount that Kubernetes mounts (token, CA) and KUBERNETES_SERVICE_HOST/PORT.
Elsewhere: a kubeconfig, read as kubectl reads it. $KUBECONFIG may list several files; the first
definition of a name wins, as does the first current-context; a relative path is relative to the
file that names it. A kubeconfig may give server, certificate-authority(-data) and
insecure-skip-tls-verify for the cluster, and for the user client-certificate(-data) with
client-key(-data), token, tokenFile, username with password, or an exec credential plugin
(client.authentication.k8s.io v1 or v1beta1, which EKS, GKE and AKS use). What the client cannot
honour (the legacy auth-provider plugins, proxy-url, tls-server-name) is refused by name.

What is read becomes one `kopf.ConnectionInfo`: kopf's login hands it to kopf, and the operator's
own client (`load_credentials`) takes its SSL context and Authorization header from it, so both
talk to the API server as the same identity. This replaces the `kubernetes` package, which the
operator used for this lookup alone: its two generated clients (sync and asyncio) were 126 of the
operator image's 241 MB.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSION = "client.authentication.k8s.io/v1"
EXEC_TIMEOUT_SECONDS = 60
_REFUSED = {
    "auth-provider": "the legacy auth-provider plugins are gone from kubectl; use the exec plugin "
    "your provider documents",
    "proxy-url": "set HTTPS_PROXY for the process instead",
    "tls-server-name": "use the name the server's certificate carries in server",
}


class CredentialsError(Exception):
    """No usable credentials: the message names the file, the entry and the field."""


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    ssl_context: ssl.SSLContext | bool
    headers: dict[str, str]
    token_file: str | None = None  # re-read every minute (projected tokens rotate)


def load_credentials(
    kubeconfig: str | None = None, *, service_account: Path = SERVICE_ACCOUNT
) -> Credentials:
    """`kubeconfig`, else $KUBECONFIG, else in-cluster (KUBERNETES_SERVICE_HOST set), else
    ~/.kube/config. Files are read now, so a $KUBECONFIG changed since start-up counts."""
    found = load_connection(kubeconfig, service_account=service_account)
    try:
        context = found.info.as_ssl_context()
    except (OSError, ssl.SSLError, ValueError) as error:
        raise CredentialsError(f"{found.where}: the certificates do not load: {error}") from None
    headers = found.info.as_http_headers()
    return Credentials(found.info.server.rstrip("/"), context, headers, found.token_file)


@dataclass(frozen=True, slots=True)
class Connection:
    """What was read: kopf's ConnectionInfo, where from, and the token file to re-read."""

    info: kopf.ConnectionInfo
    where: str
    token_file: str | None = None


def load_connection(
    kubeconfig: str | None = None, *, service_account: Path = SERVICE_ACCOUNT
) -> Connection:
    """The same choice as load_credentials, as kopf's ConnectionInfo."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not path and host:
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return in_cluster(host, port, service_account)
    listed = (path or "~/.kube/config").split(os.pathsep)
    return from_kubeconfig([Path(p).expanduser() for p in listed if p])


def in_cluster(host: str, port: str, directory: Path) -> Connection:
    token = directory / "token"
    if not token.is_file():
        raise CredentialsError(
            f"KUBERNETES_SERVICE_HOST={host} says this runs in a pod, but {token} is missing: "
            "mount the ServiceAccount token (automountServiceAccountToken) or set KUBECONFIG"
        )
    namespace = directory / "namespace"
    info = kopf.ConnectionInfo(
        server=f"https://{f'[{host}]' if ':' in host else host}:{port}",
        ca_path=str(directory / "ca.crt"),
        token=token.read_text().strip(),
        default_namespace=namespace.read_text().strip() if namespace.is_file() else None,
    )
    return Connection(info, f"the ServiceAccount at {directory}", str(token))


@dataclass(slots=True)
class _Entry:
    body: dict[str, Any]
    directory: Path  # of the file that defined it: relative paths start there


@dataclass(slots=True)
class _Merged:
    where: str
    current: str | None
    entries: dict[str, dict[str, _Entry]]  # section -> name -> entry


def _merge(paths: list[Path]) -> _Merged:
    found = [p for p in paths if p.is_file()]
    if not found:
        raise CredentialsError(f"kubeconfig {os.pathsep.join(str(p) for p in paths)}: no such file")
    merged = _Merged(", ".join(str(p) for p in found), None, {})
    for path in found:
        try:
            config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as error:
            raise CredentialsError(f"kubeconfig {path}: cannot read it: {error}") from None
        if not isinstance(config, dict):
            raise CredentialsError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping)")
        merged.current = merged.current or config.get("current-context") or None
        for section, key in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            entries = merged.entries.setdefault(section, {})
            for item in config.get(section) or []:
                name = item.get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name not in entries:
                    entries[name] = _Entry(item.get(key) or {}, path.parent)
    return merged


def _entry(merged: _Merged, section: str, name: object, named_by: str) -> _Entry:
    entry = merged.entries.get(section, {}).get(name) if isinstance(name, str) else None
    if entry is None:
        raise CredentialsError(
            f"kubeconfig {merged.where}: {named_by} is {name!r}, which names no entry of {section}"
        )
    return entry


def _refuse(merged: _Merged, field: str, body: dict[str, Any]) -> None:
    for key, why in _REFUSED.items():
        if body.get(key):
            raise CredentialsError(
                f"kubeconfig {merged.where}: {field}.{key} is not supported: {why}"
            )


def from_kubeconfig(paths: list[Path]) -> Connection:
    merged = _merge(paths)
    if merged.current is None:
        raise CredentialsError(f"kubeconfig {merged.where}: current-context is not set")
    context = _entry(merged, "contexts", merged.current, "current-context").body
    cluster_name = context.get("cluster")
    cluster = _entry(merged, "clusters", cluster_name, f"contexts[{merged.current!r}].cluster")
    user_name = context.get("user")
    user = (
        _entry(merged, "users", user_name, f"contexts[{merged.current!r}].user")
        if user_name
        else _Entry({}, cluster.directory)
    )
    _refuse(merged, f"clusters[{cluster_name!r}].cluster", cluster.body)
    _refuse(merged, f"users[{user_name!r}].user", user.body)
    server = cluster.body.get("server")
    if not server:
        raise CredentialsError(
            f"kubeconfig {merged.where}: clusters[{cluster_name!r}].cluster.server is not set"
        )
    field = f"kubeconfig {merged.where}: users[{user_name!r}].user"
    user_body = dict(user.body)
    if user_body.get("exec"):
        user_body |= run_exec_plugin(
            user_body["exec"], user.directory, f"{field}.exec", cluster=cluster.body
        )
    token, token_file = _token(user_body, user.directory, field)
    ca = _certificate_authority(cluster, f"kubeconfig {merged.where}: clusters[{cluster_name!r}]")
    cert = _client_certificate(user_body, user.directory, field)
    info = kopf.ConnectionInfo(
        server=str(server),
        insecure=bool(cluster.body.get("insecure-skip-tls-verify")) or None,
        token=token,
        username=user_body.get("username") or None,
        password=user_body.get("password") or None,
        default_namespace=context.get("namespace") or None,
        ca_path=ca.get("path"),
        ca_data=ca.get("data"),
        certificate_path=cert.get("certificate_path"),
        certificate_data=cert.get("certificate_data"),
        private_key_path=cert.get("key_path"),
        private_key_data=cert.get("key_data"),
    )
    return Connection(info, f"kubeconfig {merged.where}", token_file)


def _path(value: object, directory: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else directory / path


def _decoded(value: object, field: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialsError(f"{field}: not base64") from None


def _certificate_authority(cluster: _Entry, field: str) -> dict[str, str]:
    """{"data": PEM} or {"path": file}; nothing: the system's trust store."""
    body = cluster.body
    if body.get("certificate-authority-data"):
        data = _decoded(body["certificate-authority-data"], f"{field}.certificate-authority-data")
        return {"data": data.decode("ascii", "replace")}
    if body.get("certificate-authority"):
        path = _path(body["certificate-authority"], cluster.directory)
        if not path.is_file():
            raise CredentialsError(f"{field}.certificate-authority: {path} does not exist")
        return {"path": str(path)}
    return {}


def _client_certificate(user: dict[str, Any], directory: Path, field: str) -> dict[str, str]:
    """client-certificate(-data) and client-key(-data): {certificate,key}_{data,path} (PEM data or
    file paths), both or neither."""
    found: dict[str, str] = {}
    for kind in ("certificate", "key"):
        if user.get(f"client-{kind}-data"):
            data = _decoded(user[f"client-{kind}-data"], f"{field}.client-{kind}-data")
            found[f"{kind}_data"] = data.decode("ascii", "replace")
        elif user.get(f"client-{kind}"):
            path = _path(user[f"client-{kind}"], directory)
            if not path.is_file():
                raise CredentialsError(f"{field}.client-{kind}: {path} does not exist")
            found[f"{kind}_path"] = str(path)
    if len(found) == 1:
        missing = (
            "client-key" if next(iter(found)).startswith("certificate") else "client-certificate"
        )
        raise CredentialsError(
            f"{field}: {missing}(-data) is missing: a client certificate needs both"
        )
    return found


def _token(user: dict[str, Any], directory: Path, field: str) -> tuple[str | None, str | None]:
    """(the bearer token, the file to re-read it from as it rotates)."""
    if user.get("token"):
        return str(user["token"]), None
    if user.get("tokenFile"):
        path = _path(user["tokenFile"], directory)
        if not path.is_file():
            raise CredentialsError(f"{field}.tokenFile: {path} does not exist")
        return path.read_text().strip(), str(path)
    return None, None


def run_exec_plugin(
    spec: dict[str, Any], directory: Path, field: str, *, cluster: dict[str, Any]
) -> dict[str, Any]:
    """Run the credential plugin as kubectl does; its ExecCredential status as user fields (token,
    client-certificate-data, client-key-data). With provideClusterInfo the plugin is told the
    cluster (server, CA, the exec extension's config). Read once: a long-running process should
    run in a pod, where the ServiceAccount token is re-read."""
    command = spec.get("command")
    if not command:
        raise CredentialsError(f"{field}.command is not set")
    if os.sep in str(command) and not Path(str(command)).is_absolute():
        command = str(directory / str(command))
    api_version = spec.get("apiVersion") or EXEC_API_VERSION
    request: dict[str, Any] = {"interactive": False}
    if spec.get("provideClusterInfo"):
        extensions = {e.get("name"): e.get("extension") for e in cluster.get("extensions") or []}
        request["cluster"] = {
            "server": cluster.get("server"),
            "certificate-authority-data": cluster.get("certificate-authority-data"),
            "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
            "config": extensions.get("client.authentication.k8s.io/exec"),
        }
    info = {"apiVersion": api_version, "kind": "ExecCredential", "spec": request}
    env = dict(os.environ) | {e["name"]: e["value"] for e in spec.get("env") or []}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    argv = [str(command), *(str(a) for a in spec.get("args") or [])]
    try:
        done = subprocess.run(
            argv,
            env=env,
            capture_output=True,
            text=True,
            timeout=EXEC_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        hint = f" ({spec['installHint'].strip()})" if spec.get("installHint") else ""
        raise CredentialsError(f"{field}: {argv[0]} did not run: {error}{hint}") from None
    if done.returncode != 0:
        said = done.stderr.strip()[-400:]
        raise CredentialsError(f"{field}: {argv[0]} exited with {done.returncode}: {said}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (json.JSONDecodeError, AttributeError):
        raise CredentialsError(f"{field}: {argv[0]} printed no ExecCredential JSON") from None
    found: dict[str, Any] = {}
    if status.get("token"):
        found["token"] = status["token"]
    for source, target in (("clientCertificateData", "certificate"), ("clientKeyData", "key")):
        if status.get(source):
            # PEM text in the ExecCredential; the kubeconfig's own -data fields are base64.
            found[f"client-{target}-data"] = base64.b64encode(status[source].encode()).decode()
    if not found:
        raise CredentialsError(f"{field}: {argv[0]} returned neither a token nor a certificate")
    return found
