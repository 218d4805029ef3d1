"""Kueue's own names for the pods it admits (sigs.k8s.io/kueue's pod integration), spelled once.

They are Kueue's contract, not gpuval's (like gpuval_api.kubernetes): pods that carry
:data:`QUEUE_NAME_LABEL` in a namespace Kueue manages are gated until Kueue admits them, and pods
that also carry :data:`POD_GROUP_NAME_LABEL` and :data:`POD_GROUP_TOTAL_COUNT_ANNOTATION` form
one workload that Kueue admits whole or not at all. :class:`PodGroup` writes those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import Field

QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
# "false": Kueue waits for no replacement of a failed member; once every member has ended, the
# group's Workload is finished and its quota free.
RETRIABLE_IN_GROUP_ANNOTATION: Final = "kueue.x-k8s.io/retriable-in-group"
# The scheduling gate Kueue's webhook puts on every pod it manages and lifts on admission.
ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
# Kueue's label on the pods it manages, and the name of its finalizer on them.
MANAGED: Final = "kueue.x-k8s.io/managed"


def queue_field(subject: str) -> Any:
    """A spec field naming a Kueue LocalQueue in the agents' namespace (a label value: the pods
    carry it as :data:`QUEUE_NAME_LABEL`); unset, the pods do not go through Kueue."""
    return Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description=(
            f"Kueue LocalQueue in the agents' namespace for {subject}: Kueue admits them under "
            "its quota (that namespace must be managed by Kueue's pod integration: "
            'docs/operator/fabric.md, "Kueue: fabric groups admitted whole"). '
            "Unset: not through Kueue."
        ),
    )


@dataclass(frozen=True)
class PodGroup:
    """A Kueue pod group: ``total`` pods labelled with one ``name``, queued in the LocalQueue
    ``queue`` of their namespace, admitted together once the queue's quota holds all of them."""

    queue: str
    name: str
    total: int

    def __post_init__(self) -> None:
        for field, value in (("queue", self.queue), ("name", self.name)):
            if not value:
                raise ValueError(f"PodGroup.{field} is empty: name the Kueue LocalQueue and group")
        if self.total < 1:
            raise ValueError(f"PodGroup.total is {self.total}: a pod group has at least one member")

    def labels(self) -> dict[str, str]:
        """The labels every member carries."""
        return {QUEUE_NAME_LABEL: self.queue, POD_GROUP_NAME_LABEL: self.name}

    def annotations(self) -> dict[str, str]:
        """The annotations every member carries. A group is never retried member by member
        (gpuval gives a group up whole), so Kueue is told not to hold its quota for a
        replacement of a member that failed."""
        return {
            POD_GROUP_TOTAL_COUNT_ANNOTATION: str(self.total),
            RETRIABLE_IN_GROUP_ANNOTATION: "false",
        }
