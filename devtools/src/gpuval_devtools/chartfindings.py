"""Pure: what kubeconform, kube-score and checkov found in the rendered chart, read from their JSON
output, and compared with the findings the project has justified (charts/gpuval/lint-findings.yaml).
Nothing here runs a tool or reads a file.

A finding is (tool, check, object), the object as ``Kind/name``: the same finding in two rendered
scenarios (the defaults, every option on) is one finding. The justified list must match what the
tools find exactly: a new finding fails the lint until it is fixed or justified, and a
justification whose finding is gone fails it too, so the file never explains what is not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

TOOLS = ("kubeconform", "kube-score", "checkov")
# kube-score's grades: 1 critical, 5 warning, 7 almost OK, 10 OK.
KUBE_SCORE_CRITICAL = 1
KUBE_SCORE_WARNING = 5


@dataclass(frozen=True, order=True)
class Finding:
    tool: str
    check: str
    object: str
    message: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tool, self.check, self.object)

    def line(self) -> str:
        return f"{self.tool} {self.check} {self.object}: {self.message}"


@dataclass(frozen=True)
class Justification:
    tool: str
    check: str
    objects: tuple[str, ...]
    reason: str

    def keys(self) -> set[tuple[str, str, str]]:
        return {(self.tool, self.check, o) for o in self.objects}


@dataclass(frozen=True)
class Counts:
    """What a tool reported in total, for the figures (checkov: passed/failed; kube-score:
    critical/warning; kubeconform: valid/invalid resources)."""

    tool: str
    ok: int
    failed: int
    critical: int = 0


def kubeconform_findings(output: str) -> tuple[list[Finding], Counts]:
    """``kubeconform -output json -summary``: every resource that is not valid (a missing schema
    is an error too: the lint never runs without -ignore-missing-schemas)."""
    report = yaml.safe_load(output)
    found = []
    for resource in report.get("resources") or []:
        if resource.get("status") in ("statusValid", "statusSkipped"):
            continue
        # `msg` has the whole error ("at '/spec': additional properties 'replica' not allowed");
        # validationErrors only its first level ("/spec: validation failed").
        errors = resource.get("validationErrors") or []
        detail = "; ".join(f"{e.get('path', '')}: {e.get('msg', '')}" for e in errors)
        found.append(
            Finding(
                "kubeconform",
                str(resource.get("status", "statusError")),
                f"{resource.get('kind', '?')}/{resource.get('name', '?')}",
                str(resource.get("msg") or detail),
            )
        )
    totals = report.get("summary") or {}
    failed = sum(int(totals.get(k, 0)) for k in ("invalid", "errors"))
    return found, Counts("kubeconform", ok=int(totals.get("valid", 0)), failed=failed)


def kube_score_findings(output: str) -> tuple[list[Finding], Counts]:
    """``kube-score score -o json``: every check graded warning or critical."""
    found = []
    critical = warning = ok = 0
    for scored in yaml.safe_load(output) or []:
        obj = f"{scored['type_meta']['kind']}/{scored['object_meta']['name']}"
        for check in scored.get("checks") or []:
            if check.get("skipped"):
                continue
            grade = int(check["grade"])
            if grade > KUBE_SCORE_WARNING:
                ok += 1
                continue
            critical += grade <= KUBE_SCORE_CRITICAL
            warning += grade > KUBE_SCORE_CRITICAL
            summary = "; ".join(
                f"{c.get('path') or ''} {c.get('summary', '')}".strip()
                for c in check.get("comments") or []
            )
            level = "CRITICAL" if grade <= KUBE_SCORE_CRITICAL else "WARNING"
            found.append(Finding("kube-score", check["check"]["id"], obj, f"{level}: {summary}"))
    return found, Counts("kube-score", ok=ok, failed=warning, critical=critical)


def document_spans(manifest: str) -> list[tuple[int, int, str]]:
    """(first line, last line, ``Kind/name``) of each document of a multi-document YAML file,
    lines counted from 1 as checkov counts them."""
    spans = []
    lines = manifest.splitlines()
    start = 1
    for number in range(1, len(lines) + 2):
        if number > len(lines) or lines[number - 1].startswith("---"):
            doc = yaml.safe_load("\n".join(lines[start - 1 : number - 1]))
            if isinstance(doc, dict) and "kind" in doc:
                spans.append((start, number - 1, f"{doc['kind']}/{doc['metadata']['name']}"))
            start = number + 1
    return spans


def checkov_findings(output: str, manifest: str) -> tuple[list[Finding], Counts]:
    """``checkov -o json`` on ``manifest``: every failed check, named by the document it is in
    (checkov names a Deployment's pod template ``Pod.<namespace>.<name>.<labels>``)."""
    spans = document_spans(manifest)
    reports = yaml.safe_load(output)
    found = []
    passed = 0
    for report in reports if isinstance(reports, list) else [reports]:
        results = report.get("results") or {}
        passed += len(results.get("passed_checks") or [])
        for failed in results.get("failed_checks") or []:
            line = failed["file_line_range"][0]
            obj = next((name for first, last, name in spans if first <= line <= last), None)
            if obj is None:
                obj = str(failed["resource"]).replace(".", "/", 1)
            found.append(Finding("checkov", failed["check_id"], obj, failed.get("check_name", "")))
    return found, Counts("checkov", ok=passed, failed=len(found))


def unique(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (tool, check, object), the first message kept, sorted."""
    seen: dict[tuple[str, str, str], Finding] = {}
    for finding in findings:
        seen.setdefault(finding.key, finding)
    return sorted(seen.values())


def parse_justifications(text: str, source: str) -> list[Justification]:
    """The justified findings file: a list of {tool, check, objects, reason}; a malformed entry is
    an error naming the entry, the field and what it should be."""
    entries = yaml.safe_load(text) or []
    if not isinstance(entries, list):
        raise ValueError(f"{source}: expected a list of findings, got {type(entries).__name__}")
    out = []
    for number, entry in enumerate(entries, start=1):
        where = f"{source}: entry {number}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping with tool, check, objects, reason")
        if entry.get("tool") not in TOOLS:
            raise ValueError(f"{where}: tool {entry.get('tool')!r} is not one of {list(TOOLS)}")
        objects = entry.get("objects")
        if not isinstance(objects, list) or not objects or not all("/" in o for o in objects):
            raise ValueError(f"{where}: objects {objects!r} must be a list of Kind/name")
        reason = str(entry.get("reason") or "").strip()
        if len(reason) < 20:
            raise ValueError(f"{where}: reason {reason!r} must say why the finding is left")
        out.append(Justification(entry["tool"], str(entry["check"]), tuple(objects), reason))
    return out


@dataclass(frozen=True)
class Verdict:
    new: list[Finding]
    stale: list[tuple[str, str, str]]

    @property
    def ok(self) -> bool:
        return not self.new and not self.stale

    def explain(self, source: str) -> str:
        lines = []
        if self.new:
            lines.append(f"new findings (fix them, or justify each in {source}):")
            lines += [f"  {f.line()}" for f in self.new]
        if self.stale:
            lines.append(f"justified in {source} but no longer found (remove them):")
            lines += [f"  {tool} {check} {obj}" for tool, check, obj in self.stale]
        return "\n".join(lines)


def compare(found: Sequence[Finding], justified: Sequence[Justification]) -> Verdict:
    keys: set[tuple[str, str, str]] = set()
    for justification in justified:
        keys |= justification.keys()
    found_keys = {f.key for f in found}
    return Verdict(
        new=[f for f in unique(found) if f.key not in keys],
        stale=sorted(keys - found_keys),
    )


def summary(counts: Mapping[str, Counts]) -> str:
    parts = []
    for tool, c in counts.items():
        if tool == "kube-score":
            parts.append(f"kube-score {c.critical} critical, {c.failed} warning, {c.ok} ok")
        elif tool == "checkov":
            parts.append(f"checkov {c.ok} passed, {c.failed} failed")
        else:
            parts.append(f"{tool} {c.ok} valid, {c.failed} invalid")
    return "; ".join(parts)
