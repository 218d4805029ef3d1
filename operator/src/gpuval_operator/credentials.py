"""Where the operator's API client and `kubectl gpuval` find the API server and who they are.

In a pod: the ServiceAccount that Kubernetes mounts (token, CA) and KUBERNETES_SERVICE_HOST/PORT.
Elsewhere: a kubeconfig, read as kubectl reads it. $KUBECONFIG may list several files; the first
definition of a name wins, as does the first current-context; a relative path is relative to the
file that names it. A kubeconfig may give server, certificate-authority(-data) and
insecure-skip-tls-verify for the cluster, and for the user client-certificate(-data) with
client-key(-data), token, tokenFile, username with password, or an exec credential plugin
(client.authentication.k8s.io v1 or v1beta1, which EKS, GKE and AKS use). What the client cannot
honour (the legacy auth-provider plugins, proxy-url, tls-server-name) is refused by name.

This replaces the `kubernetes` package, which the operator used for this lookup alone: its two
generated clients (sync and asyncio) were 126 of the operator image's 241 MB.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    path = kubeconfig or os.environ.get("KUBECONFIG")
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not path and host:
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return in_cluster(host, port, service_account)
    listed = (path or "~/.kube/config").split(os.pathsep)
    return from_kubeconfig([Path(p).expanduser() for p in listed if p])


def in_cluster(host: str, port: str, directory: Path) -> Credentials:
    token = directory / "token"
    if not token.is_file():
        raise CredentialsError(
            f"KUBERNETES_SERVICE_HOST={host} says this runs in a pod, but {token} is missing: "
            "mount the ServiceAccount token (automountServiceAccountToken) or set KUBECONFIG"
        )
    server = f"[{host}]" if ":" in host else host
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    headers = {"Authorization": f"Bearer {token.read_text().strip()}"}
    return Credentials(f"https://{server}:{port}", context, headers, str(token))


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


def from_kubeconfig(paths: list[Path]) -> Credentials:
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
    context_ssl = _ssl_context(cluster, f"kubeconfig {merged.where}: clusters[{cluster_name!r}]")
    _load_client_certificate(context_ssl, user_body, user.directory, field)
    headers, token_file = _authorization(user_body, user.directory, field)
    return Credentials(str(server).rstrip("/"), context_ssl, headers, token_file)


def _path(value: object, directory: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else directory / path


def _decoded(value: object, field: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialsError(f"{field}: not base64") from None


def _ssl_context(cluster: _Entry, field: str) -> ssl.SSLContext:
    body = cluster.body
    if body.get("insecure-skip-tls-verify"):
        # The server is not verified; a client certificate is still presented.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if body.get("certificate-authority-data"):
        data = _decoded(body["certificate-authority-data"], f"{field}.certificate-authority-data")
        return ssl.create_default_context(cadata=data.decode("ascii", "replace"))
    if body.get("certificate-authority"):
        path = _path(body["certificate-authority"], cluster.directory)
        if not path.is_file():
            raise CredentialsError(f"{field}.certificate-authority: {path} does not exist")
        return ssl.create_default_context(cafile=str(path))
    return ssl.create_default_context()


def _load_client_certificate(
    context: ssl.SSLContext, user: dict[str, Any], directory: Path, field: str
) -> None:
    """client-certificate(-data) and client-key(-data) into `context`; data fields pass
    through a private temporary directory that is gone when this returns."""
    parts: dict[str, Path | bytes] = {}
    for kind in ("certificate", "key"):
        if user.get(f"client-{kind}-data"):
            parts[kind] = _decoded(user[f"client-{kind}-data"], f"{field}.client-{kind}-data")
        elif user.get(f"client-{kind}"):
            parts[kind] = _path(user[f"client-{kind}"], directory)
    if not parts:
        return
    if len(parts) == 1:
        missing = "client-key" if "certificate" in parts else "client-certificate"
        raise CredentialsError(
            f"{field}: {missing}(-data) is missing: a client certificate needs both"
        )
    with tempfile.TemporaryDirectory(prefix="gpuval-credentials-") as private:
        files = []
        for kind, value in parts.items():
            target = value if isinstance(value, Path) else Path(private) / kind
            if isinstance(value, bytes):
                target.write_bytes(value)
            files.append(str(target))
        try:
            context.load_cert_chain(files[0], files[1])
        except (OSError, ssl.SSLError) as error:
            raise CredentialsError(
                f"{field}: the client certificate does not load: {error}"
            ) from None


def _authorization(
    user: dict[str, Any], directory: Path, field: str
) -> tuple[dict[str, str], str | None]:
    if user.get("token"):
        return {"Authorization": f"Bearer {user['token']}"}, None
    if user.get("tokenFile"):
        path = _path(user["tokenFile"], directory)
        if not path.is_file():
            raise CredentialsError(f"{field}.tokenFile: {path} does not exist")
        return {"Authorization": f"Bearer {path.read_text().strip()}"}, str(path)
    if user.get("username") and user.get("password"):
        pair = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}, None
    return {}, None


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
            argv, env=env, capture_output=True, text=True, timeout=EXEC_TIMEOUT_SECONDS,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
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
