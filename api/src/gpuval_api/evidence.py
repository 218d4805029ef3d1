"""The evidence bundle of a failing node: its size limits, encoding and decoding. Pure.

When a node fails, its agent keeps what a person needs to see why (the NVML state of every GPU,
the kernel log lines around each XID, the error counters before and after the load checks, the
failing checks' raw figures, the NCCL log) as one JSON document, gzip-compressed and base64-encoded
into `status.evidence` of the node's GpuNodeReport: it lives and is deleted with the report, the
agent's RBAC and admission policy already allow the write, and no other store is needed.

Bounded: `data` is at most MAX_ENCODED_BYTES characters (64 KiB, so a failing report grows by at
most that, far from etcd's 1.5 MiB object limit); a bundle that does not fit is cut section by
section, lowest priority first (a section's longest text or list is halved, then the section is
dropped), and every cut is named in `cut`. Decoding refuses more than MAX_JSON_BYTES of JSON (a
bound on what a reader decompresses) and a document whose sha256 differs from the recorded one.

The agent builds the sections (gpuval_agent.evidence); `kubectl gpuval evidence NODE` decodes them
with `decode_evidence` / `evidence_gzip`.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

EVIDENCE_SCHEMA: Literal["gpuval.dev/v1alpha1/evidence"] = "gpuval.dev/v1alpha1/evidence"
ENCODING = "gzip+base64"
# The base64 text in status.evidence.data.
MAX_ENCODED_BYTES = 64 * 1024
# What a reader decompresses at most: a bundle that fits the encoded limit compresses its JSON
# about 5-20 times, so 4 MiB leaves room and still bounds a hostile object.
MAX_JSON_BYTES = 4 << 20
# A section is halved at most this many times before it is dropped.
_HALVINGS = 12
MAX_CUT_ENTRIES = 64
_CUT_TEXT = 256


class EvidenceError(ValueError):
    """An evidence field that cannot be decoded; the message says what is wrong with it."""


class EvidenceKey(StrEnum):
    """Keys of `status.evidence` (EvidenceStatus's aliases)."""

    ENCODING = "encoding"
    DATA = "data"
    ENCODED_BYTES = "encodedBytes"
    JSON_BYTES = "jsonBytes"
    SHA256 = "sha256"
    CUT = "cut"
    SECTIONS = "sections"


class EvidenceStatus(BaseModel):
    """`status.evidence` of a GpuNodeReport: the failing node's evidence bundle."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    encoding: Literal["gzip+base64"] = Field(
        default="gzip+base64", description="How `data` is encoded: gzip, then base64."
    )
    data: str = Field(
        max_length=MAX_ENCODED_BYTES,
        description="The bundle: JSON (schema gpuval.dev/v1alpha1/evidence), gzip, base64.",
    )
    encoded_bytes: int = Field(ge=0, description="Length of `data`.")
    json_bytes: int = Field(ge=0, description="Size of the decoded JSON document, bytes.")
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the decoded JSON document (hex)."
    )
    sections: list[str] = Field(
        default_factory=list,
        max_length=MAX_CUT_ENTRIES,
        description="The sections the bundle holds (e.g. nvml, kernelLog, counters).",
    )
    cut: list[str] = Field(
        default_factory=list,
        max_length=MAX_CUT_ENTRIES,
        description="What was cut to fit the size limit, each naming the section and how much.",
    )


@dataclass(frozen=True, slots=True)
class Section:
    """One part of the bundle; sections with a lower priority are cut first."""

    name: str
    content: Any
    priority: int


def _compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _encoded_length(raw: bytes) -> int:
    return 4 * ((len(gzip.compress(raw, mtime=0)) + 2) // 3)


def _largest(holder: dict[str, Any], name: str) -> tuple[Any, Any] | None:
    """(container, key) of the longest string (64+ characters) or list (2+ entries) in section
    `name`, the section itself included, for halving; None when nothing is left to halve."""
    best: tuple[int, Any, Any] | None = None
    stack: list[tuple[Any, Any, Any]] = [(holder, name, holder[name])]
    while stack:
        parent, key, item = stack.pop()
        size = 0
        if isinstance(item, str) and len(item) >= 64:
            size = len(item)
        elif isinstance(item, list) and len(item) >= 2:
            size = len(_compact(item))
        if size and (best is None or size > best[0]):
            best = (size, parent, key)
        if isinstance(item, dict):
            stack.extend((item, k, v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((item, i, v) for i, v in enumerate(item))
    return None if best is None else (best[1], best[2])


def _halve(holder: dict[str, Any], name: str) -> str | None:
    """Halve the longest text or list of section `name` in place; say what was cut."""
    found = _largest(holder, name)
    if found is None:
        return None
    parent, key = found
    item = parent[key]
    if isinstance(item, str):
        # Logs: the latest lines are the ones nearest the failure.
        kept = item[len(item) // 2 :]
        parent[key] = f"[{len(item) - len(kept)} characters cut] " + kept
        return f"{name}: a text cut to its last {len(kept)} of {len(item)} characters"
    kept_items = item[: len(item) // 2]
    parent[key] = kept_items
    return f"{name}: a list cut to its first {len(kept_items)} of {len(item)} entries"


def _fit(document: dict[str, Any], sections: list[Section], limit: int) -> list[str]:
    """Cut `document["sections"]` until the encoded document fits `limit`; the cuts made."""
    cut: list[str] = []
    holder: dict[str, Any] = document[EvidenceKey.SECTIONS]
    for section in sorted(sections, key=lambda s: s.priority):
        for _ in range(_HALVINGS):
            document[EvidenceKey.CUT] = cut
            if _encoded_length(_compact(document)) <= limit:
                return cut
            what = _halve(holder, section.name)
            if what is None:
                break
            cut.append(what[:_CUT_TEXT])
        document[EvidenceKey.CUT] = cut
        if _encoded_length(_compact(document)) <= limit:
            return cut
        size = len(_compact(holder[section.name]))
        holder[section.name] = None
        cut.append(f"{section.name}: dropped ({size} JSON bytes after cutting)")
    return cut


def encode_evidence(
    header: Mapping[str, Any], sections: list[Section], limit: int = MAX_ENCODED_BYTES
) -> EvidenceStatus:
    """The bundle of `header` (node, verdict, ...) and `sections`, cut to fit `limit` encoded
    characters, as the report's `status.evidence`."""
    if len({s.name for s in sections}) != len(sections):
        raise ValueError("evidence sections must have distinct names")
    document: dict[str, Any] = {
        "schemaVersion": EVIDENCE_SCHEMA,
        **header,
        EvidenceKey.SECTIONS.value: {s.name: json.loads(_compact(s.content)) for s in sections},
        EvidenceKey.CUT.value: [],
    }
    cut = _fit(document, sections, limit)
    raw = _compact(document)
    compressed = gzip.compress(raw, mtime=0)
    data = base64.b64encode(compressed).decode("ascii")
    if len(data) > limit:
        raise ValueError(
            f"the evidence header alone takes {len(data)} encoded bytes, over the {limit} limit"
        )
    return EvidenceStatus(
        data=data,
        encoded_bytes=len(data),
        json_bytes=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
        sections=[s.name for s in sections][:MAX_CUT_ENTRIES],
        cut=cut[:MAX_CUT_ENTRIES],
    )


def evidence_status(evidence: EvidenceStatus) -> dict[str, Any]:
    """`status.evidence` as the JSON the report carries."""
    return evidence.model_dump(mode="json", by_alias=True)


def _json_bytes(evidence: Mapping[str, Any]) -> bytes:
    encoding = evidence.get(EvidenceKey.ENCODING)
    if encoding != ENCODING:
        raise EvidenceError(
            f"status.evidence.encoding is {encoding!r}; this reader knows {ENCODING}"
        )
    data = evidence.get(EvidenceKey.DATA)
    if not isinstance(data, str) or not data:
        raise EvidenceError("status.evidence.data is missing or not a string")
    if len(data) > MAX_ENCODED_BYTES:
        raise EvidenceError(
            f"status.evidence.data is {len(data)} characters, over the {MAX_ENCODED_BYTES} limit"
        )
    try:
        compressed = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise EvidenceError(f"status.evidence.data is not base64: {error}") from None
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        raw = inflater.decompress(compressed, MAX_JSON_BYTES + 1)
    except zlib.error as error:
        raise EvidenceError(f"status.evidence.data is not gzip: {error}") from None
    if len(raw) > MAX_JSON_BYTES or inflater.unconsumed_tail:
        raise EvidenceError(f"status.evidence decodes to more than {MAX_JSON_BYTES} bytes")
    expected = evidence.get(EvidenceKey.SHA256)
    actual = hashlib.sha256(raw).hexdigest()
    if expected != actual:
        raise EvidenceError(
            f"status.evidence.sha256 is {expected!r} but the data's is {actual}: the bundle is "
            "damaged"
        )
    return raw


def decode_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The bundle document of a report's `status.evidence`, checked against its sha256."""
    raw = _json_bytes(evidence)
    try:
        document = json.loads(raw)
    except ValueError as error:
        raise EvidenceError(f"status.evidence does not hold JSON: {error}") from None
    if not isinstance(document, dict) or document.get("schemaVersion") != EVIDENCE_SCHEMA:
        raise EvidenceError(f"status.evidence does not hold a {EVIDENCE_SCHEMA} document")
    return document


def evidence_gzip(evidence: Mapping[str, Any]) -> bytes:
    """The bundle as a .json.gz file's bytes (checked as decode_evidence checks it)."""
    return gzip.compress(_json_bytes(evidence), mtime=0)
