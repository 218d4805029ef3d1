"""Pure: strict JSON Schemas for kubeconform, made from an API server's OpenAPI v3 documents and
from CustomResourceDefinitions. Nothing here reads a file or calls the API.

kubeconform validates a manifest against the JSON Schema of its kind. The published schemas
(yannh/kubernetes-json-schema) are fetched from GitHub, which the machines this is developed on
cannot reach, so the schemas are made here from the API server the tests run (the same
Kubernetes version) and from the CRDs' own ``openAPIV3Schema``, the way kubeconform's
``openapi2jsonschema`` does:

- every ``$ref`` points into the schema's own ``definitions`` (each file stands alone);
- ``x-kubernetes-int-or-string`` becomes ``oneOf`` string/integer, ``nullable`` adds ``null``;
- strict: an object with ``properties`` accepts no other key, unless the API keeps unknown
  fields (``x-kubernetes-preserve-unknown-fields``) or says what the others are;
- descriptions, defaults and the ``x-kubernetes-*`` extensions are left out: validation does not
  read them and they are most of the bytes (an ``allOf`` around one ``$ref``, which only carried
  them, becomes the ``$ref``).

A schema's file is ``<group>/<kind>_<version>.json`` (the core group is ``v1``), which is the
kubeconform location template :data:`LOCATION_TEMPLATE` below a schema directory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# kubeconform fills in .Group (the API group, or "v1" for the core group), .ResourceKind
# (lowercased) and .ResourceAPIVersion (the version alone).
LOCATION_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
_REF_PREFIX = "#/components/schemas/"
_DROPPED = {"description", "default", "example", "externalDocs"}


@dataclass(frozen=True, order=True)
class Gvk:
    """A kind of object: its API group ("" for the core group), version and kind."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def schema_path(self) -> str:
        """Where kubeconform looks for its schema (:data:`LOCATION_TEMPLATE`)."""
        return f"{self.group or self.version}/{self.kind.lower()}_{self.version}.json"


def _strict(node: Any, refs: set[str]) -> Any:
    """The JSON Schema of one OpenAPI v3 schema node; collects the definitions it refers to."""
    if isinstance(node, list):
        return [_strict(item, refs) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("x-kubernetes-int-or-string"):
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-"):
            continue
        if key == "$ref":
            name = str(value).removeprefix(_REF_PREFIX)
            refs.add(name)
            out[key] = f"#/definitions/{name}"
        elif key == "properties":
            out[key] = {name: _strict(sub, refs) for name, sub in value.items()}
        elif key == "nullable":
            continue
        else:
            out[key] = _strict(value, refs)
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if set(out) == {"allOf"} and len(out["allOf"]) == 1:
        # `allOf: [{$ref}]` only carried a description or default beside the reference: the
        # reference alone validates the same and names the failing field in its errors.
        single: Any = out["allOf"][0]
        return single
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def kinds_of(components: Mapping[str, Any]) -> dict[Gvk, str]:
    """The kinds an OpenAPI v3 document's schemas define: kind -> the schema's name."""
    found: dict[Gvk, str] = {}
    for name, schema in components.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            found[Gvk(gvk.get("group", ""), gvk["version"], gvk["kind"])] = name
    return found


def kind_schema(components: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The standalone strict JSON Schema of the named schema: itself and, under
    ``definitions``, every schema it reaches."""
    refs: set[str] = set()
    root: dict[str, Any] = _strict(components[name], refs)
    definitions: dict[str, Any] = {}
    pending = sorted(refs)
    while pending:
        ref = pending.pop()
        if ref in definitions:
            continue
        found: set[str] = set()
        definitions[ref] = _strict(components[ref], found)
        pending.extend(sorted(found - set(definitions)))
    if definitions:
        root["definitions"] = dict(sorted(definitions.items()))
    return root


def crd_schemas(crd: Mapping[str, Any]) -> dict[Gvk, dict[str, Any]]:
    """The strict JSON Schema of every served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    out: dict[Gvk, dict[str, Any]] = {}
    for version in spec["versions"]:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if version.get("served", True) and schema is not None:
            refs: set[str] = set()
            out[Gvk(spec["group"], version["name"], spec["names"]["kind"])] = _strict(schema, refs)
    return out


def wanted_schemas(
    documents: Iterable[Mapping[str, Any]], wanted: Iterable[Gvk]
) -> dict[Gvk, dict[str, Any]]:
    """The schemas of the ``wanted`` kinds from OpenAPI v3 documents (one per group-version, as
    the API server serves them); a kind none of them defines is an error naming it."""
    wanted = sorted(set(wanted))
    out: dict[Gvk, dict[str, Any]] = {}
    for document in documents:
        components = document.get("components", {}).get("schemas", {})
        for gvk, name in kinds_of(components).items():
            if gvk in wanted:
                out[gvk] = kind_schema(components, name)
    missing = [f"{g.api_version} {g.kind}" for g in wanted if g not in out]
    if missing:
        raise ValueError(f"the API server's OpenAPI documents define no {missing}")
    return out
