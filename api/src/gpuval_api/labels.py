"""Label values made safe, and the selector of a validation's children: how the operator labels a
GpuValidation's reports and pods and how a reader (kubectl gpuval, the tests) finds them again.
The label keys themselves are gpuval_api.keys'. Pure."""

from __future__ import annotations

import hashlib
import re

from gpuval_api import keys

MAX_LABEL_VALUE = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def digest(text: str, length: int = 10) -> str:
    """A stable hex digest of `text`, `length` characters long."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def label_value(text: str) -> str:
    """`text` when it is a valid label value, else a stable hash of it (node names may be 253
    long).
    """
    if len(text) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(text):
        return text
    return f"h-{digest(text, 20)}"


def children_selector(validation: str, run: str | None = None) -> str:
    """The label selector of a GpuValidation's reports and pods (of one run, when given)."""
    selector = f"{keys.LABEL_VALIDATION}={label_value(validation)}"
    return selector if run is None else f"{selector},{keys.LABEL_RUN}={run}"
