"""The tables of docs/operator/reference.md whose one source is the operator's code, between
`<!-- NAME:begin ... -->` markers as gpuval_api.docgen's (which cannot import the operator):
the RBAC the code calls, from gpuval_operator.rbac.

Command line: ``python -m gpuval_devtools.operatordocs [--check]`` (make generate, make
check-generated).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuval_api.docgen import render_section
from gpuval_devtools.buildsteps import REPO_ROOT
from gpuval_operator import rbac

REFERENCE = REPO_ROOT / "docs" / "operator" / "reference.md"


def _words(items: Sequence[str]) -> str:
    """API groups or resources as the rule names them (`""`: the core group); a placeholder in
    words, for the engine's rule, as it is."""
    return ", ".join(item if " " in item else f"`{item}`" if item else '`""`' for item in items)


def rbac_table() -> str:
    """Every rule of gpuval_operator.rbac: where it is granted, to whom, and why."""
    engine = rbac.Rule(
        ("the engine's group (the chart's `remediation.rbac`)",),
        ("its resources, e.g. `rebootnodes`",),
        rbac.REMEDIATION_VERBS,
        why="spec.remediation mode Template: the repair objects, listed by label, made, read "
        "back on 409, deleted once the repair ended",
    )
    places: list[tuple[str, tuple[rbac.Rule, ...]]] = [
        ("operator: ClusterRole", rbac.CLUSTER_RULES),
        ("operator: ClusterRole", (engine,)),
        ("operator: Role in the agents' namespace", rbac.AGENT_NAMESPACE_RULES),
        (f"operator: Role in `{rbac.EVENT_NAMESPACE}`", rbac.EVENT_RULES),
        ("operator: Role in its own namespace", rbac.OWN_NAMESPACE_RULES),
        ("agent: ClusterRole", rbac.AGENT_RULES),
        ("agent: Role in the agents' namespace", rbac.AGENT_POD_RULES),
    ]
    lines = ["| granted | apiGroups | resources | verbs | why |", "|---|---|---|---|---|"]
    for place, rules in places:
        for rule in rules:
            lines.append(
                f"| {place} | {_words(rule.api_groups)} | {_words(rule.resources)} | "
                f"{', '.join(rule.verbs)} | {rule.why} |"
            )
    return "\n".join(lines) + "\n"


SECTIONS = {"rbac": rbac_table}
GENERATOR = "python -m gpuval_devtools.operatordocs"


def render(current: str) -> str:
    for name, table in SECTIONS.items():
        current = render_section(current, name, table(), GENERATOR)
    return current


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuval_devtools.operatordocs")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    current = REFERENCE.read_text()
    wanted = render(current)
    if wanted == current:
        return 0
    if args.check:
        print(f"stale: {REFERENCE.relative_to(REPO_ROOT)} (run `make generate`)", file=sys.stderr)
        return 1
    REFERENCE.write_text(wanted)
    print(f"wrote {REFERENCE.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
