"""Generated sections of the Markdown docs: tables rendered from the one source in code, between
`<!-- NAME:begin ... -->` and `<!-- NAME:end -->` markers (python -m gpuval_api.generate).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from gpuval_api import figures
from gpuval_api.checks import ChecksConfig, Threshold
from gpuval_api.env import AgentEnv, OperatorEnv
from gpuval_api.figures import PerPrecision, PerSize
from gpuval_api.reasons import REASONS


def begin_marker(name: str) -> str:
    return f"<!-- {name}:begin (generated: python -m gpuval_api.generate) -->\n"


def end_marker(name: str) -> str:
    return f"<!-- {name}:end -->\n"


def render_section(document: str, name: str, body: str) -> str:
    """`document` with the text between `name`'s markers replaced by `body`."""
    begin, end = begin_marker(name), end_marker(name)
    before, found, rest = document.partition(begin)
    _, found_end, after = rest.partition(end)
    if not found or not found_end:
        raise ValueError(
            f"the document has no {name!r} markers ({begin.strip()} ... {end.strip()})"
        )
    return before + begin + body + end + after


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reasons_table() -> str:
    lines = [
        "| reason | severity | node verdict | repair action | meaning | what to do |",
        "|---|---|---|---|---|---|",
    ]
    for reason, entry in REASONS.items():
        lines.append(
            f"| `{reason}` | {entry.severity} | {entry.verdict} | {entry.action} | "
            f"{_cell(entry.summary)} | {_cell(entry.hint)} |"
        )
    return "\n".join(lines) + "\n"


def _fields(value: BaseModel, prefix: str) -> Iterator[tuple[str, Any, str]]:
    for name, field in type(value).model_fields.items():
        path = f"{prefix}{field.alias or name}"
        current = getattr(value, name)
        if isinstance(current, Threshold):
            yield (
                path,
                current.model_dump(by_alias=True, exclude_none=True),
                field.description or "",
            )
        elif isinstance(current, BaseModel):
            yield from _fields(current, f"{path}.")
        else:
            shown = (
                [getattr(v, "value", v) for v in current] if isinstance(current, list) else current
            )
            yield path, shown, field.description or ""


def checks_defaults_table() -> str:
    """Every field of spec.checks / GPUVAL_CHECKS / `gpuval-agent run` with its default: the same
    model makes the CRD's defaults and the agent's, so this table is what both apply."""
    lines = ["| field | default | meaning |", "|---|---|---|"]
    for path, value, description in _fields(ChecksConfig(), ""):
        shown = "unset" if value is None else f"`{json.dumps(value)}`"
        lines.append(f"| `{path}` | {_cell(shown)} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


def _yes(flag: bool) -> str:
    return "yes" if flag else ""


def figures_table() -> str:
    """Every figure of the registry with every spelling and place derived from its declaration."""
    lines = [
        "| figure | label | unit | check | better | node value | "
        "threshold name (if its check has one) | summary / history key | Prometheus series | "
        "baseline | scope | history | shown |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for figure in figures.all_figures():
        series = [f"`gpuval_node_{figure.prometheus}`"] if figure.summary else []
        if figure.per_gpu_metric:
            series.append(f"`gpuval_gpu_{figure.prometheus}`")
        family = {PerPrecision: ".<precision>", PerSize: ".<size>"}.get(type(figure.read), "")
        baseline = f"`{figure.baseline}{family}`" if figure.baseline else ""
        shown = figure.shown
        places = [
            name
            for name, flag in (
                ("page", shown.page),
                ("dashboard", bool(shown.trend or shown.distribution or shown.per_gpu)),
                (f"column {shown.column}", bool(shown.column)),
            )
            if flag
        ]
        lines.append(
            f"| `{figure.id}` | {_cell(figure.label)} | {figure.unit} | {figure.check} | "
            f"{figure.better} | {_NODE_VALUE[figure.worst]} | `{figure.threshold}` | "
            f"`{figure.key}` | {', '.join(series)} | {baseline} | "
            f"{figure.scope} | {_yes(figure.history)} | {', '.join(places)} |"
        )
    return "\n".join(lines) + "\n"


_NODE_VALUE = {"min": "lowest", "max": "highest"}


def summary_keys() -> str:
    """The keys of a GpuNodeReport's status.summary, each with its node value and unit."""
    lines = ["- `gpuCount`: int"]
    for figure in figures.summary_figures():
        lines.append(
            f"- `{figure.key}`: the {_NODE_VALUE[figure.worst]} of its values "
            f"({figure.better} is better), {figure.unit}"
        )
    return "\n".join(lines) + "\n"


def history_keys() -> str:
    """The keys of a `spec.history` entry: its stamp and the registry's history figures."""
    keys = ["run", "completedAt", "gpuIdentity", *(f.key for f in figures.history_figures())]
    return ", ".join(f"`{key}`" for key in keys) + "\n"


def env_table() -> str:
    lines = ["| variable | read by | set by |", "|---|---|---|"]
    for agent_var in AgentEnv:
        lines.append(f"| `{agent_var}` | agent | operator (agent pod) or by hand |")
    for operator_var in OperatorEnv:
        lines.append(f"| `{operator_var}` | operator | chart (Deployment) |")
    return "\n".join(lines) + "\n"


SECTIONS: dict[str, tuple[str, Callable[[], str]]] = {
    "reasons": ("docs/agent.md", reasons_table),
    "checks-defaults": ("docs/agent.md", checks_defaults_table),
    "env": ("docs/contracts.md", env_table),
    "figures": ("docs/contracts.md", figures_table),
    "summary-keys": ("docs/contracts.md", summary_keys),
    "history-keys": ("docs/contracts.md", history_keys),
}
