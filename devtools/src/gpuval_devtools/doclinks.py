"""Every relative link in the pages a person reads lands: the file exists and, where the link
names a section, the page has a heading with that anchor (GitHub's rule: lower case, punctuation
dropped, spaces as hyphens, a repeated heading numbered -1, -2). Pages move and split (docs/ says
how gpuval behaves, in pages; benchmarks/results/ how it was measured); a link to a section that
moved fails `make check-generated` and tests/unit/project/test_docs_links.py, naming the page, the
line and the target, instead of failing a reader on GitHub.

The pages are every Markdown file git tracks (a checkout without git: every one under the root),
less the changelog (its links are history: what was true when each entry was written) and
anything vendored. A link to this repository on GitHub (the chart's README, read on Artifact Hub,
links that way) is checked as the file it names here. Links inside fenced code and inline code
are not links.

Command line: ``python -m gpuval_devtools.doclinks`` (exit 1 naming each broken link).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from gpuval_devtools.buildsteps import REPO_ROOT

GITHUB = "https://github.com/gpuval/gpuval/blob/main/"
NOT_PAGES = frozenset({"CHANGELOG.md"})
NOT_FOLDERS = frozenset({".venv", "node_modules", "vendor", ".git", "out"})

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


def main() -> int:
    found = [problem for page in pages() for problem in broken(page)]
    for problem in found:
        print(f"broken link: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
