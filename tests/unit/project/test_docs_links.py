"""The link check of gpuval_devtools.doclinks: every relative link in the pages a person reads
lands on a file and, where it names a section, on a heading; and the check itself fails on a
broken link, naming the page, the line and the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval_devtools.doclinks import GITHUB, REPO_ROOT, anchor, anchors, broken, pages

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
