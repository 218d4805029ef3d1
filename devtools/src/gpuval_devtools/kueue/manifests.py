"""What a local control plane gets of Kueue, made from the manifests rendered from Kueue's own
``config/`` (gpuval_devtools.kueue.build) and what its manager is configured with; nothing here
calls the API or starts anything.

Kueue's manager runs on this machine, not in a pod, and these clusters have no kube-proxy and no
cluster DNS: the API server cannot reach ``kueue-webhook-service.kueue-system.svc``. So every
webhook (admission and CRD conversion) is pointed at a URL on loopback where the manager serves,
with a certificate valid for both that address and the Service's name (gpuval_devtools.kueue.certs).
The Deployment, the Services, the visibility APIService and the ConfigMap are left out: the
manager is a process here, and its configuration is the module's own one with the few settings
this set-up needs changed (:func:`manager_config`).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpuval_devtools.kwoknodes import GPU_RESOURCE

NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
CERT_SECRET = "kueue-webhook-server-cert"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# What Kueue needs from the cluster when its manager runs outside it.
CLUSTER_KINDS = frozenset(
    {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
    }
)
# A namespace opts in to Kueue with this label (the manager's managedJobsNamespaceSelector);
# pods elsewhere pass its webhook untouched, whatever labels they carry.
MANAGED_NAMESPACE_LABEL = "kueue-managed"
# The pod integration, and Kueue's default one: without "batch/job", Kueue v0.17.0's Job webhook
# panics on a nil queue manager (measured), and with it failing closed no Job could be created.
FRAMEWORKS = ("batch/job", "pod")
# Kueue's API version of the queue objects made here.
API_VERSION = "kueue.x-k8s.io/v1beta2"


class ManifestError(ValueError):
    """Kueue's rendered manifests are not of the shape this set-up rewrites."""


@dataclass(frozen=True)
class Rendered:
    """Kueue's rendered manifests, sorted by what this set-up does with them."""

    cluster_objects: list[dict[str, Any]]
    webhook_configurations: list[dict[str, Any]]
    manager_config: dict[str, Any]


def split(documents: Iterable[Mapping[str, Any] | None]) -> Rendered:
    """Sorts the rendered objects: those applied as they are (bar their webhooks), the webhook
    configurations (applied once the manager serves), and the manager's configuration."""
    cluster: list[dict[str, Any]] = []
    webhooks: list[dict[str, Any]] = []
    config: dict[str, Any] | None = None
    for doc in documents:
        if not doc:
            continue
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if kind in CLUSTER_KINDS:
            cluster.append(dict(doc))
        elif kind in WEBHOOK_KINDS:
            webhooks.append(dict(doc))
        elif kind == "ConfigMap" and name == CONFIG_MAP:
            config = yaml.safe_load(doc["data"][CONFIG_KEY])
    if config is None:
        raise ManifestError(f"no ConfigMap {CONFIG_MAP} with {CONFIG_KEY} in Kueue's manifests")
    if sorted(w["kind"] for w in webhooks) != sorted(WEBHOOK_KINDS):
        raise ManifestError(f"Kueue's manifests lack {WEBHOOK_KINDS}: got {webhooks!r:.200}")
    return Rendered(cluster, webhooks, config)


def _loopback(client_config: Mapping[str, Any], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    service = client_config.get("service")
    if not service or (service.get("namespace"), service.get("name")) != (
        NAMESPACE,
        WEBHOOK_SERVICE,
    ):
        raise ManifestError(
            f"a Kueue webhook calls {service!r}, not the Service {NAMESPACE}/{WEBHOOK_SERVICE} "
            "this set-up serves on loopback"
        )
    return {
        "url": base_url + service.get("path", ""),
        "caBundle": base64.b64encode(ca_pem).decode(),
    }


def on_loopback(obj: Mapping[str, Any], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """``obj`` with each of its webhooks (admission, or a CRD's conversion) calling ``base_url``
    plus the webhook's path, trusting ``ca_pem``; other objects unchanged."""
    out = copy.deepcopy(dict(obj))
    if out.get("kind") in WEBHOOK_KINDS:
        for hook in out.get("webhooks", []):
            hook["clientConfig"] = _loopback(hook["clientConfig"], base_url, ca_pem)
    elif out.get("kind") == "CustomResourceDefinition":
        conversion = out.get("spec", {}).get("conversion", {})
        if conversion.get("strategy") == "Webhook":
            hook = conversion["webhook"]
            hook["clientConfig"] = _loopback(hook["clientConfig"], base_url, ca_pem)
    return out


def manager_config(
    base: Mapping[str, Any],
    *,
    webhook_port: int,
    health_port: int,
    cert_dir: str,
    frameworks: Sequence[str] = FRAMEWORKS,
) -> dict[str, Any]:
    """The module's own manager configuration with what a manager on loopback needs: webhooks
    and probes on 127.0.0.1, no metrics listener, one replica (no leader election), the visibility
    server off (nothing routes its APIService), Kueue's own certificate management kept (it reads
    our certificate from its Secret and keeps the CA in the webhooks), only ``frameworks``
    integrated, and only namespaces labelled :data:`MANAGED_NAMESPACE_LABEL` managed."""
    config = copy.deepcopy(dict(base))
    config.update(
        namespace=NAMESPACE,
        health={"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # "0" turns controller-runtime's metrics listener off.
        metrics={"bindAddress": "0"},
        webhook={"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
        leaderElection={"leaderElect": False},
        internalCertManagement={
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": CERT_SECRET,
        },
        integrations={"frameworks": list(frameworks)},
        managedJobsNamespaceSelector={"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        featureGates={**config.get("featureGates", {}), "VisibilityOnDemand": False},
    )
    return config


def cert_secret(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The Secret Kueue's certificate management reads (keys ca.crt, ca.key, tls.crt, tls.key)."""
    wanted = {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    if set(files) != wanted:
        raise ManifestError(f"the webhook Secret needs {sorted(wanted)}, got {sorted(files)}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CERT_SECRET, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(files.items())},
    }


def resource_flavor(name: str) -> dict[str, Any]:
    """A flavor of the GPU nodes: Kueue adds its node labels to the admitted pods' selectors."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true"}},
    }


def cluster_queue(
    name: str, *, flavor: str, namespace: str, gpus: int, cpu: str, memory: str
) -> dict[str, Any]:
    """A ClusterQueue for the one ``namespace`` whose quota is ``gpus`` GPUs (and CPU and memory,
    which a GPU pod also asks for); a workload waits until its whole request fits."""
    if gpus < 0:
        raise ValueError(f"gpus={gpus}: a GPU quota is 0 or more")
    quotas = {"cpu": cpu, "memory": memory, GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [
                {
                    "coveredResources": list(quotas),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": k, "nominalQuota": v} for k, v in quotas.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(name: str, *, namespace: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
