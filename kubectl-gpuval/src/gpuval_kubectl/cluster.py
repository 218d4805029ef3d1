"""What kubectl gpuval reads from the cluster, through the `kubernetes` client.

Credentials are the operator's (gpuval_credentials, the library's loaders): `--kubeconfig`, else
$KUBECONFIG (several files merged, as kubectl merges them), else ~/.kube/config, else, in a pod,
its ServiceAccount. Exec credential plugins (run again before their token expires and after a
401), client certificates, tokens, oidc, `proxy-url` and the environment's HTTPS_PROXY/NO_PROXY,
and the user's impersonation (`as`, `as-groups`, `as-uid`, `as-user-extra`) behave as for kubectl;
what cannot be honoured is refused by name.

Reads go through the CustomObjectsApi as plain dicts, a page of 500 reports at a time (a report
carries the agent's whole result document), and objects written by a newer gpuval are read with
their unknown fields dropped (gpuval_api.lenient). A 404 is told apart: a GpuValidation that does
not exist, or gpuval's CRDs not installed at all (the API server serves no gpuval.dev).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
from gpuval_api.release import Release
from gpuval_api.views import UnitView, node_unit
from gpuval_credentials import CredentialsError, load
from gpuval_credentials.sync import SyncLogin

PAGE = 500
T = TypeVar("T")
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


def connect(kubeconfig: str | None = None, context: str | None = None) -> SyncLogin:
    """The kubeconfig's (or the pod's) identity and the library's client for it."""
    try:
        return SyncLogin(lambda: load(kubeconfig, context))
    except CredentialsError as error:
        raise PluginError(str(error)) from None


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

    def __init__(self, login: SyncLogin, resources: Resources | None = None) -> None:
        self.login = login
        self.objects = client.CustomObjectsApi(login.api)
        self.resources = resources or Resources()

    def _call(self, read: Callable[[client.CustomObjectsApi], T]) -> T:
        """One read; after a 401 the identity is loaded again (a plugin run, a file re-read)
        and the read made once more."""
        try:
            return read(self.objects)
        except ApiException as error:
            if error.status != 401:
                raise
        try:
            self.objects = client.CustomObjectsApi(self.login.login_again())
        except CredentialsError as error:
            raise PluginError(str(error)) from None
        return read(self.objects)

    def missing(self) -> list[str]:
        """gpuval's resources the API server does not serve (their CRDs are not installed)."""
        r = self.resources
        wanted = [r.validations, r.reports]
        try:
            found = self._call(lambda api: api.get_api_resources(r.group, r.version))
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

    def _page(self, plural: str, selector: str, token: str | None) -> Mapping[str, Any]:
        r = self.resources
        return _mapping(
            self._call(
                lambda api: api.list_cluster_custom_object(
                    r.group,
                    r.version,
                    plural,
                    label_selector=selector,
                    limit=PAGE,
                    _continue=token,
                )
            )
        )

    def _list(self, plural: str, selector: str = "") -> list[dict[str, Any]]:
        """Every object of `plural` (paged); listed again from the start should the list
        change too much to page through (410)."""
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = self._page(plural, selector, token)
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
            body = self._call(
                lambda api: api.get_cluster_custom_object(r.group, r.version, r.validations, name)
            )
        except ApiException as error:
            if error.status != 404:
                raise _refused(error) from None
            if self.missing():
                raise self._not_found(error) from None
            raise PluginError(
                f"GpuValidation {name!r} not found; `kubectl gpuval status` lists them"
            ) from None
        return read_model(GpuValidation, _mapping(body))

    def release(self, name: str, now: float) -> tuple[GpuValidation, Release]:
        """Release the validation's held node actions: the annotation gpuval.dev/release naming
        its current run and `now` (gpuval_api.release), set with a merge patch."""
        validation = self.validation(name)
        run = validation.status.run if validation.status else None
        release = Release(run.id if run is not None else "", now)
        body = {"metadata": {"annotations": {keys.ANNOTATION_RELEASE: release.encode()}}}
        r = self.resources
        try:
            self.objects.patch_cluster_custom_object(r.group, r.version, r.validations, name, body)
        except ApiException as error:
            raise _refused(error) from None
        return validation, release

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
