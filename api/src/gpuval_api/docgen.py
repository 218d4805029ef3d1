"""Generated sections of the Markdown docs: tables rendered from the one source in code, between
`<!-- NAME:begin ... -->` and `<!-- NAME:end -->` markers (python -m gpuval_api.generate): the
reason catalogue, the checks' defaults, the figures and env names, the CRDs' fields and columns
(from gpuval_api.crdgen), and the operator pages' table of contents (from their headings).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpuval_api import crdgen, figures
from gpuval_api.checks import ChecksConfig, Threshold
from gpuval_api.env import AgentEnv, OperatorEnv
from gpuval_api.figures import PerPrecision, PerSize
from gpuval_api.reasons import REASONS

GENERATOR = "python -m gpuval_api.generate"


def begin_marker(name: str, generator: str = GENERATOR) -> str:
    return f"<!-- {name}:begin (generated: {generator}) -->\n"


def end_marker(name: str) -> str:
    return f"<!-- {name}:end -->\n"


def render_section(document: str, name: str, body: str, generator: str = GENERATOR) -> str:
    """`document` with the text between `name`'s markers replaced by `body`."""
    begin, end = begin_marker(name, generator), end_marker(name)
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


def _schema_type(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_schema_type(schema['additionalProperties'])}"
    return kind


def _schema_fields(
    schema: dict[str, Any], prefix: str, skip: frozenset[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, field in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        if path in skip:
            continue
        yield path, field
        yield from _schema_fields(field, f"{path}.", skip)
        items = field.get("items", {})
        if "properties" in items:
            yield from _schema_fields(items, f"{path}[].", skip)


def _crd_version(plural: str) -> dict[str, Any]:
    obj = crdgen.build_crds()[f"gpuval.dev_{plural}.yaml"]
    version: dict[str, Any] = obj["spec"]["versions"][0]
    return version


def spec_fields_table(plural: str, skip: frozenset[str] = frozenset()) -> str:
    """Every field of a kind's spec as its CRD declares it (`kubectl explain`'s words): type,
    the default the API server fills in, and the description."""
    spec = _crd_version(plural)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, field in _schema_fields(spec, "", skip):
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        lines.append(
            f"| `{path}` | {_schema_type(field)} | {_cell(default)} | "
            f"{_cell(str(field.get('description', '')))} |"
        )
    return "\n".join(lines) + "\n"


def printer_columns_table(plural: str) -> str:
    """A kind's `kubectl get` columns as its CRD declares them (priority 1: with `-o wide`)."""
    lines = ["| column | from | shown |", "|---|---|---|"]
    for column in _crd_version(plural).get("additionalPrinterColumns", []):
        shown = "with `-o wide`" if column.get("priority", 0) else "always"
        lines.append(f"| {column['name']} | `{_cell(column['jsonPath'])}` | {shown} |")
    return "\n".join(lines) + "\n"


OPERATOR_DOCS = Path(__file__).resolve().parents[3] / "docs" / "operator"
# The operator's pages in reading order, each with what a reader finds there.
OPERATOR_PAGES = (
    (
        "architecture.md",
        "the wings of the source and what each module is; credentials; two replicas; the demo",
    ),
    (
        "runs.md",
        "a run step by step, restart safety, scale, what a finished run still watches, limits, "
        "priority",
    ),
    (
        "verdicts-and-actions.md",
        "Passed, Failed, NotRun; node actions, the circuit breaker, systemic failures",
    ),
    ("capacity.md", "healthy capacity: the selected GPUs and nodes by state, the figure first"),
    ("devices.md", "shared GPUs; how an agent pod gets its GPUs: device plugin, DRA, MIG"),
    ("fabric.md", "spec.fabric: NCCL and training across nodes, how it scales; Kueue"),
    ("baselines.md", "spec.baseline: GpuBaselines learned and judged against, each node's history"),
    ("gating.md", "spec.gating: nodes tested as they join, reboot or change driver"),
    ("proof-age.md", "each node's proof; spec.maxProofAgeSeconds: no node's proof goes stale"),
    ("remediation.md", "spec.remediation: the repair loop, its engines and recipes"),
    ("reference.md", "the CRDs' fields, status and conditions; metrics and alerts; settings; RBAC"),
)
_HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def heading_anchor(text: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def page_headings(text: str) -> list[tuple[int, str, str]]:
    """(level, text, anchor) of a page's headings up to ###, outside fenced code; a repeated
    heading's anchor numbered as GitHub numbers it."""
    out, fenced, seen = [], False, Counter[str]()
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = heading_anchor(match.group(2))
            out.append(
                (
                    len(match.group(1)),
                    match.group(2),
                    base if seen[base] == 0 else f"{base}-{seen[base]}",
                )
            )
            seen[base] += 1
    return out


def operator_toc(
    folder: Path = OPERATOR_DOCS, pages: tuple[tuple[str, str], ...] = OPERATOR_PAGES
) -> str:
    """docs/operator/index.md's table of contents: every page, its title and its sections
    (## and ###), read from the pages themselves."""
    lines = []
    for name, about in pages:
        headings = page_headings((folder / name).read_text())
        titles = [text for level, text, _ in headings if level == 1]
        if not titles:
            raise ValueError(f"docs/operator/{name} has no title (a '# ' heading)")
        lines.extend(_item(0, f"[{titles[0]}]({name}): {about}"))
        for level, text, anchor in headings:
            if level > 1:
                lines.extend(_item(level - 1, f"[{text}]({name}#{anchor})"))
    return "\n".join(lines) + "\n"


def _item(depth: int, text: str) -> list[str]:
    """A list item at `depth`, its words wrapped at 120 characters (a link's text may run over a
    line break; its target, one word, never does)."""
    indent = "  " * depth
    return textwrap.wrap(
        f"{indent}- {text}",
        width=120,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


SECTIONS: dict[str, tuple[str, Callable[[], str]]] = {
    "reasons": ("docs/agent.md", reasons_table),
    "checks-defaults": ("docs/agent.md", checks_defaults_table),
    "env": ("docs/contracts.md", env_table),
    "figures": ("docs/contracts.md", figures_table),
    "summary-keys": ("docs/contracts.md", summary_keys),
    "history-keys": ("docs/contracts.md", history_keys),
    "operator-toc": ("docs/operator/index.md", operator_toc),
    "gpuvalidation-spec": (
        "docs/operator/reference.md",
        lambda: spec_fields_table("gpuvalidations", frozenset({"checks"})),
    ),
    "gpuvalidation-columns": (
        "docs/operator/reference.md",
        lambda: printer_columns_table("gpuvalidations"),
    ),
    "gpunodereport-spec": (
        "docs/operator/reference.md",
        lambda: spec_fields_table("gpunodereports"),
    ),
    "gpunodereport-columns": (
        "docs/operator/reference.md",
        lambda: printer_columns_table("gpunodereports"),
    ),
    "gpubaseline-spec": ("docs/operator/reference.md", lambda: spec_fields_table("gpubaselines")),
    "gpubaseline-columns": (
        "docs/operator/reference.md",
        lambda: printer_columns_table("gpubaselines"),
    ),
}
