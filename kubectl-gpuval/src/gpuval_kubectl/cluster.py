"""What kubectl gpuval reads from the cluster, through the `kubernetes` client.

Credentials are the library's: `--kubeconfig`, else $KUBECONFIG (several files merged, as kubectl
merges them), else ~/.kube/config, else, in a pod, its ServiceAccount. So exec credential plugins
(run again when their token expires), client certificates, tokens, oidc and `proxy-url` behave as
the library makes them behave. What it cannot do is refused by name: impersonation (`as:`,
`as-groups`, `as-uid`, `as-user-extra` in the kubeconfig's user), which it would silently ignore,
so the plugin would read as someone else than the kubeconfig says.

Reads go through the CustomObjectsApi as plain dicts, a page of 500 reports at a time (a report
carries the agent's whole result document), and objects written by a newer gpuval are read with
their unknown fields dropped (gpuval_api.lenient). A 404 is told apart: a GpuValidation that does
not exist, or gpuval's CRDs not installed at all (the API server serves no gpuval.dev).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuval_api import keys
from gpuval_api.crd import (
    GROUP,
    REPORT_PLURAL,
    VALIDATION_PLURAL,
    VERSION,
    GpuNodeReport,
    GpuValidation,
)
from gpuval_api.labels import children_selector, label_value
from gpuval_api.lenient import read_model
from gpuval_api.views import UnitView, node_unit

PAGE = 500
IMPERSONATION = ("as", "as-groups", "as-uid", "as-user-extra")
INSTALL_CRDS = (
    "install gpuval (helm install gpuval charts/gpuval: the chart carries the CRDs) or only its "
    "CRDs (kubectl apply --server-side -f charts/gpuval/crds/); docs/install.md"
)


class PluginError(Exception):
    """What kubectl gpuval tells the user instead of a traceback."""


@dataclass(frozen=True, slots=True)
class Resources:
    """Where gpuval's objects are served: its API group and version and the two plurals."""

    group: str = GROUP
    version: str = VERSION
    validations: str = VALIDATION_PLURAL
    reports: str = REPORT_PLURAL


def _kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    listed = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]


def _refuse_impersonation(paths: list[Path], context: str | None) -> None:
    """The kubernetes client ignores a kubeconfig user's impersonation fields: refuse them."""
    documents: list[Mapping[str, Any]] = []
    for path in paths:
        if path.is_file():
            loaded = yaml.safe_load(path.read_text()) or {}
            if isinstance(loaded, Mapping):
                documents.append(loaded)
    named = (str(d["current-context"]) for d in documents if d.get("current-context"))
    current = context or next(named, "")
    contexts: dict[str, Mapping[str, Any]] = {}
    users: dict[str, Mapping[str, Any]] = {}
    for doc in documents:  # the first definition of a name wins, as kubectl merges
        for entry in doc.get("contexts") or []:
            contexts.setdefault(str(entry.get("name")), entry.get("context") or {})
        for entry in doc.get("users") or []:
            users.setdefault(str(entry.get("name")), entry.get("user") or {})
    user_name = str((contexts.get(current) or {}).get("user"))
    asked = [key for key in IMPERSONATION if (users.get(user_name) or {}).get(key)]
    if asked:
        raise PluginError(
            f"the kubeconfig's user {user_name!r} (context {current!r}) impersonates "
            f"({', '.join(asked)}): the kubernetes Python client does not support that and would "
            "read as the user itself; use a kubeconfig whose user is the identity to read as"
        )


def connect(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client with the kubeconfig's (or the pod's) credentials."""
    paths = _kubeconfig_paths(kubeconfig)
    in_pod = (
        not kubeconfig
        and not os.environ.get("KUBECONFIG")
        and not any(p.is_file() for p in paths)
        and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )
    if not in_pod and not any(p.is_file() for p in paths):
        where = os.pathsep.join(map(str, paths))
        raise PluginError(
            f"no kubeconfig at {where}: pass --kubeconfig FILE or set KUBECONFIG (kubectl hands "
            "its plugins KUBECONFIG from the environment)"
        )
    configuration = client.Configuration()
    # kubernetes.config carries no annotations (its generated client does): the two calls below.
    try:
        if in_pod:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            _refuse_impersonation(paths, context)
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.pathsep.join(str(p) for p in paths),
                context=context,
                client_configuration=configuration,
            )
    except (ConfigException, OSError, yaml.YAMLError) as error:
        where = "the pod's ServiceAccount" if in_pod else os.pathsep.join(map(str, paths))
        raise PluginError(f"cannot use the credentials of {where}: {error}") from None
    return client.ApiClient(configuration)


def _mapping(answer: object) -> Mapping[str, Any]:
    """The API server's JSON answer as the client hands it back (a dict for custom objects)."""
    if not isinstance(answer, Mapping):
        raise PluginError(f"the API server answered something that is not an object: {answer!r}")
    return answer


