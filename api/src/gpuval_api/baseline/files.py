"""A baseline as a YAML file: what a team carries between clusters (`kubectl apply -f` takes it as
it is), what `gpuval-agent run --baseline FILE` reads, and the baselines shipped in this package
(`shipped/`, made by `make generate` from benchmarks/results: gpuval_api.baseline.shippedgen).

A file holds one or more GpuBaseline documents (`---` between them), at most MAX_DOCUMENTS in
MAX_FILE_BYTES. Reading one refuses anything it would have to guess about, naming the file, the
document, the field and the value (quoted up to EXCERPT characters); a value that is not a number
(`.nan`, `.inf`) is refused as such.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpuval_api.crd import API_VERSION, BASELINE_KIND, GpuBaseline

SHIPPED_DIR = "shipped"
_FIX = "fix it, or export the baseline again (docs/agent.md, 'Baselines')"
# What one file may hold. A fleet has a handful of baselines of 2-7 KiB each (one per GPU stack),
# so these leave room for any real set and refuse a file that is not one (an import of 1,500
# documents made 1,500 objects; a 10 MB value came back whole in the error).
MAX_FILE_BYTES = 1 << 20
MAX_DOCUMENTS = 64
# An offending value is quoted up to this many characters in an error.
EXCERPT = 80


class BaselineFileError(ValueError):
    """A baseline file that cannot be used: the message names the field, the value and the fix."""


def to_document(baseline: GpuBaseline) -> dict[str, Any]:
    """The object as a file carries it: apiVersion, kind, metadata.name and spec (nothing a
    cluster added: uid, resourceVersion, managedFields), so it applies to any cluster."""
    return {
        "apiVersion": API_VERSION,
        "kind": BASELINE_KIND,
        "metadata": {"name": baseline.metadata.name},
        "spec": baseline.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


# A string YAML 1.2 readers (kubectl, Go) take for a number though PyYAML (YAML 1.1) writes it
# bare: a training loss's 8 hex digits can be digits, e, digits (411e3100), which kubectl read as
# 4.11e+3102 and the API server refused ("must be of type string").
_NUMBER_TO_GO = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string a YAML 1.2 reader would read as a number."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "'" if _NUMBER_TO_GO.fullmatch(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def to_yaml(baselines: Sequence[GpuBaseline], header: str = "") -> str:
    """One YAML file of GpuBaseline documents; `header` lines become comments on top."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump_all(
        [to_document(b) for b in baselines],
        Dumper=_Dumper,
        sort_keys=False,
        width=100,
        allow_unicode=True,
    )
    return comments + body


def excerpt(value: object) -> str:
    """The value as an error quotes it: its repr, cut to EXCERPT characters (saying how long it
    was)."""
    return cut(repr(value))


def cut(text: str) -> str:
    """`text` cut to EXCERPT characters, saying how long it was."""
    if len(text) <= EXCERPT:
        return text
    return f"{text[: EXCERPT - 1]}… ({len(text):,} characters)"


def _not_finite(raw: Any, loc: tuple[int | str, ...] = ()) -> tuple[tuple[int | str, ...], float]:
    """The first value of a document that is a float but not a finite number (YAML's .nan,
    .inf), and where; ((), 0.0) when there is none."""
    if isinstance(raw, float) and not math.isfinite(raw):
        return loc, raw
    items: Any = (
        raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    )
    for part, value in items:
        found = _not_finite(value, (*loc, part))
        if found[0]:
            return found
    return (), 0.0


