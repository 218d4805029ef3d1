"""Kubernetes Events on GpuValidations and nodes, posted directly (kopf posts only its own,
WARNING and up).

Both objects are cluster-scoped. The API server accepts an Event about a cluster-scoped object
only in the `default` namespace with an empty `involvedObject.namespace`, and that is exactly where
`kubectl describe gpuvalidation NAME` and `kubectl describe node NAME` look (a field selector on the
involved object across namespaces). An Event elsewhere, or one naming a namespace, is stored but
never shown (issue 9).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from gpuval_operator.kube.client import ApiError, KubeClient, q
from gpuval_operator.timestamps import rfc3339

log = logging.getLogger(__name__)

COMPONENT = "gpuval-operator"
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"


def build_event(
    *, involved: dict[str, Any], reason: str, message: str, warning: bool, now: float
) -> dict[str, Any]:
    stamp = rfc3339(now)
    reference = {k: v for k, v in involved.items() if k != "namespace"}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{involved['name'][:200]}.",
            "namespace": CLUSTER_SCOPED_EVENT_NAMESPACE,
        },
        "involvedObject": reference,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": os.environ.get("HOSTNAME", COMPONENT)[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def post(
    client: KubeClient,
    involved: dict[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool = False,
) -> None:
    """Post an Event about a cluster-scoped object; a failure is logged, never raised (an Event is
    not worth failing a run for)."""
    body = build_event(
        involved=involved, reason=reason, message=message, warning=warning, now=time.time()
    )
    path = f"/api/v1/namespaces/{q(CLUSTER_SCOPED_EVENT_NAMESPACE)}/events"
    try:
        await client.create(path, body)
    except (ApiError, OSError, TimeoutError) as exc:
        log.warning("could not post event %s on %s: %s", reason, involved.get("name"), exc)