def _refused(error: ApiException) -> PluginError:
    message = error.reason or ""
    try:
        body = yaml.safe_load(error.body or "")
        if isinstance(body, Mapping) and body.get("message"):
            message = str(body["message"])
    except yaml.YAMLError:
        pass
    return PluginError(f"the API server refused: HTTP {error.status}: {message}")


class Cluster:
    """gpuval's objects in one cluster."""

    def __init__(self, api: client.ApiClient, resources: Resources | None = None) -> None:
        self.api = api
        self.objects = client.CustomObjectsApi(api)
        self.resources = resources or Resources()

    def missing(self) -> list[str]:
        """gpuval's resources the API server does not serve (their CRDs are not installed)."""
        r = self.resources
        wanted = [r.validations, r.reports]
        try:
            found = self.objects.get_api_resources(r.group, r.version)
        except ApiException as error:
            if error.status == 404:  # the group/version itself is not served
                return wanted
            raise _refused(error) from None
        served = {resource.name for resource in found.resources}
        return [plural for plural in wanted if plural not in served]

    def _not_found(self, error: ApiException) -> PluginError:
        """A 404: gpuval's CRDs missing (said so, with how to install them), or the server's
        own words."""
        missing = self.missing()
        if not missing:
            return _refused(error)
        r = self.resources
        served = ", ".join(f"{plural}.{r.group}/{r.version}" for plural in missing)
        return PluginError(
            f"gpuval's CRDs are not installed in this cluster (the API server serves no "
            f"{served}): {INSTALL_CRDS}"
        )

    def _list(self, plural: str, selector: str = "") -> list[dict[str, Any]]:
        """Every object of `plural` (paged); listed again from the start should the list
        change too much to page through (410)."""
        r = self.resources
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = _mapping(
                        self.objects.list_cluster_custom_object(
                            r.group,
                            r.version,
                            plural,
                            label_selector=selector,
                            limit=PAGE,
                            _continue=token,
                        )
                    )
                    items.extend(page.get("items") or [])
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        return items
            except ApiException as error:
                if error.status == 410 and token:
                    continue
                if error.status == 404:
                    raise self._not_found(error) from None
                raise _refused(error) from None

    def validations(self) -> list[GpuValidation]:
        """Every GpuValidation."""
        items = self._list(self.resources.validations)
        return [read_model(GpuValidation, item) for item in items]

    def validation(self, name: str) -> GpuValidation:
        r = self.resources
        try:
            body = self.objects.get_cluster_custom_object(r.group, r.version, r.validations, name)
        except ApiException as error:
            if error.status != 404:
                raise _refused(error) from None
            if self.missing():
                raise self._not_found(error) from None
            raise PluginError(
                f"GpuValidation {name!r} not found; `kubectl gpuval status` lists them"
            ) from None
        return read_model(GpuValidation, _mapping(body))

    def node_reports(
        self, node: str, validation: str | None = None, run: str | None = None
    ) -> list[dict[str, Any]]:
        """The GpuNodeReports of `node` (of one validation and run, when given) as the API
        server's JSON: every run the operators kept, of every validation."""
        parts = [f"{keys.LABEL_NODE}={label_value(node)}"]
        if validation is not None:
            parts.append(f"{keys.LABEL_VALIDATION}={label_value(validation)}")
        if run is not None:
            parts.append(f"{keys.LABEL_RUN}={label_value(run)}")
        return self._list(self.resources.reports, ",".join(parts))

    def units(self, validation: GpuValidation) -> list[UnitView]:
        """The node units of the validation's current run (none before its first run)."""
        run = validation.status.run if validation.status else None
        if run is None:
            return []
        selector = children_selector(validation.metadata.name, run.id)
        items = self._list(self.resources.reports, selector)
        return [node_unit(read_model(GpuNodeReport, item)) for item in items]
