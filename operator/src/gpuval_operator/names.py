"""The names of the objects the operator makes, and run numbers.

The names of reports and pods are deterministic per (validation, run, node): a restarted operator
that creates a pod again gets 409 AlreadyExists instead of a duplicate. The label, annotation and
taint keys themselves are part of the contract and live in gpuval_api.keys; label values made
safe are gpuval_api.labels' (readers of the labels use the same function).
"""

from __future__ import annotations

from gpuval_api.labels import MAX_LABEL_VALUE, digest

MAX_NAME = 253


def bounded_name(*parts: str, limit: int = MAX_NAME) -> str:
    """`parts` joined by '-', shortened with a hash of the whole when longer than `limit`.

    The hash keeps two long names that share a prefix apart; the kept prefix keeps the name
    readable.
    """
    name = "-".join(parts)
    if len(name) <= limit:
        return name
    suffix = digest(name)
    head = name[: limit - len(suffix) - 1].rstrip("-.")
    return f"{head}-{suffix}"


def report_name(validation: str, run: str, node: str) -> str:
    """The GpuNodeReport of `node` in run `run` of `validation` (a DNS subdomain, at most 253)."""
    return bounded_name(validation, run, node)


def pod_name(validation: str, run: str, node: str, attempt: int = 1) -> str:
    """The agent pod of `node` in run `run` (and attempt, from the second on); at most 63 so it
    is also a valid hostname."""
    parts = ["gpuval", validation, run, node] + ([f"a{attempt}"] if attempt > 1 else [])
    return bounded_name(*parts, limit=MAX_LABEL_VALUE)


def fabric_pod_name(validation: str, run: str, group: str, rank: int) -> str:
    """The fabric pod of rank `rank` of fabric group `group` in run `run` (one per node and group:
    a representative of its topology domain has one in its domain's group and one in the
    cross-domain group); at most 63."""
    return bounded_name("gpuval", validation, run, group, f"r{rank}", limit=MAX_LABEL_VALUE)


def fabric_pod_group(validation: str, run: str, group: str) -> str:
    """The Kueue pod group of fabric group `group` in run `run`: a label value on every member,
    and the name Kueue gives the group's Workload in the agents' namespace; at most 63."""
    return bounded_name("gpuval", validation, run, group, limit=MAX_LABEL_VALUE)


def run_number(run_id: str) -> int:
    """The number in a run id `<number>-<suffix>`; 0 for an id of another form."""
    head = run_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def claim_template_name(validation: str, run: str, shape: str) -> str:
    """The ResourceClaimTemplate the agent and fabric pods of run `run` with devices of `shape`
    ('gpu', 'mig' or 'gpu-mig') claim their node's devices from (spec.agent.devices dra)."""
    return bounded_name("gpuval", validation, run, shape)
