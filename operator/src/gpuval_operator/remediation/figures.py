"""What /metrics says of one validation's repair loop: requests by action and outcome, the nodes in
repair and those needing a person, the time from failure to back in service, and the requests the
API server refuses. The keeper
(gpuval_operator.control.repair.keeper) fills it as it sees the nodes' records move; the collector
reads it at scrape time. Counters start again with the process, as Prometheus expects."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Failure → back in service, seconds: a GPU reset takes minutes, a reboot with its re-validation
# tens of minutes, an engine that waits for a maintenance window hours.
BACK_IN_SERVICE_BUCKETS = (60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)


@dataclass(slots=True)
class RepairFigures:
    # (action, outcome "passed" or "failed") -> requests whose re-validation ended so.
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    # action -> nodes whose repair is asked or being proven now.
    in_progress: Counter[str] = field(default_factory=Counter)
    # node -> the reason of a node that needs a person (NeedsRepair).
    needs_repair: dict[str, str] = field(default_factory=dict)
    # The histogram of failure → back in service: counts per bucket (not cumulative), sum, count.
    back_buckets: list[int] = field(default_factory=lambda: [0] * len(BACK_IN_SERVICE_BUCKETS))
    back_sum: float = 0.0
    back_count: int = 0
    # kind (Kind.group/version) -> repair objects the API server refused or did not serve, ever;
    # and the nodes whose request waits for its next try now (remediation.refusals).
    refused: Counter[str] = field(default_factory=Counter)
    refused_nodes: Counter[str] = field(default_factory=Counter)

    def observe_back(self, seconds: float) -> None:
        self.back_sum += seconds
        self.back_count += 1
        for i, bound in enumerate(BACK_IN_SERVICE_BUCKETS):
            if seconds <= bound:
                self.back_buckets[i] += 1
                return

    def cumulative(self) -> list[tuple[str, float]]:
        """The histogram's buckets as Prometheus has them: cumulative, +Inf last."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(BACK_IN_SERVICE_BUCKETS, self.back_buckets, strict=True):
            total += count
            out.append((f"{bound:g}", float(total)))
        out.append(("+Inf", float(self.back_count)))
        return out
