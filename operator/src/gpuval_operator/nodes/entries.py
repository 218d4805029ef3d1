"""What every GpuValidation covering a node says about it, and the node state that follows.

Each validation keeps one annotation on the node, `verdict.gpuval.dev/<validation>`: its latest
verdict, the last verdict with evidence (a NotRun keeps the earlier Passed/Failed), the boot ID
and GPU stack it was tested on, and the actions it asks for. The node's labels, taint, cordon and
GpuValidated condition follow all entries together: failed while any validation's latest tested
verdict is Failed (naming which), so one validation passing never undoes another's failure.

A failing entry whose taint and cordon the circuit breaker held (`hold`: the cause,
gpuval_operator.nodes.breaker.rules) asks for nothing but its label and condition. A node gpuval
holds out of service (its taint, or a cordon it made, on a node that carries no startup taint: one
that never entered service is not taken out of it) carries the label gpuval.dev/out-of-service, the
index the operator-wide limit counts by.

Pure: `plan_node` turns the node as it is and one validation's new entry into a merge patch of
the node and its condition, or nothing when nothing changes. It only touches gpuval.dev keys,
the gpuval.dev/unhealthy taint, a cordon gpuval made (recorded in an annotation) and the
startup taint a spec names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuval_api import RepairAction, Verdict, action_of, keys, label_value
from gpuval_api.crd import TaintEffect
from gpuval_api.remediation import (
    NEEDS_REPAIR_REASON,
    NOT_REQUESTED_REASON,
    RepairState,
    repairs_text,
)
from gpuval_operator.remediation.record import RepairRecord
from gpuval_operator.timestamps import rfc3339

# The value of keys.NODE_LABEL_OUT_OF_SERVICE (its presence is what counts), and of
# keys.NODE_LABEL_NEEDS_REPAIR.
OUT_OF_SERVICE = "true"
NEEDS_REPAIR = "true"
# A stronger effect wins when several failing validations ask for a taint.
_EFFECT_RANK = {
    TaintEffect.PREFER_NO_SCHEDULE: 1,
    TaintEffect.NO_SCHEDULE: 2,
    TaintEffect.NO_EXECUTE: 3,
}


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One validation's word on a node (compact JSON in its annotation)."""

    verdict: str  # Passed, Failed or NotRun: the latest
    tested: str | None  # the latest with evidence: Passed or Failed; None: never tested
    reason: str | None
    at: int
    run: str
    boot: str = ""
    stack: str = ""
    label: bool = True
    taint: str | None = None  # the effect asked for on failure
    cordon: bool = False
    startup_taint: str | None = None  # a key to remove on pass
    # Failed, but its taint and cordon are held: the cause (a ConditionReason of NodeActionsHeld).
    hold: str | None = None
    # Since when (Unix seconds) its taint or cordon is in force: a release at or after it
    # approves the node, which then no longer counts against the validation's maxNodes.
    since: int | None = None
    # Where the node stands in the validation's repair loop (spec.remediation).
    repair: RepairRecord | None = None

    def encode(self) -> str:
        data = asdict(self)
        for optional in ("hold", "since", "repair"):  # absent, not null: entries stay short
            if data[optional] is None:
                del data[optional]
        if self.repair is not None:
            data["repair"] = self.repair.to_json()
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @property
    def repairing(self) -> bool:
        """Its node is in the engine's hands or being proven again after a repair."""
        return self.repair is not None and self.repair.active

    @property
    def in_force(self) -> bool:
        """Its verdict is Failed and its taint or cordon is applied (not held)."""
        return (
            self.tested == Verdict.FAILED
            and self.hold is None
            and (self.taint is not None or self.cordon)
        )

    @classmethod
    def decode(cls, text: str | None) -> NodeEntry | None:
        try:
            data = json.loads(text or "")
            fields = {k: data[k] for k in cls.__slots__ if k in data}
            fields["repair"] = RepairRecord.from_json(data.get("repair"))
            return cls(**fields)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def entry_key(validation: str) -> str:
    return keys.NODE_VERDICT_ANNOTATION_PREFIX + label_value(validation)