def _where(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "(document)"


def _value_at(document: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        try:
            document = document[part]
        except (KeyError, IndexError, TypeError):
            return None
    return document


def _document(raw: Any, source: str, index: int) -> GpuBaseline:
    label = f"{source}: document {index + 1}"
    if not isinstance(raw, dict):
        raise BaselineFileError(
            f"{label} is a {type(raw).__name__}, not a GpuBaseline mapping (apiVersion, kind, "
            f"metadata, spec); {_FIX}"
        )
    kind, version = raw.get("kind"), raw.get("apiVersion")
    if kind != BASELINE_KIND or version != API_VERSION:
        raise BaselineFileError(
            f"{label}: apiVersion {version!r}, kind {kind!r}: a baseline file holds kind "
            f"{BASELINE_KIND}, apiVersion {API_VERSION}; {_FIX}"
        )
    name = _value_at(raw, ("metadata", "name"))
    named = f"{label} ({cut(str(name)) if name else 'no name'})"
    where, value = _not_finite(raw)
    if where:
        said = "not a number" if math.isnan(value) else "not a finite number"
        raise BaselineFileError(f"{named}: {_where(where)} = {value}: {said}; {_FIX}")
    try:
        return GpuBaseline.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{_where(e['loc'])} = {excerpt(_value_at(raw, e['loc']))}: {e['msg']}"
            if e["type"] != "missing"
            else f"{_where(e['loc'])}: missing"
            for e in error.errors()[:5]
        )
        raise BaselineFileError(f"{named}: {problems}; {_FIX}") from None


def from_yaml(text: str, source: str) -> list[GpuBaseline]:
    """Every GpuBaseline of a YAML (or JSON) text; `source` names it in errors."""
    return [baseline for _, baseline in numbered_from_yaml(text, source)]


def numbered_from_yaml(text: str, source: str) -> list[tuple[int, GpuBaseline]]:
    """Every GpuBaseline of a YAML (or JSON) text with its document's number in the file (from
    1, counting empty documents too, so a number is where a person finds it); `source` names
    the file in errors."""
    size = len(text.encode())
    if size > MAX_FILE_BYTES:
        raise BaselineFileError(
            f"{source}: {size:,} bytes, more than a baseline file holds ({MAX_FILE_BYTES:,}: "
            f"at most {MAX_DOCUMENTS} GpuBaselines of a few KiB each); split it"
        )
    raws: list[tuple[int, Any]] = []
    try:
        for index, raw in enumerate(yaml.safe_load_all(text)):
            if raw is None:
                continue
            raws.append((index, raw))
            if len(raws) > MAX_DOCUMENTS:
                raise BaselineFileError(
                    f"{source}: more than {MAX_DOCUMENTS} documents; a baseline file holds at "
                    f"most {MAX_DOCUMENTS} GpuBaselines (one per GPU stack): split it"
                )
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = str(getattr(error, "problem", None) or error)[:200]
        raise BaselineFileError(f"{source}: not YAML{where}: {problem}") from None
    if not raws:
        raise BaselineFileError(f"{source}: holds no GpuBaseline document")
    baselines = [(index + 1, _document(raw, source, index)) for index, raw in raws]
    _refuse_a_name_twice(baselines, source)
    return baselines


def _refuse_a_name_twice(baselines: Sequence[tuple[int, GpuBaseline]], source: str) -> None:
    where: dict[str, list[int]] = {}
    for number, baseline in baselines:
        where.setdefault(baseline.metadata.name, []).append(number)
    twice = sorted((numbers, name) for name, numbers in where.items() if len(numbers) > 1)
    if twice:
        numbers, name = twice[0]
        listed = ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"
        raise BaselineFileError(
            f"{source}: metadata.name {excerpt(name)} is given to documents {listed}; names "
            f"are unique: rename or remove all but one; {_FIX}"
        )


def read_file(path: Path) -> list[GpuBaseline]:
    return [baseline for _, baseline in read_numbered_file(path)]


def read_numbered_file(path: Path) -> list[tuple[int, GpuBaseline]]:
    """The file's GpuBaselines with their documents' numbers (numbered_from_yaml)."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise BaselineFileError(
                f"{path}: {size:,} bytes, more than a baseline file holds ({MAX_FILE_BYTES:,}: "
                f"at most {MAX_DOCUMENTS} GpuBaselines of a few KiB each); split it"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BaselineFileError(f"{path}: cannot read it: {error}") from None
    return numbered_from_yaml(text, str(path))


def shipped() -> list[GpuBaseline]:
    """The baselines shipped in this package, by file name."""
    folder = resources.files("gpuval_api.baseline") / SHIPPED_DIR
    found: list[GpuBaseline] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            found.extend(from_yaml(entry.read_text(encoding="utf-8"), f"shipped {entry.name}"))
    return found
