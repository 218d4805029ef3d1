"""Every generated file of the repository from its one source: `python -m gpuval_api.generate`
writes them, `--check` exits 1 naming the stale ones (make generate / make check-generated).

- crds/*.yaml and the chart's copy charts/gpuval/crds/*.yaml, from the types in gpuval_api.crd;
- api/schemas/*.json, the result document's and the checks configuration's JSON Schemas;
- the tables between markers in docs/ (gpuval_api.docgen): reasons, checks defaults, env names,
  the CRDs' spec fields and printer columns (docs/operator/reference.md), docs/operator/index.md's
  table of contents;
- the baselines shipped in gpuval_api/baseline/shipped/, from benchmarks/results
  (gpuval_api.baseline.shippedgen).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from gpuval_api import crdgen, docgen
from gpuval_api.baseline import shippedgen
from gpuval_api.result import SCHEMA_FILES

REPO_ROOT = Path(__file__).resolve().parents[3]


Render = Callable[[str | None], str]


def _fixed(text: str) -> Render:
    return lambda _current: text


def _computed(render: Callable[[], str]) -> Render:
    return lambda _current: render()


def _document(document: str, sections: list[tuple[str, Callable[[], str]]]) -> Render:
    def render(current: str | None) -> str:
        if current is None:
            raise FileNotFoundError(f"{document} is missing: the generated tables live in it")
        for section, table in sections:
            current = docgen.render_section(current, section, table())
        return current

    return render


def generated_files(root: Path = REPO_ROOT) -> dict[Path, Render]:
    """Path -> a function of the file's current text (None: missing) giving its wanted text."""
    files: dict[Path, Render] = {}
    for name, obj in crdgen.build_crds().items():
        for folder in ("crds", "charts/gpuval/crds"):
            files[root / folder / name] = _fixed(crdgen.render(obj))
    for name, schema in SCHEMA_FILES.items():
        files[root / "api" / "schemas" / name] = _computed(schema)
    shipped = root / "api" / "src" / "gpuval_api" / "baseline" / shippedgen.SHIPPED.name
    for name, text in shippedgen.render().items():
        files[shipped / name] = _fixed(text)
    by_document: dict[str, list[tuple[str, Callable[[], str]]]] = {}
    for section, (document, table) in docgen.SECTIONS.items():
        by_document.setdefault(document, []).append((section, table))
    for document, sections in by_document.items():
        files[root / document] = _document(document, sections)
    return files


def stale(root: Path = REPO_ROOT) -> list[Path]:
    out = []
    for path, render in generated_files(root).items():
        current = path.read_text() if path.exists() else None
        if current != render(current):
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuval_api.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"stale: {path.relative_to(REPO_ROOT)}", file=sys.stderr)
        if found:
            print("run `make generate` and commit the result", file=sys.stderr)
        return 1 if found else 0
    for path, render in generated_files().items():
        current = path.read_text() if path.exists() else None
        wanted = render(current)
        if wanted != current:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted)
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
