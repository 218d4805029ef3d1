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

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuval_api import keys, label_value
from gpuval_api.baseline.files import to_document
from gpuval_api.baselinemodel import GpuBaselineSpec
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
    """Where gpuval's objects are served: its API group and version and the plurals."""

    group: str = GROUP
    version: str = VERSION
    validations: str = VALIDATION_PLURAL
    reports: str = REPORT_PLURAL
    baselines: str = BASELINE_PLURAL


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


def _judged_by(report: Mapping[str, Any]) -> str | None:
    """The GpuBaseline a report's agent judged its node against (its result's `baseline`)."""
    result = (report.get("status") or {}).get("result") or {}
    name = (result.get("baseline") or {}).get("name") if isinstance(result, Mapping) else None
    return name if isinstance(name, str) else None


class Cluster:
    """gpuval's objects in one cluster."""

    def __init__(self, login: SyncLogin, resources: Resources | None = None) -> None:
        self.login = login
        self.objects = client.CustomObjectsApi(login.api)
        self.resources = resources or Resources()

    @property
    def api(self) -> client.ApiClient:
        """The client of the identity as loaded last (after a 401, the new one)."""
        return self.login.api

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
        wanted = [r.validations, r.reports, r.baselines]
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

    def _get(self, plural: str, name: str, missing: str) -> Mapping[str, Any]:
        """One object; a 404 says `missing` (or that gpuval's CRDs are not installed)."""
        r = self.resources
        try:
            return _mapping(
                self._call(
                    lambda api: api.get_cluster_custom_object(r.group, r.version, plural, name)
                )
            )
        except ApiException as error:
            if error.status != 404:
                raise _refused(error) from None
            if self.missing():
                raise self._not_found(error) from None
            raise PluginError(missing) from None

    def validation(self, name: str) -> GpuValidation:
        missing = f"GpuValidation {name!r} not found; `kubectl gpuval status` lists them"
        return read_model(GpuValidation, self._get(self.resources.validations, name, missing))

    def release(
        self, name: str, now: float, *, repair: bool = False
    ) -> tuple[GpuValidation, Release]:
        """Release the validation's held node actions: the annotation gpuval.dev/release naming
        its current run and `now` (gpuval_api.release), set with a merge patch; `repair`: the
        repairs of a systemic failure asked too."""
        validation = self.validation(name)
        run = validation.status.run if validation.status else None
        release = Release(run.id if run is not None else "", now, repair)
        body = {"metadata": {"annotations": {keys.ANNOTATION_RELEASE: release.encode()}}}
        r = self.resources
        try:
            self._call(
                lambda api: api.patch_cluster_custom_object(
                    r.group, r.version, r.validations, name, body
                )
            )
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

    def put_baseline(self, baseline: GpuBaseline, *, replace: bool, dry_run: bool = False) -> str:
        """Create the GpuBaseline, or with `replace` put it over the one of its name; what was
        done ("created", "replaced"). One that exists without `replace` is refused by name.
        With `dry_run` the API server validates and admits the write as it would (schema,
        name, admission) and stores nothing (`dryRun=All`)."""
        r = self.resources
        body = to_document(baseline)
        name = baseline.metadata.name
        dry = "All" if dry_run else None
        try:
            self._call(
                lambda api: api.create_cluster_custom_object(
                    r.group, r.version, r.baselines, body, dry_run=dry
                )
            )
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
            self._call(
                lambda api: api.replace_cluster_custom_object(
                    r.group, r.version, r.baselines, name, body, dry_run=dry
                )
            )
        except ApiException as error:
            raise _refused(error) from None
        return "replaced"

    def delete_baseline(self, name: str) -> None:
        r = self.resources
        try:
            self._call(
                lambda api: api.delete_cluster_custom_object(r.group, r.version, r.baselines, name)
            )
        except ApiException as error:
            if error.status != 404:
                raise _refused(error) from None

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
