"""A verdict in a container's termination message: the one writer and the one reader, for the
agent pod (the GpuNodeReport status) and the fabric pod (`status.fabric`) alike. Pure.

The kubelet keeps at most TERMINATION_MESSAGE_LIMIT bytes of what a container leaves in its
termination-message file and copies it into the pod's status, where the operator reads it when the
agent's own report write never arrived. Each pod's message is one compact JSON object; a `Kind`
says where its status sits in that object, what of the status travels, what is given up first
when it does not fit, and what reads back as a verdict. gpuval_api.report and gpuval_api.fabric
define the two kinds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The kubelet keeps at most 4096 bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096


@dataclass(frozen=True)
class Kind:
    """One pod's termination message."""

    # The status's key in the message's JSON object; None: the status is the object itself.
    key: str | None
    # The status as it travels (without the result document and what else is too big).
    compact: Callable[[Mapping[str, Any]], dict[str, Any]]
    # The status read back, or None when it carries no verdict of ours.
    read: Callable[[dict[str, Any]], dict[str, Any] | None]
    # Steps that make the status smaller, in order, each repeated while the message is too big
    # and it returns True (False: it can do no more).
    shrink: Sequence[Callable[[dict[str, Any]], bool]] = field(default_factory=tuple)


def build(kind: Kind, status: Mapping[str, Any]) -> str:
    """The termination message of a completed `status`, within the kubelet's limit."""
    compact = kind.compact(status)

    def text() -> str:
        document = compact if kind.key is None else {kind.key: compact}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False)

    for step in kind.shrink:
        while len(text().encode()) > TERMINATION_MESSAGE_LIMIT and step(compact):
            pass
    return text()


def read(kind: Kind, text: str | None) -> dict[str, Any] | None:
    """The status a termination message of `kind` carries; None when it carries none (an agent
    that died before its verdict, the other pod's message, or text that is not ours)."""
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if isinstance(document, dict) and kind.key is not None:
        document = document.get(kind.key)
    if not isinstance(document, dict):
        return None
    return kind.read(document)
