"""api/ is the contract between agent, operator, devtools, chart and docs: a status key, an
environment variable name, a verdict, a reason, a condition type or a label key is spelled there
once. This test reads the product code and refuses any of those values written as a bare string
anywhere else, so the two ends of a contract cannot drift apart."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from gpuval_api import conditions, figures, keys, kubernetes, kueue, report
from gpuval_api.crd import GpuNodeReportStatus, ReportSummary, RunTrigger
from gpuval_api.env import AgentEnv, OperatorEnv
from gpuval_api.fabric import FabricKey, FabricStatus
from gpuval_api.reasons import Reason
from gpuval_api.result import Verdict

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = [ROOT / p / "src" for p in ("operator", "agent", "devtools", "report", "kubectl-gpuval")]
ENUMS: list[type[StrEnum]] = [
    AgentEnv,
    OperatorEnv,
    Reason,
    Verdict,
    conditions.ConditionType,
    conditions.ConditionReason,
    conditions.EventReason,
    conditions.ValidationPhase,
    report.ReportPhase,
    report.SummaryKey,
    kubernetes.PodPhase,
    RunTrigger,
]
# Report-status keys that are also ordinary words of Kubernetes objects ("phase", "reason",
# "message" of pods and conditions) cannot be told apart by their spelling and are left out.
GENERIC = {"phase", "reason", "message", "result", "summary", "startedAt", "completedAt"}
# Values of two contracts at once, each legitimately spelled by the other: node-count keys of the
# GpuValidation status ("passed", "failed") equal the node label's values, a condition's status
# "Unknown" equals the pod phase, and "gpuCount" is a key of both the summary and the result
# document's environment; "created" is a run trigger and kubectl's word for an object made
# (`kubectl gpuval baseline import` says it, as kubectl does).
AMBIGUOUS = {"passed", "failed", "Unknown", "gpuCount", "created"}


def contract_values() -> set[str]:
    values = {str(member) for enum in ENUMS for member in enum}
    values |= {str(k) for k in report.StatusKey} - GENERIC
    for module in (keys, kubernetes, kueue):
        values |= {v for n, v in vars(module).items() if n.isupper() and isinstance(v, str) and v}
    # Kubernetes' own words that gpuval also uses in another sense, and the agent's one label.
    return values - AMBIGUOUS - {keys.AGENT_COMPONENT}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def string_literals(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def test_no_contract_value_is_spelled_outside_api() -> None:
    values = contract_values()
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for base in PRODUCT
        for path in sorted(base.rglob("*.py"))
        for line, text in string_literals(path)
        if text in values
    ]
    assert found == [], "use the gpuval_api member instead of the literal:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "literal", ['"GPUVAL_CHECKS"', '"Passed"', '"gpuval.dev/run"', '"NodeGone"']
)
def test_the_check_finds_a_literal(tmp_path: Path, literal: str) -> None:
    source = tmp_path / "m.py"
    source.write_text(f'"""doc {literal} """\nX = {literal}\n')
    assert [(2, literal.strip('"'))] == [
        (line, text) for line, text in string_literals(source) if text in contract_values()
    ]


def test_report_status_keys_are_the_crds_field_names() -> None:
    aliases = {f.alias or n for n, f in GpuNodeReportStatus.model_fields.items()}
    assert {str(k) for k in report.StatusKey} == aliases
    summary = {f.alias or n for n, f in ReportSummary.model_fields.items()}
    figure_keys = {f.key for f in figures.summary_figures()}
    assert {str(k) for k in report.SummaryKey} | figure_keys == summary


def test_fabric_status_keys_are_the_crds_field_names() -> None:
    aliases = {f.alias or n for n, f in FabricStatus.model_fields.items()}
    assert {str(k) for k in FabricKey} == aliases
