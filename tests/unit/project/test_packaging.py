"""What a person adopting gpuval reads before anything runs: one license (Apache-2.0) declared by
every package and the chart, the license text shipped with each package, and the metadata a
package index shows (readme, classifiers, project URLs)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_api.crd import DEFAULT_AGENT_IMAGE

REPO_ROOT = Path(__file__).resolve().parents[3]
MEMBERS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"][
    "members"
]
PYPROJECTS = [REPO_ROOT / "pyproject.toml"] + [REPO_ROOT / m / "pyproject.toml" for m in MEMBERS]


def _project(path: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(path.read_text())["project"]
    return project


def test_the_root_license_is_the_apache_license_2_0() -> None:
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.parent.name or "root"))
def test_every_pyproject_declares_apache_2_0_and_ships_the_license_text(pyproject: Path) -> None:
    project = _project(pyproject)
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    # PEP 639: a license expression replaces the License :: classifiers (a build refuses both).
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    # The wheel carries the file beside the pyproject: the root's text, byte for byte.
    assert (pyproject.parent / "LICENSE").read_bytes() == (REPO_ROOT / "LICENSE").read_bytes()
    assert (pyproject.parent / project["readme"]).is_file()


@pytest.mark.parametrize("member", MEMBERS)
def test_every_package_has_classifiers_and_project_urls(member: str) -> None:
    project = _project(REPO_ROOT / member / "pyproject.toml")
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert "Typing :: Typed" in project["classifiers"]
    package = "gpuval_kubectl" if member == "kubectl-gpuval" else f"gpuval_{member}"
    assert (REPO_ROOT / member / "src" / package / "py.typed").is_file()
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://github.com/gpuval/gpuval") for u in urls.values())
    build = tomllib.loads((REPO_ROOT / member / "pyproject.toml").read_text())["build-system"]
    # hatchling reads PEP 639's license expression and license-files from 1.27 on.
    assert build["requires"] == ["hatchling>=1.27"]


def test_the_chart_declares_the_same_license_for_artifact_hub() -> None:
    chart = yaml.safe_load((REPO_ROOT / "charts" / "gpuval" / "Chart.yaml").read_text())
    annotations = chart["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    assert chart["sources"] and chart["icon"].startswith("https://")
    for key in ("artifacthub.io/links", "artifacthub.io/images", "artifacthub.io/crds"):
        assert yaml.safe_load(annotations[key]), key


def test_artifact_hub_names_the_images_and_crds_the_chart_really_uses() -> None:
    chart_dir = REPO_ROOT / "charts" / "gpuval"
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    images = {
        i["name"]: i["image"] for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    }
    crds = yaml.safe_load(chart["annotations"]["artifacthub.io/crds"])

    operator = f"{values['operator']['image']['repository']}:{chart['appVersion']}"
    assert images == {"gpuval-operator": operator, "gpuval-agent": DEFAULT_AGENT_IMAGE}
    shipped = {
        yaml.safe_load(p.read_text())["metadata"]["name"]: yaml.safe_load(p.read_text())
        for p in (chart_dir / "crds").glob("*.yaml")
    }
    assert {c["name"] for c in crds} == set(shipped)
    for entry in crds:
        spec = shipped[entry["name"]]["spec"]
        assert entry["kind"] == spec["names"]["kind"]
        assert entry["version"] == spec["versions"][0]["name"]


def test_changelog_and_security_policy_exist_where_people_look() -> None:
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog")
    assert "## [Unreleased]" in changelog and "keepachangelog.com" in changelog
    security = (REPO_ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in security and "## Supported versions" in security
