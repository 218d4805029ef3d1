"""control.repair.reading: what the repair loop reads of the nodes, pure (split out of
RepairKeeper; the loop's behaviour is pinned by test_operator_remediation*.py)."""

from __future__ import annotations

from gpuval_operator.control.repair import reading
from gpuval_operator.nodes.entries import NodeEntry
from gpuval_operator.nodes.facts import NodeFacts


def node(name: str, entry: NodeEntry | None, *, label: bool = False) -> NodeFacts:
    return NodeFacts(
        name=name,
        gpus=8,
        ready=True,
        schedulable=True,
        boot_id="boot-1",
        stack="H200",
        entry=entry,
        needs_repair_label=label,
    )


def entry(tested: str | None, verdict: str = "Failed") -> NodeEntry:
    return NodeEntry(verdict=verdict, tested=tested, reason="GpuBurnFailed", at=100, run="r1")


def test_the_loop_acts_on_failed_nodes_only_without_a_record() -> None:
    nodes = {
        "failed": node("failed", entry("Failed")),
        "passed": node("passed", entry("Passed", "Passed")),
        "notrun": node("notrun", entry(None, "NotRun")),
        "unknown": node("unknown", None),
    }
    assert set(reading.candidates(nodes)) == {"failed"}
    assert reading.records(nodes) == {}


def test_a_nodes_repair_facts_carry_its_entry_and_are_not_busy_without_a_run() -> None:
    facts = reading.repair_facts(node("n1", entry("Failed"), label=True), None)
    assert facts is not None
    assert (facts.name, facts.tested, facts.reason, facts.at) == (
        "n1",
        "Failed",
        "GpuBurnFailed",
        100,
    )
    assert (facts.boot_id, facts.ready, facts.needs_repair_label, facts.busy) == (
        "boot-1",
        True,
        True,
        False,
    )
    assert reading.repair_facts(node("n2", None), None) is None


def test_a_revalidation_picks_from_the_load_checks_burn_first() -> None:
    assert reading.LOAD_CHECKS[0] == "burn"
    assert "state" not in reading.LOAD_CHECKS
