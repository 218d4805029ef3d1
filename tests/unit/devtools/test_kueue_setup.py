"""Kueue on the local control plane: its manifests' webhooks moved to loopback, the manager's
configuration, its certificate, the queues, and the pod-group metadata gpuval writes."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_api.kueue import (
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    QUEUE_NAME_LABEL,
    RETRIABLE_IN_GROUP_ANNOTATION,
    PodGroup,
)
from gpuval_devtools import binaries
from gpuval_devtools.kueue import certs, manifests
from gpuval_devtools.kueue.manifests import ManifestError

URL = "https://127.0.0.1:40123"
CA = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
SERVICE = {"name": manifests.WEBHOOK_SERVICE, "namespace": manifests.NAMESPACE}


def _webhooks(kind: str, *paths: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"kueue-{kind.lower()}"},
        "webhooks": [
            {
                "name": f"h{i}.kb.io",
                "clientConfig": {"service": {**SERVICE, "path": path}},
                "failurePolicy": "Fail",
                "namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
            }
            for i, path in enumerate(paths)
        ],
    }


def _crd(name: str, conversion: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "kueue.x-k8s.io"}
    if conversion is not None:
        spec["conversion"] = conversion
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": spec,
    }


def _rendered() -> list[dict[str, Any] | None]:
    webhook_conversion = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"service": {**SERVICE, "path": "/convert"}},
            "conversionReviewVersions": ["v1"],
        },
    }
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    config |= {"clientConnection": {"qps": 50, "burst": 100}, "featureGates": {"Foo": True}}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": manifests.NAMESPACE}},
        _crd("workloads.kueue.x-k8s.io", webhook_conversion),
        _crd("topologies.kueue.x-k8s.io", None),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kueue-cm"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": manifests.WEBHOOK_SERVICE}},
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta2.visibility.kueue.x-k8s.io"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": manifests.CONFIG_MAP},
            "data": {manifests.CONFIG_KEY: yaml.safe_dump(config)},
        },
        _webhooks("MutatingWebhookConfiguration", "/mutate--v1-pod"),
        _webhooks("ValidatingWebhookConfiguration", "/validate--v1-pod", "/validate-x"),
        None,
    ]


def test_split_keeps_what_a_cluster_needs_and_leaves_the_in_cluster_deployment_out() -> None:
    rendered = manifests.split(_rendered())
    assert [o["kind"] for o in rendered.cluster_objects] == [
        "Namespace",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
    ]
    assert sorted(o["kind"] for o in rendered.webhook_configurations) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    assert rendered.manager_config["clientConnection"] == {"qps": 50, "burst": 100}


def test_split_refuses_manifests_without_the_manager_configuration() -> None:
    docs = [d for d in _rendered() if not d or d["kind"] != "ConfigMap"]
    with pytest.raises(ManifestError, match=manifests.CONFIG_MAP):
        manifests.split(docs)


def test_every_admission_webhook_calls_its_path_on_loopback_trusting_the_ca() -> None:
    hooks = _webhooks("ValidatingWebhookConfiguration", "/validate--v1-pod", "/validate-x")
    moved = manifests.on_loopback(hooks, URL, CA)
    assert [h["clientConfig"] for h in moved["webhooks"]] == [
        {"url": f"{URL}/validate--v1-pod", "caBundle": base64.b64encode(CA).decode()},
        {"url": f"{URL}/validate-x", "caBundle": base64.b64encode(CA).decode()},
    ]
    assert moved["webhooks"][0]["namespaceSelector"] == hooks["webhooks"][0]["namespaceSelector"]
    assert "url" not in hooks["webhooks"][0]["clientConfig"], "the input is left as it was"


def test_a_crds_conversion_webhook_moves_to_loopback_and_other_crds_stay_as_they_are() -> None:
    docs = _rendered()
    converting, plain = (manifests.on_loopback(d, URL, CA) for d in docs[1:3] if d)
    client = converting["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client == {"url": f"{URL}/convert", "caBundle": base64.b64encode(CA).decode()}
    assert plain == docs[2]


def test_a_webhook_of_another_service_is_refused_naming_it() -> None:
    hooks = _webhooks("MutatingWebhookConfiguration", "/m")
    hooks["webhooks"][0]["clientConfig"]["service"]["name"] = "other-svc"
    with pytest.raises(ManifestError, match="other-svc"):
        manifests.on_loopback(hooks, URL, CA)


def test_manager_config_serves_on_loopback_and_manages_only_opted_in_namespaces() -> None:
    base = manifests.split(_rendered()).manager_config
    config = manifests.manager_config(base, webhook_port=40123, health_port=40124, cert_dir="/c")
    assert config["webhook"] == {"host": "127.0.0.1", "port": 40123, "certDir": "/c"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:40124"
    assert config["metrics"]["bindAddress"] == "0"
    assert config["integrations"] == {"frameworks": ["batch/job", "pod"]}
    assert config["managedJobsNamespaceSelector"] == {
        "matchLabels": {manifests.MANAGED_NAMESPACE_LABEL: "true"}
    }
    assert config["featureGates"] == {"Foo": True, "VisibilityOnDemand": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"]["enable"] is True
    assert config["clientConnection"] == base["clientConnection"], "the module's own settings"
    assert "webhook" not in base, "the module's configuration is left as it was"


def test_cert_secret_holds_the_four_files_kueues_certificate_management_reads() -> None:
    files = {n: n.encode() for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    secret = manifests.cert_secret(files)
    assert secret["metadata"] == {"name": manifests.CERT_SECRET, "namespace": manifests.NAMESPACE}
    assert base64.b64decode(secret["data"]["tls.key"]) == b"tls.key"
    with pytest.raises(ManifestError, match=r"ca\.key"):
        manifests.cert_secret({"ca.crt": b"x", "tls.crt": b"x", "tls.key": b"x"})


def test_cluster_queue_quota_is_the_gpus_asked_for_on_one_flavor_for_one_namespace() -> None:
    queue = manifests.cluster_queue(
        "q", flavor="f", namespace="ns", gpus=12, cpu="1k", memory="1Ti"
    )
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == "f"
    assert {r["name"]: r["nominalQuota"] for r in flavor["resources"]} == {
        "cpu": "1k",
        "memory": "1Ti",
        "nvidia.com/gpu": "12",
    }
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert queue["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ns"}
    }
    with pytest.raises(ValueError, match="gpus=-1"):
        manifests.cluster_queue("q", flavor="f", namespace="ns", gpus=-1, cpu="1", memory="1")


def test_pod_group_metadata_names_queue_group_count_and_asks_for_no_member_retry() -> None:
    group = PodGroup(queue="gpus", name="fabric-0", total=8)
    assert group.labels() == {QUEUE_NAME_LABEL: "gpus", POD_GROUP_NAME_LABEL: "fabric-0"}
    assert group.annotations() == {
        POD_GROUP_TOTAL_COUNT_ANNOTATION: "8",
        RETRIABLE_IN_GROUP_ANNOTATION: "false",
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue": "", "name": "g", "total": 2}, "PodGroup.queue"),
        ({"queue": "q", "name": "", "total": 2}, "PodGroup.name"),
        ({"queue": "q", "name": "g", "total": 0}, "PodGroup.total is 0"),
    ],
)
def test_pod_group_refuses_bad_input_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PodGroup(**kwargs)


def _openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)


def test_webhook_certificate_serves_loopback_and_the_service_name_beyond_the_lookahead(
    tmp_path: Path,
) -> None:
    """The API server calls 127.0.0.1; Kueue's certificate management keeps the certificate only
    if it is valid for the Service's name, signed by a CA named kueue-ca, past 90 days."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the certificate")
    dns = f"{manifests.WEBHOOK_SERVICE}.{manifests.NAMESPACE}.svc"
    files = certs.issue(tmp_path, dns)
    assert sorted(files) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    ca, crt = str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")
    for check in (["-verify_ip", "127.0.0.1"], ["-verify_hostname", dns]):
        assert _openssl("verify", "-CAfile", ca, *check, crt).returncode == 0, check
    assert _openssl("verify", "-CAfile", ca, "-verify_ip", "10.0.0.1", crt).returncode != 0
    assert _openssl("verify", "-CAfile", ca, "-verify_hostname", certs.CA_NAME, ca).returncode == 0
    for key in ("ca.key", "tls.key"):
        assert files[key].startswith(b"-----BEGIN RSA PRIVATE KEY-----"), (
            "PKCS#1, as cert-controller reads"
        )
    ninety_one_days = str(91 * 24 * 3600)
    for cert in (ca, crt):
        assert _openssl("x509", "-in", cert, "-noout", "-checkend", ninety_one_days).returncode == 0


def test_go_install_rebuilds_when_its_flags_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kueue binary is stamped with its version through -ldflags: a change of the flags is
    a change of the build, not a cache hit."""
    monkeypatch.setenv("GPUVAL_CACHE", str(tmp_path))
    runs: list[list[str]] = []

    def fake_install(step: str, argv: list[str], *, env: dict[str, str], **_kw: object) -> None:
        runs.append(argv)
        (Path(env["GOBIN"]) / "tool").write_text("binary")

    monkeypatch.setattr(binaries, "run_step", fake_install)
    target = "example.com/tool@v1.0.0"
    for flags in (["-ldflags", "-X a=1"], ["-ldflags", "-X a=1"], ["-ldflags", "-X a=2"]):
        binaries.go_install("tool-v1", target, ["tool"], log=lambda _m: None, flags=flags)
    assert runs == [
        ["go", "install", "-ldflags", "-X a=1", target],
        ["go", "install", "-ldflags", "-X a=2", target],
    ]
