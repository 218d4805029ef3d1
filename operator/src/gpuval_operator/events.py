"""Kubernetes Events on GpuValidations and nodes, posted directly (kopf posts only its own,
WARNING and up).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from gpuval_operator.kube import ApiError, KubeClient, q
from gpuval_operator.rollup import rfc3339

log = logging.getLogger(__name__)

COMPONENT = "gpuval-operator"


def build_event(
    *,
    namespace: str,
    involved: dict[str, Any],
    reason: str,
    message: str,
    warning: bool,
    now: float,
) -> dict[str, Any]:
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name'][:200]}.", "namespace": namespace},
        # The API server wants the two namespaces equal even for a cluster-scoped object (kopf
        # does the same); `kubectl describe` still finds the Event by kind, name and uid.
        "involvedObject": {**involved, "namespace": namespace},
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
    namespace: str,
    involved: dict[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool = False,
) -> None:
    """Post an Event; a failure is logged, never raised (an Event is not worth failing a run
    for).
    """
    body = build_event(
        namespace=namespace,
        involved=involved,
        reason=reason,
        message=message,
        warning=warning,
        now=time.time(),
    )
    try:
        await client.create(f"/api/v1/namespaces/{q(namespace)}/events", body)
    except (ApiError, OSError, TimeoutError) as exc:
        log.warning("could not post event %s on %s: %s", reason, involved.get("name"), exc)
