"""Every relative link in the pages a person reads lands: the file exists and, where the link
names a section, the page has a heading with that anchor (GitHub's rule: lower case, punctuation
dropped, spaces as hyphens, a repeated heading numbered -1, -2). Pages move and split (docs/ says
how gpuval behaves, in pages; benchmarks/results/ how it was measured); a link to a section that
moved fails here, naming the page, the line and the target, instead of on GitHub.

The pages are every Markdown file git tracks (a checkout without git: every one under the root),
less the changelog (its links are history: what was true when each entry was written) and
anything vendored. A link to this repository on GitHub (the chart's README, read on Artifact Hub,
links that way) is checked as the file it names here."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
GITHUB = "https://github.com/gpuval/gpuval/blob/main/"
NOT_PAGES = {"CHANGELOG.md"}
NOT_FOLDERS = {".venv", "node_modules", "vendor", ".git", "out"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def pages(root: Path = REPO_ROOT) -> list[Path]:
    """The Markdown pages to check: git's tracked ones, else every one under `root`."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "*.md"],
            cwd=root,
            capture_output=True,
            check=True,
            text=True,
        ).stdout.split("\0")
        found = [root / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        found = list(root.rglob("*.md"))
    return sorted(
        page
        for page in found
        if page.exists()
        and page.name not in NOT_PAGES
        and not NOT_FOLDERS & set(page.relative_to(root).parts[:-1])
    )


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code, with their numbers (from 1)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose(page.read_text()):
        match = HEADING.match(line)
        if match:
            base = anchor(match.group(1))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """Each link's target with the line it starts on. A link whose text runs over a line break
    is read whole: lines are joined, and each match is placed by its offset."""
    numbered = prose(page.read_text())
    text = "\n".join(INLINE_CODE.sub(lambda m: "x" * len(m.group(0)), line) for _, line in numbered)
    starts, offset = [], 0
    for _, line in numbered:
        starts.append(offset)
        offset += len(line) + 1
    out = []
    for match in LINK.finditer(text):
        index = max(i for i, start in enumerate(starts) if start <= match.start())
        out.append((numbered[index][0], match.group(1)))
    return out


def broken(page: Path, root: Path = REPO_ROOT) -> list[str]:
    """`page:line: target: why` for each link of `page` that does not land."""
    out = []
    for line, target in links(page):
        if target.startswith(GITHUB):
            path, _, fragment = target.removeprefix(GITHUB).partition("#")
            file = root / path
        elif re.match(r"[a-z]+:", target):
            continue
        else:
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}:{line}: {target}"
        if not file.exists():
            out.append(f"{where}: no file {file.resolve().relative_to(root.resolve())}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            name = file.resolve().relative_to(root.resolve())
            out.append(f"{where}: no heading with anchor #{fragment} in {name}")
    return out


PAGES = pages()


def test_the_pages_are_found() -> None:
    names = {str(page.relative_to(REPO_ROOT)) for page in PAGES}
    assert {
        "README.md",
        "docs/operator/index.md",
        "docs/operator/reference.md",
        "docs/agent.md",
        "benchmarks/results/operator.md",
        "charts/gpuval/README.md",
    } <= names
    assert "CHANGELOG.md" not in names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_lands_on_a_file_and_a_heading(page: Path) -> None:
    assert broken(page) == []


def test_a_link_to_a_section_that_moved_is_caught(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "behaviour.md").write_text(
        "# Page\n\n## How it scales\ntext\n\n```\n## Not a heading\n```\n"
    )
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/behaviour.md#how-it-scales)\n"
        "text, then [gone](docs/behaviour.md#measured-at-10k)\n"
        "[fenced](docs/behaviour.md#not-a-heading) and [moved](docs/operator.md)\n"
        "`[in code](nowhere.md)` and [a page\nof GitHub](" + GITHUB + "docs/behaviour.md#nope)\n"
    )
    assert broken(page, tmp_path) == [
        "README.md:2: docs/behaviour.md#measured-at-10k: "
        "no heading with anchor #measured-at-10k in docs/behaviour.md",
        "README.md:3: docs/behaviour.md#not-a-heading: "
        "no heading with anchor #not-a-heading in docs/behaviour.md",
        "README.md:3: docs/operator.md: no file docs/operator.md",
        f"README.md:4: {GITHUB}docs/behaviour.md#nope: "
        "no heading with anchor #nope in docs/behaviour.md",
    ]


def test_a_repeated_heading_is_numbered(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Recipes\n## Recipes\n### Recipes!\n[third](#recipes-2) [fourth](#recipes-3)\n"
    )
    assert anchors(page) == {"recipes", "recipes-1", "recipes-2"}
    assert broken(page, tmp_path) == [
        "page.md:4: #recipes-3: no heading with anchor #recipes-3 in page.md"
    ]


def test_the_changelog_and_vendored_pages_are_left_out(tmp_path: Path) -> None:
    for name in ("README.md", "CHANGELOG.md", "node_modules/x/README.md", "docs/a.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("# x\n")
    assert [str(p.relative_to(tmp_path)) for p in pages(tmp_path)] == ["README.md", "docs/a.md"]


def test_anchors_follow_githubs_rule() -> None:
    assert anchor("The fabric phase (spec.fabric): NCCL across nodes") == (
        "the-fabric-phase-specfabric-nccl-across-nodes"
    )
    assert anchor("`kubectl gpuval evidence NODE`") == "kubectl-gpuval-evidence-node"
    assert anchor("Baselines: what this GPU model should do (`--baseline`)") == (
        "baselines-what-this-gpu-model-should-do---baseline"
    )
