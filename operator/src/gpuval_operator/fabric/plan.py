"""Pure fabric planning: which nodes form which group, and how long a group may take.

The nodes that passed their local checks are grouped in name order, so a restarted operator
computes the same groups from the same nodes. Without a topology key: groups of at most
`groupSize`, as even as they can be.
With one: groups inside each domain (the nodes' value of that label; nodes without it form a
domain of their own), then, once those have results, cross-domain groups of one representative
per domain: the first node (by name) of the domain whose fabric passed in its domain group (a
node alone in its domain has a group of one that runs nothing, and represents it). Choosing
representatives that passed keeps a node already named slow or unreachable from spoiling the
comparison across domains, and a representative's group is known before its cross-domain pod
starts.

Nothing here calls the API or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuval_api.fabric import FabricConfig, pair_rounds

DOMAIN_PREFIX = "g"
CROSS_PREFIX = "x"
# Beyond the phases' own limits: the agents' report writes, process start-up.
SLACK_SECONDS = 60
# A group whose rank 0 started this long before its init limit ran out, and has not met every
# rank, is given up: rank 0's agent is about to give up too, and a rank starting later would fail
# as unreachable through no fault of its own.
MAX_GANG_MARGIN_SECONDS = 10


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """A fabric group: its name, its nodes by rank, and its topology domain."""

    name: str
    nodes: tuple[str, ...]
    domain: str | None = None  # None without a topology key and for a cross-domain group
    cross: bool = False


def chunk(nodes: Sequence[str], size: int) -> list[list[str]]:
    """`nodes` in order, in the fewest groups of at most `size`, their sizes differing by one at
    most: 250 nodes in groups of 8 are 26 groups of 8 and 6 of 7, never 31 of 8 and a pair (a
    group of two cannot tell a slow node from a slow link). A group of one tests nothing: one
    left over (groups of two) joins the group before it."""
    count = -(-len(nodes) // size) if nodes else 0
    groups: list[list[str]] = []
    start = 0
    for index in range(count):
        length = len(nodes) // count + (1 if index < len(nodes) % count else 0)
        groups.append(list(nodes[start : start + length]))
        start += length
    if len(groups) > 1 and len(groups[-1]) == 1:
        groups[-2].extend(groups.pop())
    return [g for g in groups if len(g) >= 2]


def domain_groups(
    nodes: Sequence[str], size: int, domains: Mapping[str, str] | None = None
) -> list[GroupPlan]:
    """The groups of the nodes that passed locally: `size` at a time, inside each domain when
    `domains` (node -> its topology label value, "" when unlabelled) is given. A node alone in
    its domain gets a group of one, which runs nothing: it waits for the cross-domain group,
    and the plan names it, so a restarted operator knows it belongs to the fabric."""
    ordered = sorted(set(nodes))
    if domains is None:
        parts: list[tuple[str | None, list[str]]] = [(None, ordered)]
    else:
        by_domain: dict[str, list[str]] = {}
        for node in ordered:
            by_domain.setdefault(domains.get(node, ""), []).append(node)
        parts = [(domain, members) for domain, members in sorted(by_domain.items())]
    plans: list[GroupPlan] = []
    for domain, members in parts:
        groups = [members] if domain is not None and len(members) == 1 else chunk(members, size)
        for group in groups:
            plans.append(GroupPlan(f"{DOMAIN_PREFIX}{len(plans) + 1}", tuple(group), domain))
    return plans


def representatives(groups: Sequence[GroupPlan], passed: set[str]) -> list[str]:
    """One node per domain for the cross-domain groups, in domain order: the first (by name)
    that passed its domain group (a node alone in its domain passes its group of one); a domain
    whose nodes all failed there has none."""
    chosen: list[str] = []
    for members in _by_domain(groups):
        found = next((n for n in members if n in passed), None)
        if found is not None:
            chosen.append(found)
    return chosen


def possible_representatives(
    groups: Sequence[GroupPlan], passed: Mapping[str, bool | None]
) -> set[str]:
    """While domain groups still run: the nodes that are, or may yet be, chosen by
    `representatives`: each domain's nodes by name up to the first known to have passed its
    domain group (`passed[node]`: True, False, or None while its group has no result)."""
    found: set[str] = set()
    for members in _by_domain(groups):
        for node in members:
            found.add(node)
            if passed.get(node) is True:
                break
    return found


def _by_domain(groups: Sequence[GroupPlan]) -> list[list[str]]:
    """The domain groups' nodes, by domain (in domain order), each domain's by name."""
    by_domain: dict[str, list[str]] = {}
    for plan in groups:
        if not plan.cross:
            by_domain.setdefault(plan.domain or "", []).extend(plan.nodes)
    return [sorted(members) for _, members in sorted(by_domain.items())]


def cross_groups(reps: Sequence[str], size: int) -> list[GroupPlan]:
    """The cross-domain groups of the representatives (in domain order), `size` at a time."""
    return [
        GroupPlan(f"{CROSS_PREFIX}{i + 1}", tuple(group), None, cross=True)
        for i, group in enumerate(chunk(list(reps), size))
    ]


def rebuilt_groups(
    found: Mapping[str, tuple[str, ...]], domains: Mapping[str, str] | None
) -> list[GroupPlan]:
    """The plan again after a restart, from group -> nodes as the reports name them, in plan
    order (domain groups, then cross-domain ones). With `domains` (a topology key), a node alone
    in its domain whose report already shows its cross-domain group gets its group of one back
    (it runs nothing; only its domain matters for choosing representatives)."""
    groups = dict(found)
    if domains is not None:
        inside = {n for name, ns in groups.items() if not name.startswith(CROSS_PREFIX) for n in ns}
        every = {n for ns in groups.values() for n in ns}
        for node in sorted(every - inside):
            groups[f"{DOMAIN_PREFIX}0-{node}"] = (node,)

    def order(name: str) -> tuple[bool, int, str]:
        number = name[len(CROSS_PREFIX) :]
        return name.startswith(CROSS_PREFIX), int(number) if number.isdigit() else 0, name

    plans: list[GroupPlan] = []
    for name in sorted(groups, key=order):
        nodes, cross = groups[name], name.startswith(CROSS_PREFIX)
        domain = None if cross or domains is None else domains.get(nodes[0], "")
        plans.append(GroupPlan(name, nodes, domain, cross=cross))
    return plans


def agent_seconds(config: FabricConfig, world: int) -> int:
    """The longest a group's agents may take once they all run: the meeting, the group's start-up
    and sweep, and each pair round (the confirmation included), each with fresh rank processes at
    worst, the same again for the training phase (spec.fabric.train), plus slack. Their own limits
    end a hang well before; this is the backstop."""
    rounds = len(pair_rounds(world)) + 1
    t = config.timeouts
    seconds = t.init_seconds * (2 + rounds) + t.phase_seconds * (1 + rounds) + SLACK_SECONDS
    if config.train.enabled:
        # The training phase: the group's run and each round, each with fresh rank processes.
        seconds += (t.init_seconds + config.train.timeout_seconds) * (1 + rounds)
    return seconds


def gang_deadline(config: FabricConfig, opened_at: float, rank0_started_at: float | None) -> float:
    """When a group whose pods have not all started is given up (FabricGangNotFormed): the gang
    timeout from the group's opening (its pods' creation), and never after rank 0's agent stops
    waiting for the others (its init limit from its start, less a margin)."""
    t = config.timeouts
    deadline = opened_at + t.gang_seconds
    if rank0_started_at is not None:
        margin = min(MAX_GANG_MARGIN_SECONDS, t.init_seconds / 4)
        deadline = min(deadline, rank0_started_at + t.init_seconds - margin)
    return deadline


def pod_deadline(config: FabricConfig, opened_at: float, world: int) -> float:
    """A fabric pod's deadline (GPUVAL_DEADLINE, and the operator's): the group's gang timeout
    from its opening, then the agents' time. Past it the pod is deleted and its node's fabric
    result is NcclTimeout (it had started)."""
    return opened_at + config.timeouts.gang_seconds + agent_seconds(config, world)
