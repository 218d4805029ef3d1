"""The page's hardware-state section: what the state check found on each node (or GPU), errors
and warnings with their hints, and what it could not read, each once with the units it applies
to."""

from __future__ import annotations

from html import escape

from gpuval_api import Severity
from gpuval_api.views import FleetView
from gpuval_report.tables import table

# Units named in one 'not read' row before the rest are only counted.
NAMES_SHOWN = 8


def _units(names: tuple[str, ...]) -> str:
    shown = ", ".join(escape(n) for n in names[:NAMES_SHOWN])
    rest = len(names) - NAMES_SHOWN
    return f"{len(names)}: {shown}" + (f" and {rest} more" if rest > 0 else "")


def state_section(view: FleetView) -> str:
    """The section, or nothing when no unit ran the state check."""
    if not view.state and not view.not_read:
        return ""
    if view.state:
        rows = [
            [
                escape(s.unit),
                escape(s.severity),
                f"<b>{escape(s.reason)}</b>",
                escape(s.message),
                escape(s.hint),
            ]
            for s in view.state
        ]
        bad = [s.severity == Severity.ERROR for s in view.state]
        findings = table([view.unit_label, "severity", "reason", "message", "hint"], rows, bad)
    else:
        findings = '<p class="none">The state check found nothing at rest or under load.</p>'
    missing = ""
    if view.not_read:
        rows = [[escape(what), _units(units)] for what, units in view.not_read]
        missing = (
            f"<details><summary>Not read or not present ({len(view.not_read)})</summary>"
            f"{table(['what', view.unit_label + 's'], rows)}</details>"
        )
    return f'<h2>Hardware state</h2><div id="state">{findings}{missing}</div>'
