"""The compact view of a report's state check (ReportFacts.state): what the operator's state series
need of the hardware state a node's agent read (issue 19). Pure and synchronous.

Per node, never per GPU (the per-GPU detail stays in the report): each (reason, severity) the
state check found with how many findings it has, the NVLinks down and the InfiniBand/RoCE ports
not up, and per load check how many error counters grew while it ran. Label values are bounded:
a reason outside the catalogue reads as CheckError (gpuval_api.report.read_reason), a severity
must be the catalogue's, a check must be one of the agent's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuval_api import Reason, Severity
from gpuval_api.checks import CheckName
from gpuval_api.report import read_reason
from gpuval_api.result import Metric

_SEVERITIES = {str(s): s for s in Severity}
_CHECKS = {str(c): c for c in CheckName}
_GROWN = f"{Metric.COUNTERS_GROWN}."
# Most nodes of a fleet read alike (nothing found, the same load checks): one object each, shared.
_SHARED: dict[StateFacts, StateFacts] = {}
_SHARED_MAX = 4096


@dataclass(frozen=True, slots=True)
class StateFacts:
    # (reason, severity, findings of it), in the order the check found them.
    findings: tuple[tuple[Reason, Severity, int], ...] = ()
    nvlinks_down: int | None = None
    ib_ports_down: int | None = None
    # (load check, error counters that grew while it ran), in run order.
    grown: tuple[tuple[CheckName, int], ...] = ()

    @classmethod
    def parse(cls, result: Mapping[str, Any] | None) -> StateFacts | None:
        """The state check of an agent's result document; None when it has none."""
        checks = result.get("checks") if isinstance(result, Mapping) else None
        state = next(
            (
                c
                for c in checks or []
                if isinstance(c, Mapping) and c.get("name") == CheckName.STATE
            ),
            None,
        )
        if state is None:
            return None
        counted: Counter[tuple[Reason, Severity]] = Counter()
        for finding in state.get("findings") or []:
            if not isinstance(finding, Mapping):
                continue
            reason = read_reason(finding.get("reason"))
            severity = _SEVERITIES.get(str(finding.get("severity")), Severity.ERROR)
            if reason is not None:
                counted[(reason, severity)] += 1
        metrics = state.get("metrics") or {}
        grown = tuple(
            (_CHECKS[key.removeprefix(_GROWN)], int(value))
            for key, value in metrics.items()
            if key.startswith(_GROWN)
            and key.removeprefix(_GROWN) in _CHECKS
            and isinstance(value, int | float)
        )
        facts = cls(
            findings=tuple((r, s, n) for (r, s), n in counted.items()),
            nvlinks_down=_count(metrics.get(Metric.NVLINKS_DOWN)),
            ib_ports_down=_count(metrics.get(Metric.IB_PORTS_DOWN)),
            grown=grown,
        )
        shared = _SHARED.get(facts)
        if shared is not None:
            return shared
        if len(_SHARED) < _SHARED_MAX:
            _SHARED[facts] = facts
        return facts


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and value >= 0 else None
