"""The page's failures, grouped per unit: one row per (check, reason) of a failing node, not one per
finding, so a node whose eight GPUs all failed host-to-device, device-to-host and peer copies
(16 findings) is one row naming the GPUs, not 16 rows before the outliers. Every finding's message
stays on the page, folded under its group.

``group_failures`` is pure (no HTML); ``failures_html`` lays the groups out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from gpuval_api.views import FailureView
from gpuval_report.tables import table


@dataclass(frozen=True)
class FailureGroup:
    """The findings of one unit with one check and one reason."""

    unit: str
    check: str
    reason: str
    hint: str
    findings: tuple[FailureView, ...]

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted({f.gpu for f in self.findings if f.gpu is not None}))


def group_failures(failures: Iterable[FailureView]) -> list[FailureGroup]:
    """Groups per unit, then check and reason, in the order each first appears."""
    groups: dict[tuple[str, str, str], list[FailureView]] = {}
    for failure in failures:
        groups.setdefault((failure.unit, failure.check, failure.reason), []).append(failure)
    return [
        FailureGroup(unit, check, reason, found[0].hint, tuple(found))
        for (unit, check, reason), found in groups.items()
    ]


def gpu_ranges(gpus: Sequence[int]) -> str:
    """0, 1, 2, 3, 5 -> "0-3, 5"."""
    parts: list[str] = []
    start = previous = None
    for gpu in sorted(gpus):
        if previous is not None and gpu == previous + 1:
            previous = gpu
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = gpu
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ", ".join(parts)


def _findings(group: FailureGroup) -> str:
    first = escape(group.findings[0].message)
    rest = group.findings[1:]
    if not rest:
        return first
    more = "".join(f"<li>{escape(f.message)}</li>" for f in rest)
    return (
        f"{first}<details><summary>and {len(rest)} more like it</summary><ul>{more}</ul></details>"
    )


def failures_html(failures: Sequence[FailureView], unit_label: str) -> str:
    """The failures table: a failing unit's name once, above its groups."""
    rows: list[list[str]] = []
    previous = None
    for group in group_failures(failures):
        rows.append(
            [
                "" if group.unit == previous else escape(group.unit),
                escape(group.check),
                gpu_ranges(group.gpus),
                f"<b>{escape(group.reason)}</b>",
                _findings(group),
                escape(group.hint),
            ]
        )
        previous = group.unit
    return table([unit_label, "check", "GPUs", "reason", "findings", "hint"], rows)