def entries(annotations: Mapping[str, str]) -> dict[str, NodeEntry]:
    """Validation (as its key spells it) -> its entry, for every readable entry on the node."""
    found: dict[str, NodeEntry] = {}
    for key, value in annotations.items():
        if key.startswith(keys.NODE_VERDICT_ANNOTATION_PREFIX):
            entry = NodeEntry.decode(value)
            if entry is not None:
                found[key.removeprefix(keys.NODE_VERDICT_ANNOTATION_PREFIX)] = entry
    return found


def next_entry(previous: NodeEntry | None, verdict: Verdict, **fields: Any) -> NodeEntry:
    """The entry after a verdict: a NotRun keeps the last tested verdict (no evidence either
    way), Passed and Failed replace it."""
    tested = str(verdict) if verdict in (Verdict.PASSED, Verdict.FAILED) else None
    if tested is None and previous is not None:
        tested = previous.tested
    return NodeEntry(verdict=str(verdict), tested=tested, **fields)


def already_said(previous: NodeEntry | None, said: NodeEntry) -> bool:
    """The node's entry already holds this verdict of this run, on the same boot and GPU stack:
    its Events were posted when it was written, and a run closed again (after an operator
    restart, a revised verdict) posts them once. A node tested again in the same run after a
    reboot or a stack change (spec.gating) has another boot or stack: its Events are posted."""
    return previous is not None and (
        previous.run,
        previous.verdict,
        previous.reason,
        previous.boot,
        previous.stack,
    ) == (said.run, said.verdict, said.reason, said.boot, said.stack)


@dataclass(slots=True)
class Aggregate:
    state: str  # keys.NODE_VERDICT_*: failed > not-run (some validation never tested) > passed
    failed_by: list[str] = field(default_factory=list)
    untested_by: list[str] = field(default_factory=list)
    # Failing validations whose taint and cordon are held, and why.
    held: dict[str, str] = field(default_factory=dict)
    # The reason the taint's value names: the first failing validation whose actions apply.
    taint_reason: str | None = None
    reason: str | None = None
    validated_at: int = 0
    taint_effect: str | None = None
    cordon: bool = False
    label: bool = False
    startup_taints: set[str] = field(default_factory=set)
    # NVIDIA's documented action for `reason`.
    action: RepairAction = RepairAction.NONE
    # Each validation's repair record on the node (spec.remediation), by validation key.
    repairs: dict[str, RepairRecord] = field(default_factory=dict)

    @property
    def repairing(self) -> bool:
        """Some validation has the node in repair: it is out of service (the breaker counts it)."""
        return any(r.active for r in self.repairs.values())

    @property
    def needs_repair(self) -> list[str]:
        return sorted(v for v, r in self.repairs.items() if r.state == RepairState.NEEDS_REPAIR)


def aggregate(found: Mapping[str, NodeEntry]) -> Aggregate:
    """The node's state over every validation's entry."""
    failed = sorted(n for n, e in found.items() if e.tested == Verdict.FAILED)
    untested = sorted(n for n, e in found.items() if e.tested is None)
    state = (
        keys.NODE_VERDICT_FAILED
        if failed
        else keys.NODE_VERDICT_NOT_RUN
        if untested
        else keys.NODE_VERDICT_PASSED
    )
    result = Aggregate(state, failed, untested, label=any(e.label for e in found.values()))
    result.validated_at = max((e.at for e in found.values()), default=0)
    first = found[failed[0]] if failed else found[untested[0]] if untested else None
    result.reason = first.reason if first is not None else None
    result.held = {n: hold for n in failed if (hold := found[n].hold) is not None}
    asks = [found[n] for n in failed if n not in result.held]
    result.taint_reason = asks[0].reason if asks else None
    effects = [e.taint for e in asks if e.taint]
    result.taint_effect = max(
        effects, key=lambda e: _EFFECT_RANK.get(TaintEffect(e), 0), default=None
    )
    result.cordon = any(e.cordon for e in asks)
    result.startup_taints = {e.startup_taint for e in found.values() if e.startup_taint}
    result.action = action_of(result.reason) if failed else RepairAction.NONE
    result.repairs = {n: e.repair for n, e in sorted(found.items()) if e.repair is not None}
    return result


