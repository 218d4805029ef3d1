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
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuval_api.baseline.files import to_document
from gpuval_api.baseline.model import GpuBaselineSpec
from gpuval_api.crd import (
    BASELINE_PLURAL,
    GROUP,
    REPORT_PLURAL,
    VALIDATION_PLURAL,
    VERSION,
    GpuBaseline,
    GpuNodeReport,
    GpuValidation,
)
from gpuval_api.labels import children_selector
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
    """Where gpuval's objects are served: its API group and version and the plurals."""

    group: str = GROUP
    version: str = VERSION
    validations: str = VALIDATION_PLURAL
    reports: str = REPORT_PLURAL
    baselines: str = BASELINE_PLURAL


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


def _judged_by(report: Mapping[str, Any]) -> str | None:
    """The GpuBaseline a report's agent judged its node against (its result's `baseline`)."""
    result = (report.get("status") or {}).get("result") or {}
    name = (result.get("baseline") or {}).get("name") if isinstance(result, Mapping) else None
    return name if isinstance(name, str) else None


class Cluster:
    """gpuval's objects in one cluster."""

    def __init__(self, api: client.ApiClient, resources: Resources | None = None) -> None:
        self.api = api
        self.objects = client.CustomObjectsApi(api)
        self.resources = resources or Resources()

    def missing(self) -> list[str]:
        """gpuval's resources the API server does not serve (their CRDs are not installed)."""
        r = self.resources
        wanted = [r.validations, r.reports, r.baselines]
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

    def _get(self, plural: str, name: str, missing: str) -> Mapping[str, Any]:
        """One object; a 404 says `missing` (or that gpuval's CRDs are not installed)."""
        r = self.resources
        try:
            found = self.objects.get_cluster_custom_object(r.group, r.version, plural, name)
            return _mapping(found)
        except ApiException as error:
            if error.status != 404:
                raise _refused(error) from None
            if self.missing():
                raise self._not_found(error) from None
            raise PluginError(missing) from None

    def validation(self, name: str) -> GpuValidation:
        missing = f"GpuValidation {name!r} not found; `kubectl gpuval status` lists them"
        return read_model(GpuValidation, self._get(self.resources.validations, name, missing))

    def run_reports(self, validation: GpuValidation, run: str | None = None) -> list[GpuNodeReport]:
        """The reports of a run of the validation (its current run unless `run` names one)."""
        current = validation.status.run if validation.status else None
        chosen = run or (current.id if current is not None else None)
        if chosen is None:
            raise PluginError(
                f"GpuValidation {validation.metadata.name!r} has not run yet: nothing to read"
            )
        selector = children_selector(validation.metadata.name, chosen)
        items = self._list(self.resources.reports, selector)
        if not items:
            raise PluginError(
                f"run {chosen!r} of GpuValidation {validation.metadata.name!r} has no reports "
                "(runs beyond spec.history are pruned): give --run the id of a kept run"
            )
        return [read_model(GpuNodeReport, item) for item in items]

    def baselines(self) -> list[GpuBaseline]:
        """Every GpuBaseline."""
        return [read_model(GpuBaseline, item) for item in self._list(self.resources.baselines)]

    def baseline(self, name: str) -> GpuBaseline:
        missing = f"GpuBaseline {name!r} not found; `kubectl gpuval baseline show` lists them"
        return read_model(GpuBaseline, self._get(self.resources.baselines, name, missing))

    def put_baseline(self, baseline: GpuBaseline, *, replace: bool) -> str:
        """Create the GpuBaseline, or with `replace` put it over the one of its name; what was
        done ("created", "replaced"). One that exists without `replace` is refused by name."""
        r = self.resources
        body = to_document(baseline)
        name = baseline.metadata.name
        try:
            self.objects.create_cluster_custom_object(r.group, r.version, r.baselines, body)
            return "created"
        except ApiException as error:
            if error.status == 404:
                raise self._not_found(error) from None
            if error.status != 409:
                raise _refused(error) from None
        if not replace:
            raise PluginError(
                f"GpuBaseline {name!r} exists; --replace puts this one over it (a validation in "
                "mode Learn then judges against the new one from its next run)"
            )
        current = self.baseline(name)
        version = (current.metadata.model_extra or {}).get("resourceVersion")
        body["metadata"]["resourceVersion"] = version
        try:
            self.objects.replace_cluster_custom_object(r.group, r.version, r.baselines, name, body)
        except ApiException as error:
            raise _refused(error) from None
        return "replaced"

    def units(self, validation: GpuValidation) -> tuple[list[UnitView], Counter[str]]:
        """The node units of the validation's current run (none before its first run), and how
        many of them each GpuBaseline judged (their agents' comparisons)."""
        run = validation.status.run if validation.status else None
        if run is None:
            return [], Counter()
        selector = children_selector(validation.metadata.name, run.id)
        items = self._list(self.resources.reports, selector)
        reports = [read_model(GpuNodeReport, item) for item in items]
        judged = Counter(name for item in items if (name := _judged_by(item)) is not None)
        return [node_unit(r) for r in reports], judged

    def judged_against(self, judged: Counter[str]) -> tuple[str, GpuBaselineSpec] | None:
        """The GpuBaseline most of the run's nodes were judged against, for the page's bands
        (None when none was, or it is gone)."""
        if not judged:
            return None
        name = judged.most_common(1)[0][0]
        try:
            return name, self.baseline(name).spec
        except PluginError:
            return None
