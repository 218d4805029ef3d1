"""The chart lint's reading of kubeconform, kube-score and checkov, its comparison with the
justified findings, and the strict schemas it makes for kubeconform (no tool runs here:
tests/integration/chart/test_chart_lint.py runs them on the rendered chart)."""

from __future__ import annotations

import json

import pytest

from gpuval_devtools import chartfindings as cf
from gpuval_devtools import chartschemas as cs

KUBE_SCORE = [
    {
        "object_name": "gpuval-operator",
        "type_meta": {"kind": "Deployment", "apiVersion": "apps/v1"},
        "object_meta": {"name": "gpuval-operator", "namespace": "gpuval-system"},
        "checks": [
            {
                "check": {"id": "container-resources"},
                "grade": 1,
                "skipped": False,
                "comments": [{"path": "operator", "summary": "CPU limit is not set"}],
            },
            {"check": {"id": "pod-probes"}, "grade": 10, "skipped": False, "comments": []},
            {"check": {"id": "pod-networkpolicy"}, "grade": 5, "skipped": False, "comments": []},
            {"check": {"id": "label-values"}, "grade": 1, "skipped": True, "comments": []},
        ],
    }
]
CHECKOV = {
    "check_type": "kubernetes",
    "results": {
        "passed_checks": [{"check_id": "CKV_K8S_8"}] * 3,
        "failed_checks": [
            {
                "check_id": "CKV_K8S_43",
                "check_name": "Image should use digest",
                "resource": "Deployment.gpuval-system.gpuval-operator",
                "file_line_range": [6, 9],
            },
            {
                "check_id": "CKV2_K8S_6",
                "check_name": "Minimize the admission of pods which lack a NetworkPolicy",
                "resource": "Pod.gpuval-system.gpuval-operator.app.kubernetes.io/name-gpuval",
                "file_line_range": [6, 9],
            },
        ],
    },
}
MANIFEST = """---
kind: ServiceAccount
metadata:
  name: gpuval-operator
---
kind: Deployment
metadata:
  name: gpuval-operator
spec: {}
"""
KUBECONFORM = {
    "resources": [
        {
            "filename": "x.yaml",
            "kind": "Deployment",
            "name": "gpuval-operator",
            "version": "apps/v1",
            "status": "statusInvalid",
            "msg": "at '/spec': additional properties 'replica' not allowed",
            "validationErrors": [{"path": "/spec", "msg": "validation failed"}],
        }
    ],
    "summary": {"valid": 20, "invalid": 1, "errors": 0, "skipped": 0},
}


def test_each_tools_output_becomes_findings_named_by_tool_check_and_object() -> None:
    scored, score_counts = cf.kube_score_findings(json.dumps(KUBE_SCORE))
    checked, checkov_counts = cf.checkov_findings(json.dumps(CHECKOV), MANIFEST)
    conformed, conform_counts = cf.kubeconform_findings(json.dumps(KUBECONFORM))

    assert [f.key for f in scored] == [
        ("kube-score", "container-resources", "Deployment/gpuval-operator"),
        ("kube-score", "pod-networkpolicy", "Deployment/gpuval-operator"),
    ]
    assert scored[0].message == "CRITICAL: operator CPU limit is not set"
    assert (score_counts.critical, score_counts.failed, score_counts.ok) == (1, 1, 1)
    # Both named by the document their lines are in: the pod template is the Deployment's.
    assert [f.key for f in checked] == [
        ("checkov", "CKV_K8S_43", "Deployment/gpuval-operator"),
        ("checkov", "CKV2_K8S_6", "Deployment/gpuval-operator"),
    ]
    assert (checkov_counts.ok, checkov_counts.failed) == (3, 2)
    assert conformed[0].key == ("kubeconform", "statusInvalid", "Deployment/gpuval-operator")
    assert "additional properties 'replica'" in conformed[0].message
    assert (conform_counts.ok, conform_counts.failed) == (20, 1)