@dataclass(slots=True)
class NodePlan:
    """The changes one verdict brings to a node: a merge patch of the node, the condition to
    set on its status, and the same in words (for a dry run and the Events)."""

    patch: dict[str, Any] | None = None
    # Node conditions to set on its status (GpuValidated; with spec.remediation the repair's).
    conditions: list[dict[str, Any]] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def condition(self) -> dict[str, Any] | None:
        """The GpuValidated condition to set, if it changes."""
        return next((c for c in self.conditions if c["type"] == keys.NODE_CONDITION), None)


def _condition(agg: Aggregate, current: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    if agg.state == keys.NODE_VERDICT_FAILED:
        status, reason = "False", str(Verdict.FAILED)
        action = f"; NVIDIA's action: {agg.action}" if agg.action is not RepairAction.NONE else ""
        message = f"failed by {', '.join(agg.failed_by)} ({agg.reason}{action})"
        if agg.held:
            held = ", ".join(f"{n}: {cause}" for n, cause in sorted(agg.held.items()))
            message += f"; taint and cordon held ({held})"
    elif agg.state == keys.NODE_VERDICT_NOT_RUN:
        status, reason = "Unknown", str(Verdict.NOT_RUN)
        message = f"not tested yet by {', '.join(agg.untested_by)} ({agg.reason})"
    else:
        status, reason, message = "True", str(Verdict.PASSED), "passed every validation covering it"
    return _node_condition(keys.NODE_CONDITION, status, reason, message, current=current, now=now)


def _node_condition(
    kind: str,
    status: str,
    reason: str,
    message: str,
    *,
    current: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    since = now
    if (
        current is not None
        and current.get("status") == status
        and current.get("lastTransitionTime")
    ):
        since = current["lastTransitionTime"]
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": since,
        "lastHeartbeatTime": now,
    }


# A node's repair records, most telling first: the one a False GpuRepairRequested names.
_STATE_RANK = {
    RepairState.NEEDS_REPAIR: 0,
    RepairState.FAILED_AGAIN: 1,
    RepairState.REVALIDATING: 2,
    RepairState.REPAIRED: 3,
    RepairState.WITHDRAWN: 4,
}


def _repair_asked(validation: str, record: RepairRecord) -> str:
    where = f" ({record.obj})" if record.obj else ""
    return (
        f"{validation}: {record.reason} asks for {record.action}: repair {record.count} asked at "
        f"{rfc3339(record.asked)}{where}; gpuval validates the node again under load once the "
        "repair ended"
    )


def _repair_conditions(
    agg: Aggregate, current: Mapping[str, Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """GpuRepairRequested (True while a repair is asked: what a NodeHealthCheck or a
    MachineHealthCheck acts on) and GpuNeedsRepair (True once repair did not help); neither is
    written for a node that never was in the repair loop."""
    asked = [(v, r) for v, r in agg.repairs.items() if r.state == RepairState.REQUESTED]
    wanted: list[dict[str, Any]] = []
    requested = current.get(keys.NODE_CONDITION_REPAIR_REQUESTED)
    if asked:
        validation, record = asked[0]
        status, reason, message = "True", record.action, _repair_asked(validation, record)
    elif agg.repairs:
        validation, record = min(
            agg.repairs.items(), key=lambda i: _STATE_RANK.get(RepairState(i[1].state), 9)
        )
        status, reason = "False", record.state
        message = (
            f"{validation}: {record.state} after {repairs_text(record.count)} ({record.reason})"
        )
        if record.state == RepairState.WITHDRAWN:
            message = (
                f"{validation}: repair {record.count} ({record.action}, {record.reason}) "
                "withdrawn: the node passed before the repair ended"
            )
    else:
        status, reason = "False", NOT_REQUESTED_REASON
        message = "no validation asks for a repair of this node"
    if asked or agg.repairs or requested is not None:
        wanted.append(
            _node_condition(
                keys.NODE_CONDITION_REPAIR_REQUESTED,
                status,
                reason,
                message,
                current=requested,
                now=now,
            )
        )
    needs = current.get(keys.NODE_CONDITION_NEEDS_REPAIR)
    if agg.needs_repair:
        validation = agg.needs_repair[0]
        record = agg.repairs[validation]
        message = (
            f"{validation}: failed again ({record.reason}) after "
            f"{repairs_text(len(record.history))} within the window: no further repair is asked; "
            "a person or a hardware ticket takes over, then removes the label "
            f"{keys.NODE_LABEL_NEEDS_REPAIR} to have it validated again"
        )
        wanted.append(
            _node_condition(
                keys.NODE_CONDITION_NEEDS_REPAIR,
                "True",
                NEEDS_REPAIR_REASON,
                message,
                current=needs,
                now=now,
            )
        )
    elif needs is not None:
        reason = (
            RepairState.REPAIRED
            if any(r.state == RepairState.REPAIRED for r in agg.repairs.values())
            else NOT_REQUESTED_REASON
        )
        message = "no validation finds that this node needs a repair by hand"
        wanted.append(
            _node_condition(
                keys.NODE_CONDITION_NEEDS_REPAIR, "False", reason, message, current=needs, now=now
            )
        )
    return wanted


def _taints(spec: Mapping[str, Any], agg: Aggregate) -> tuple[list[dict[str, Any]], list[str]]:
    taints: list[dict[str, Any]] = list(spec.get("taints") or [])
    others = [t for t in taints if t.get("key") != keys.TAINT_KEY]
    changes: list[str] = []
    if agg.state == keys.NODE_VERDICT_PASSED:
        kept = [t for t in others if t.get("key") not in agg.startup_taints]
        changes += [f"remove startup taint {t['key']}" for t in others if t not in kept]
        others = kept
    wanted = list(others)
    if agg.taint_effect is not None:
        value = label_value(agg.taint_reason or agg.reason or str(Verdict.FAILED))
        wanted.append({"key": keys.TAINT_KEY, "value": value, "effect": agg.taint_effect})
        if not any(t.get("key") == keys.TAINT_KEY for t in taints):
            changes.append(f"taint {keys.TAINT_KEY}={value}:{agg.taint_effect}")
    elif any(t.get("key") == keys.TAINT_KEY for t in taints):
        changes.append(f"remove taint {keys.TAINT_KEY}")
    return wanted, changes


def _proof(
    agg: Aggregate, entry: NodeEntry | None, proof: str | None, stamp: str
) -> dict[str, str | None]:
    """The node's proof annotations after this write (docs/operator/proof-age.md): a pass given with
    `proof` (what proved it) is the proof as of `stamp`; while any validation's verdict is Failed
    the proof is void (removed); anything else leaves it as it is."""
    if agg.state == keys.NODE_VERDICT_FAILED:
        return {keys.NODE_ANNOTATION_PROVEN_AT: None, keys.NODE_ANNOTATION_PROVEN_BY: None}
    if entry is not None and entry.verdict == Verdict.PASSED and proof is not None:
        return {keys.NODE_ANNOTATION_PROVEN_AT: stamp, keys.NODE_ANNOTATION_PROVEN_BY: proof}
    return {}


def plan_node(
    node: Mapping[str, Any],
    validation: str,
    entry: NodeEntry | None,
    stamp: str,
    *,
    proof: str | None = None,
) -> NodePlan:
    """`validation`'s new entry on `node` (None: forget it) and what the node then needs.

    `stamp` is the time now as RFC 3339, for the condition's times and a new proof; `proof` is
    what a verdict's write proves the node by ("<validation>/<run> <trigger>"; None for writes
    that are no verdict: the repair loop moving on, a forgotten entry). The node patch carries the
    node's resourceVersion, because a merge patch replaces the whole taint list: a concurrent change
    makes it fail with 409 and the caller plans again.
    """
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    found = entries(annotations)
    key = entry_key(validation)
    short = key.removeprefix(keys.NODE_VERDICT_ANNOTATION_PREFIX)
    if entry is None:
        found.pop(short, None)
    else:
        found[short] = entry
    agg = aggregate(found)
    plan = NodePlan()
    label_patch = _labels(agg, found, labels, plan.changes)
    annotation_patch: dict[str, str | None] = {
        key: entry.encode() if entry is not None else None,
        keys.NODE_ANNOTATION_FAILED_BY: ",".join(agg.failed_by) or None,
        **_proof(agg, entry, proof, stamp),
    }
    spec_patch: dict[str, Any] = {}
    wanted, taint_changes = _taints(spec, agg)
    if wanted != list(spec.get("taints") or []):
        spec_patch["taints"] = wanted
        plan.changes += taint_changes
    cordoned_by = annotations.get(keys.NODE_ANNOTATION_CORDONED_BY)
    ours = cordoned_by is not None
    if agg.cordon and not spec.get("unschedulable"):
        spec_patch["unschedulable"] = True
        annotation_patch[keys.NODE_ANNOTATION_CORDONED_BY] = ",".join(agg.failed_by)
        plan.changes.append("cordon")
        ours = True
    elif not agg.cordon and cordoned_by is not None:
        spec_patch["unschedulable"] = None
        annotation_patch[keys.NODE_ANNOTATION_CORDONED_BY] = None
        plan.changes.append("uncordon")
        ours = False
    never_in_service = any(t.get("key") in agg.startup_taints for t in wanted)
    # A node in repair counts as out of service even when it never entered service: the breaker
    # bounds the nodes in the engine's hands as it bounds the tainted ones.
    out = ((agg.taint_effect is not None or ours) and not never_in_service) or agg.repairing
    if out != (keys.NODE_LABEL_OUT_OF_SERVICE in labels):
        label_patch[keys.NODE_LABEL_OUT_OF_SERVICE] = OUT_OF_SERVICE if out else None
    annotation_patch = {k: v for k, v in annotation_patch.items() if annotations.get(k) != v}
    if label_patch or annotation_patch or spec_patch:
        body: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion")}
        if label_patch:
            body["labels"] = label_patch
        if annotation_patch:
            body["annotations"] = annotation_patch
        plan.patch = {"metadata": body, **({"spec": spec_patch} if spec_patch else {})}
    plan.conditions = _wanted_conditions(node, agg, stamp, plan.changes)
    return plan


def _labels(
    agg: Aggregate, found: Mapping[str, NodeEntry], labels: Mapping[str, str], changes: list[str]
) -> dict[str, str | None]:
    wanted: dict[str, str | None] = {
        keys.NODE_LABEL_VERDICT: agg.state if found and agg.label else None,
        keys.NODE_LABEL_VALIDATED_AT: str(agg.validated_at) if found and agg.label else None,
        keys.NODE_LABEL_REASON: (
            label_value(agg.reason)
            if found and agg.label and agg.reason and agg.state != keys.NODE_VERDICT_PASSED
            else None
        ),
    }
    wanted[keys.NODE_LABEL_NEEDS_REPAIR] = NEEDS_REPAIR if agg.needs_repair else None
    patch = {k: v for k, v in wanted.items() if labels.get(k) != v}
    if keys.NODE_LABEL_NEEDS_REPAIR in patch:
        changes.append(
            f"label {keys.NODE_LABEL_NEEDS_REPAIR}={patch[keys.NODE_LABEL_NEEDS_REPAIR]}"
        )
    if keys.NODE_LABEL_VERDICT in patch:
        changes.append(f"label {keys.NODE_LABEL_VERDICT}={patch[keys.NODE_LABEL_VERDICT]}")
    return patch


def _wanted_conditions(
    node: Mapping[str, Any], agg: Aggregate, stamp: str, changes: list[str]
) -> list[dict[str, Any]]:
    """The node conditions that differ from what the node shows (status, reason or message)."""
    conditions: Sequence[Mapping[str, Any]] = (node.get("status") or {}).get("conditions") or []
    current = {str(c.get("type")): c for c in conditions}
    wanted = _repair_conditions(agg, current, stamp)
    if agg.label:
        wanted.insert(0, _condition(agg, current.get(keys.NODE_CONDITION), stamp))
    changed = []
    for condition in wanted:
        now = current.get(condition["type"])
        if now is not None and all(
            now.get(k) == condition[k] for k in ("status", "reason", "message")
        ):
            continue
        changes.append(
            f"condition {condition['type']}={condition['status']} ({condition['message']})"
        )
        changed.append(condition)
    return changed
