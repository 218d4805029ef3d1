"""Loading an identity with the `kubernetes` package's own loaders: a kubeconfig
(kubernetes.config.kube_config) or a pod's ServiceAccount (kubernetes.config.incluster_config).

Which one, in kubectl's order: the kubeconfig named by the caller, else $KUBECONFIG (its files
merged, the first definition of a name and the first current-context winning), else
~/.kube/config when it exists, else, in a pod (KUBERNETES_SERVICE_HOST set), its ServiceAccount.

The package does the reading: client certificates and keys (files or -data), token and tokenFile,
username and password, exec credential plugins (their expirationTimestamp kept) and oidc (an
expired id-token refreshed and written back to the kubeconfig, as kubectl does). gpuval adds what
the package leaves out (impersonation, the environment's proxies as kubectl reads them, the first
current-context of merged files) and refuses by name what neither can do.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

from gpuval_credentials.errors import CredentialsError
from gpuval_credentials.identity import Identity, utc_now
from gpuval_credentials.impersonation import impersonation_headers
from gpuval_credentials.proxies import choose_proxy

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HOME_KUBECONFIG = "~/.kube/config"
# What the package's loaders raise on a kubeconfig they cannot use.
_UNUSABLE = (ConfigException, OSError, yaml.YAMLError, ValueError, TypeError, KeyError)
# The one auth-provider the package and kubectl still have; gcp and azure left kubectl in 1.26.
_AUTH_PROVIDERS = ("oidc",)


def load(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    service_account: Path = SERVICE_ACCOUNT,
    environ: Mapping[str, str] | None = None,
) -> Identity:
    """The identity to use now; CredentialsError names what is missing or refused."""
    env = os.environ if environ is None else environ
    listed = kubeconfig or env.get("KUBECONFIG")
    if listed:
        # os.path, not pathlib: a `~` it cannot expand (no home) stays as written and is
        # reported as a missing file, where pathlib would raise.
        paths = [Path(os.path.expanduser(p)) for p in listed.split(os.pathsep) if p]
        return from_kubeconfig(paths, context, env)
    home = home_kubeconfig()
    if (home is None or not home.is_file()) and env.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(service_account, env)
    if home is None:
        raise CredentialsError(
            f"no kubeconfig: KUBECONFIG is not set, this process has no home directory for "
            f"{HOME_KUBECONFIG} (HOME is not set and UID {os.getuid()} has no passwd entry), and "
            "KUBERNETES_SERVICE_HOST is not set (not in a pod): set KUBECONFIG or HOME"
        )
    return from_kubeconfig([home], context, env)


def home_kubeconfig() -> Path | None:
    """~/.kube/config; None when this process has no home directory: HOME unset under a UID
    without a passwd entry (OpenShift's arbitrary UIDs, a runAsUser the image does not list)."""
    try:
        return Path(HOME_KUBECONFIG).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        return None


def _bearer(value: str | None) -> str | None:
    """The Authorization value as sent: the package reads token files with their newline and
    spells the in-cluster scheme `bearer`."""
    if not value:
        return None
    scheme, _, rest = value.strip().partition(" ")
    return f"Bearer {rest.strip()}" if scheme.lower() == "bearer" else value.strip()


def in_cluster(directory: Path, environ: Mapping[str, str]) -> Identity:
    token = directory / "token"
    configuration = Configuration()
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(token),
        cert_filename=str(directory / "ca.crt"),
        try_refresh_token=False,
        environ=environ,
    )
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as error:
        host = environ.get("KUBERNETES_SERVICE_HOST")
        raise CredentialsError(
            f"KUBERNETES_SERVICE_HOST={host} says this runs in a pod, but its ServiceAccount at "
            f"{directory} cannot be used ({error}): mount the ServiceAccount token "
            "(automountServiceAccountToken) or set KUBECONFIG"
        ) from None
    namespace = directory / "namespace"
    server = str(configuration.host)
    return Identity(
        server=server,
        where=f"the ServiceAccount at {directory}",
        authorization=_bearer(configuration.api_key.get("BearerToken")),
        ca_file=configuration.ssl_ca_cert,
        proxy=choose_proxy(server, None, environ, "proxy"),
        namespace=namespace.read_text().strip() if namespace.is_file() else None,
        token_file=str(token),
    )