JUSTIFIED = """
- tool: checkov
  check: CKV_K8S_43
  objects: [Deployment/gpuval-operator]
  reason: the tag is the default; pin operator.image.digest in production
"""


def test_a_new_finding_and_a_stale_justification_both_fail_the_lint() -> None:
    justified = cf.parse_justifications(JUSTIFIED, "lint-findings.yaml")
    digest = cf.Finding("checkov", "CKV_K8S_43", "Deployment/gpuval-operator")
    cpu = cf.Finding("kube-score", "container-resources", "Deployment/gpuval-operator", "cpu")

    assert cf.compare([digest, digest], justified).ok
    new = cf.compare([digest, cpu], justified)
    assert not new.ok and new.new == [cpu] and new.stale == []
    assert "kube-score container-resources Deployment/gpuval-operator: cpu" in new.explain("f")
    stale = cf.compare([], justified)
    assert stale.stale == [("checkov", "CKV_K8S_43", "Deployment/gpuval-operator")]
    assert "no longer found (remove them)" in stale.explain("f")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("- {tool: tflint, check: x, objects: [A/b], reason: a reason long enough}", "tool"),
        ("- {tool: checkov, check: x, objects: [ab], reason: a reason long enough}", "Kind/name"),
        ("- {tool: checkov, check: x, objects: [A/b], reason: short}", "must say why"),
        ("{tool: checkov}", "expected a list"),
    ],
)
def test_a_malformed_justification_is_refused_naming_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        cf.parse_justifications(text, "lint-findings.yaml")


OPENAPI = {
    "components": {
        "schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "type": "object",
                "description": "dropped",
                "x-kubernetes-group-version-kind": [
                    {"group": "apps", "kind": "Deployment", "version": "v1"}
                ],
                "properties": {
                    "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.Spec"}]},
                    "metadata": {"$ref": "#/components/schemas/io.k8s.Meta"},
                },
            },
            "io.k8s.Spec": {
                "type": "object",
                "properties": {
                    "port": {"x-kubernetes-int-or-string": True},
                    "note": {"type": "string", "nullable": True},
                    "free": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"a": {"type": "string"}},
                    },
                },
            },
            "io.k8s.Meta": {"type": "object", "properties": {"name": {"type": "string"}}},
            "io.k8s.Unused": {"type": "object", "properties": {}},
        }
    }
}


def test_openapi_schemas_become_standalone_strict_json_schemas() -> None:
    deployment = cs.Gvk("apps", "v1", "Deployment")
    schema = cs.wanted_schemas([OPENAPI], [deployment])[deployment]

    assert deployment.schema_path() == "apps/deployment_v1.json"
    assert cs.Gvk("", "v1", "Pod").schema_path() == "v1/pod_v1.json"
    assert schema["additionalProperties"] is False and "description" not in schema
    assert schema["properties"]["spec"] == {"$ref": "#/definitions/io.k8s.Spec"}
    assert set(schema["definitions"]) == {"io.k8s.Spec", "io.k8s.Meta"}
    spec = schema["definitions"]["io.k8s.Spec"]["properties"]
    assert spec["port"] == {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    assert spec["note"] == {"type": ["string", "null"]}
    assert "additionalProperties" not in spec["free"]
    with pytest.raises(ValueError, match="define no \\['policy/v1 PodDisruptionBudget'\\]"):
        cs.wanted_schemas([OPENAPI], [cs.Gvk("policy", "v1", "PodDisruptionBudget")])


def test_a_crds_served_versions_become_schemas_under_its_group() -> None:
    crd = {
        "spec": {
            "group": "gpuval.dev",
            "names": {"kind": "GpuValidation"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {}}},
                },
                {"name": "v0", "served": False, "schema": {"openAPIV3Schema": {}}},
            ],
        }
    }
    schemas = cs.crd_schemas(crd)
    (gvk,) = schemas
    assert gvk.schema_path() == "gpuval.dev/gpuvalidation_v1alpha1.json"
    assert schemas[gvk] == {"type": "object", "properties": {}, "additionalProperties": False}
