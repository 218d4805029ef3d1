"""Every relative link in the pages a person reads lands: the file exists and, where the link
names a section, the page has a heading with that anchor (GitHub's rule: lower case, punctuation
dropped, spaces as hyphens, a repeated heading numbered). Pages move and split (docs/ says how
gpuval behaves, benchmarks/results/ how it was measured); a link to a section that moved fails
here instead of on GitHub."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted(
    {
        *REPO_ROOT.glob("*.md"),
        *REPO_ROOT.glob("*/README.md"),
        *REPO_ROOT.glob("docs/*.md"),
        *REPO_ROOT.glob("benchmarks/results/*.md"),
        *REPO_ROOT.glob("charts/*/README.md"),
    }
)
# The changelog tells what was true when each entry was written; its links are history.
PAGES = [page for page in PAGES if page.name != "CHANGELOG.md"]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for line in prose(page.read_text()):
        match = HEADING.match(line)
        if match:
            base = anchor(match.group(1))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    text = "\n".join(prose(page.read_text()))
    return LINK.findall(INLINE_CODE.sub("", text))


def broken(page: Path, root: Path = REPO_ROOT) -> list[str]:
    out = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{target}: no file {file.relative_to(root)}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            where = file.relative_to(root)
            out.append(f"{target}: no heading with anchor #{fragment} in {where}")
    return out


def test_the_pages_are_found() -> None:
    names = {str(page.relative_to(REPO_ROOT)) for page in PAGES}
    assert {
        "README.md",
        "docs/operator.md",
        "docs/agent.md",
        "benchmarks/results/operator.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_lands_on_a_file_and_a_heading(page: Path) -> None:
    assert broken(page) == []


def test_a_link_to_a_section_that_moved_is_caught(tmp_path: Path) -> None:
    (tmp_path / "behaviour.md").write_text("# Page\n\n## How it scales\ntext\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](behaviour.md#how-it-scales), [gone](behaviour.md#measured-at-10k)\n")
    assert broken(page, tmp_path) == [
        "behaviour.md#measured-at-10k: no heading with anchor #measured-at-10k in behaviour.md"
    ]


def test_anchors_follow_githubs_rule() -> None:
    assert anchor("The fabric phase (spec.fabric): NCCL across nodes") == (
        "the-fabric-phase-specfabric-nccl-across-nodes"
    )
    assert anchor("`kubectl gpuval evidence NODE`") == "kubectl-gpuval-evidence-node"
    assert anchor("Baselines: what this GPU model should do (`--baseline`)") == (
        "baselines-what-this-gpu-model-should-do---baseline"
    )