class _Errors(logging.Handler):
    """What the package logs instead of raising while it loads (a failed exec plugin is logged
    with logging.error and leaves the client with no credentials): kept, from this thread only,
    and printed nowhere."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())


@contextmanager
def _kept_errors() -> Iterator[_Errors]:
    handler = _Errors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _read(paths: list[Path]) -> tuple[KubeConfigMerger, str]:
    found = [p for p in paths if p.is_file()]
    if not found:
        where = os.pathsep.join(map(str, paths))
        raise CredentialsError(
            f"no kubeconfig at {where}: pass --kubeconfig FILE or set KUBECONFIG "
            "(in a pod, the ServiceAccount is used when neither is set)"
        )
    where = os.pathsep.join(map(str, found))
    try:
        merger = KubeConfigMerger(where)  # type: ignore[no-untyped-call]
    except _UNUSABLE as error:
        raise CredentialsError(f"kubeconfig {where}: cannot read it: {error}") from None
    if merger.config is None:
        raise CredentialsError(f"kubeconfig {where}: no configuration in it")
    return merger, where


def _entry(merger: KubeConfigMerger, section: str, name: object) -> Any:
    if not isinstance(name, str) or not merger.config.safe_get(section):
        return None
    return merger.config[section].get_with_name(name, safe=True)


def _refuse(user: Mapping[str, Any], field: str) -> None:
    provider = user.get("auth-provider")
    name = provider.get("name") if isinstance(provider, Mapping) else None
    if provider and name not in _AUTH_PROVIDERS:
        raise CredentialsError(
            f"{field}.auth-provider.name is {name!r}: only oidc is still an auth-provider "
            "(kubectl 1.26 dropped gcp and azure); use the exec credential plugin your provider "
            "documents (gke-gcloud-auth-plugin, kubelogin)"
        )


def _authenticate(loader: Any, user: Mapping[str, Any], field: str) -> Configuration:
    """The package's loader run: the user's credentials (an exec plugin run, a token file read)
    and the cluster's, as a client Configuration; what it logged instead of raising, raised."""
    configuration = Configuration()
    with _kept_errors() as errors:
        try:
            loader.load_and_set(configuration)
        except _UNUSABLE as error:
            raise CredentialsError(f"{field}: {error}") from None
    if errors.messages:
        spec = user.get("exec")
        hint = spec.get("installHint") if isinstance(spec, Mapping) else None
        raise CredentialsError(
            f"{field}{'.exec' if spec else ''}: {'; '.join(errors.messages)}"
            + (f" ({str(hint).strip()})" if hint else "")
        )
    return configuration


def _expiry(loader: Any, field: str) -> datetime | None:
    """An exec credential's expirationTimestamp (the package keeps it for its own refresh); one
    that has passed already is refused."""
    expires: datetime | None = getattr(loader, "expiry", None)
    if expires is not None and expires <= utc_now():
        raise CredentialsError(
            f"{field}.exec: the plugin returned a credential that expired at "
            f"{expires.isoformat()}: it must return a current one (log in again with the "
            "provider's own tool)"
        )
    return expires


def from_kubeconfig(paths: list[Path], context: str | None, environ: Mapping[str, str]) -> Identity:
    merger, files = _read(paths)
    firsts = (c.get("current-context") for c in merger.config_files.values() if c)
    current = context or next((c for c in firsts if c), None)
    if not current:
        raise CredentialsError(
            f"kubeconfig {files}: current-context is not set; set it (kubectl config "
            "use-context NAME) or name a context (kubectl gpuval --context NAME)"
        )
    try:
        loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=merger.config,
            active_context=current,
            config_base_path=None,
            config_persister=merger.save_changes,
        )
    except _UNUSABLE as error:
        raise CredentialsError(f"kubeconfig {files}: context {current!r}: {error}") from None
    names = loader.current_context.get("context") or {}
    user_name, cluster_name = names.get("user"), names.get("cluster")
    user_entry = _entry(merger, "users", user_name)
    user: dict[str, Any] = (user_entry.safe_get("user") if user_entry else None) or {}
    cluster: dict[str, Any] = _entry(merger, "clusters", cluster_name).safe_get("cluster") or {}
    field = f"kubeconfig {files}: users[{user_name!r}].user"
    _refuse(user, field)
    impersonation = impersonation_headers(user, field)
    configuration = _authenticate(loader, user, field)
    server = str(configuration.host)
    token_file = user.get("tokenFile") if not user.get("token") else None
    return Identity(
        server=server,
        where=f"kubeconfig {files} (context {current!r}, user {user_name!r})",
        authorization=_bearer(configuration.api_key.get("BearerToken")),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        tls_server_name=configuration.tls_server_name,
        proxy=choose_proxy(
            server,
            cluster.get("proxy-url"),
            environ,
            f"kubeconfig {files}: clusters[{cluster_name!r}].cluster.proxy-url",
        ),
        impersonation=impersonation,
        namespace=names.get("namespace") or None,
        expires=_expiry(loader, field),
        token_file=str(token_file) if token_file else None,
    )
