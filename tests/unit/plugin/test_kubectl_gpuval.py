"""kubectl gpuval (the kubectl-gpuval package): its printing, its errors, what it refuses, what it
installs, and its krew manifest (the API round trip:
tests/integration/plugin/test_kubectl_plugin.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import json
import re
import subprocess
import sys
import tarfile
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_api.baseline import files, fleet
from gpuval_api.baseline.learn import Learned, learn
from gpuval_api.baselinemodel import BaselineRunStatus, SystemicFigure
from gpuval_api.crd import (
    GpuBaseline,
    GpuNodeReport,
    GpuValidation,
    Remediation,
    RemediationStatus,
)
from gpuval_api.fabric.view import FabricFinding
from gpuval_api.release import Release
from gpuval_api.views import FailureView, FleetView, UnitView, fleet_of_units, fleet_view
from gpuval_devtools import krew
from gpuval_devtools.imagespecs import OPERATOR as OPERATOR_IMAGE
from gpuval_kubectl import baselines, cli, cluster, render
from gpuval_report.page import render_page
from tests.support.baselines import measured, node_figures, slowed
from tests.support.fleets import sample_fleet, validation

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_status_names_failing_nodes_with_hints_the_untested_node_and_the_outlier() -> None:
    view, roles = sample_fleet(healthy=3)
    out = render.render_status(view, validation("fleet", "fleet-1-abcd", 6, []))

    assert out.splitlines()[0] == (
        "GpuValidation fleet: Failed, run fleet-1-abcd, 6 nodes (Passed 3, Failed 2, NotRun 1)"
    )
    assert f"  {roles['wrong']}  burn GPU 3  BurnMismatch: " in out
    assert "Not judged: 1" in out and roles["untested"] in out
    assert "Outliers: 1" in out and "60% of median 776.0" in out


def test_status_caps_each_section_and_says_how_many_more() -> None:
    failures = tuple(FailureView(f"n{i}", "burn", "BurnNaN", "NaN", "") for i in range(25))
    units = tuple(UnitView(f"n{i}", "Failed", failures=(failures[i],)) for i in range(25))
    view = FleetView("GpuValidation big", "fleet", "node", "Failed", units, failures=failures)
    out = render.render_status(view, GpuValidation.model_validate({"metadata": {"name": "big"}}))

    assert out.count("BurnNaN") == render.MAX_LINES
    assert "... and 5 more" in out


def test_status_shows_the_fabric_summary_and_the_nodes_the_fabric_named() -> None:
    named = FabricFinding("g1", "Failed", "FabricSlowNode", "slow in every pair", 180.0)
    units = (
        UnitView("n1", "Passed", fabric=FabricFinding("g1", "Passed", None, "", 361.0)),
        UnitView("n2", "Failed", reason="FabricSlowNode", fabric=named),
        UnitView("n3", "Passed"),
    )
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Failed", units, fabric_summary="1/2 passed, 1 failed"
    )
    out = render.render_status(view, GpuValidation.model_validate({"metadata": {"name": "f"}}))
    assert "Fabric: 1/2 passed, 1 failed" in out
    assert "  n2  group g1  FabricSlowNode: slow in every pair" in out
    assert "n1  group" not in out


def test_status_names_both_nodes_of_a_slow_pair_and_the_nodes_the_fabric_did_not_run() -> None:
    def pair(other: str) -> FabricFinding:
        text = f"the pair with {other} is slow (120.0 GB/s, floor 300.0): the link or either node"
        return FabricFinding("g2", "NotRun", "FabricSlowPair", text)

    gang = FabricFinding("g3", "NotRun", "FabricGangNotFormed", "the group did not form")
    units = (
        UnitView("n1", "Passed", fabric=FabricFinding("g1", "Passed", None, "", 361.0)),
        UnitView("n3", "Passed", fabric=pair("n4")),
        UnitView("n4", "Passed", fabric=pair("n3")),
        *(UnitView(f"m{i:02d}", "Passed", fabric=gang) for i in range(render.MAX_LINES)),
    )
    view = FleetView(
        "GpuValidation f", "fleet", "node", "Passed", units, fabric_summary="1/23 passed"
    )
    out = render.render_status(view, GpuValidation.model_validate({"metadata": {"name": "f"}}))
    assert "  Not tested by the fabric (no evidence against them): 22" in out
    assert "  n3  group g2  FabricSlowPair: the pair with n4 is slow" in out
    assert "  n4  group g2  FabricSlowPair: the pair with n3 is slow" in out
    assert out.count("FabricGangNotFormed") == render.MAX_LINES - 2
    assert "  ... and 2 more (kubectl gpuval report NAME --html FILE lists all)" in out


def test_status_shows_the_slow_paths_between_domains_the_fabric_found() -> None:
    path = {
        "group": "x1",
        "domains": ["rack-1", "rack-2"],
        "nodes": ["a", "b"],
        "reason": "FabricSlowPath",
        "message": "the network path between domains rack-1 and rack-2 is slow",
    }
    fabric = {"summary": "8/8 passed", "slowPaths": [path], "slowPathsOmitted": 2}
    document = {"metadata": {"name": "f"}, "status": {"fabric": fabric}}
    validation = GpuValidation.model_validate(document)
    out = render.render_status(fleet_of_units(validation, ()), validation)
    assert "  path rack-1 - rack-2 (through a, b)  FabricSlowPath: the network path between" in out
    assert "  ... and 2 more slow paths" in out


def test_list_prints_one_line_per_validation() -> None:
    out = render.render_list([validation("a", "a-1", 4, ["x"]), validation("b", "b-1", 2, [])])
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PHASE",
        "NODES",
        "PASSED",
        "FAILED",
        "UNIFORM",
        "RUN",
        "STARTED",
    ]
    assert lines[1].split()[:5] == ["a", "Failed", "4", "3", "1"]
    assert render.render_list([]) == "No GpuValidations found."


def test_a_missing_kubeconfig_is_named_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert cli.main(["--kubeconfig", str(missing), "status"]) == 1
    assert f"no kubeconfig at {missing}: pass --kubeconfig FILE" in capsys.readouterr().err


def test_a_kubeconfig_the_library_cannot_read_is_named_with_the_librarys_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: gone\n")
    assert cli.main(["--kubeconfig", str(broken), "status"]) == 1
    err = capsys.readouterr().err
    assert f"kubeconfig {broken}: context 'gone'" in err and "Expected object with name gone" in err


def _kubeconfig(path: Path, user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "me", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "me"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_the_kubeconfigs_impersonation_is_sent_with_every_read(tmp_path: Path) -> None:
    """The kubernetes package ignores a user's `as` fields; the plugin sends them as kubectl
    does, a header per group (a local HTTP server stands in for the API server and records what
    arrives; the real API server's answer is tested in tests/integration)."""
    seen: list[list[tuple[str, str]]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(list(self.headers.items()))
            body = json.dumps({"apiVersion": "v1", "kind": "List", "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    user = {"token": "t", "as": "alice", "as-groups": ["ops", "gpu"], "as-uid": "7"}
    config = _kubeconfig(tmp_path / "config", user)
    text = yaml.safe_load(config.read_text())
    text["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{server.server_port}"
    config.write_text(yaml.safe_dump(text))
    try:
        with cluster.connect(str(config)) as login:
            assert cluster.Cluster(login).validations() == []
    finally:
        server.shutdown()
    (headers,) = seen
    assert ("authorization", "Bearer t") in headers
    assert [v for k, v in headers if k.lower().startswith("impersonate-")] == [
        "alice",
        "7",
        "ops",
        "gpu",
    ]


def test_a_kubeconfig_without_impersonation_gives_a_client_for_its_server(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path / "config", {"token": "t"})
    with cluster.connect(str(config)) as login:
        assert login.api.configuration.host == "https://127.0.0.1:1"


def test_the_plugin_brings_neither_kopf_nor_the_operator() -> None:
    """Installing kubectl gpuval installs gpuval-api, gpuval-credentials (the operator's identity
    loading) and the kubernetes client, the report as an extra; importing it loads neither kopf
    nor gpuval_operator."""
    project = tomllib.loads((REPO_ROOT / "kubectl-gpuval" / "pyproject.toml").read_text())
    deps = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in project["project"]["dependencies"]}
    assert deps == {"gpuval-api", "gpuval-credentials", "kubernetes"}
    assert project["project"]["optional-dependencies"] == {"report": ["gpuval-report"]}
    assert project["project"]["scripts"] == {"kubectl-gpuval": "gpuval_kubectl.cli:main"}
    operator = tomllib.loads((REPO_ROOT / "operator" / "pyproject.toml").read_text())
    assert "kubectl-gpuval" not in operator["project"]["scripts"]
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpuval_kubectl.cli, gpuval_kubectl.cluster; print(sorted(m for m in "
            "sys.modules if m.split('.')[0] in ('kopf', 'gpuval_operator')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"


def test_the_operator_image_does_not_carry_the_plugin() -> None:
    assert "kubectl-gpuval" not in OPERATOR_IMAGE.members
    for dockerfile in ("operator", "agent"):
        text = (REPO_ROOT / "images" / dockerfile / "Dockerfile").read_text()
        # uv reads every workspace member's manifest to use the lock; the plugin's code stays out.
        assert "COPY kubectl-gpuval/pyproject.toml kubectl-gpuval/pyproject.toml" in text
        assert "kubectl-gpuval/src" not in text
    lock = tomllib.loads((REPO_ROOT / "uv.lock").read_text())
    (operator,) = [p for p in lock["package"] if p["name"] == "gpuval-operator"]
    assert "kubectl-gpuval" not in {d["name"] for d in operator.get("dependencies", [])}


def test_the_krew_manifest_has_what_krew_requires_and_names_the_archive_make_krew_builds() -> None:
    manifest = yaml.safe_load(krew.MANIFEST.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "gpuval"  # `kubectl krew install gpuval`
    spec = manifest["spec"]
    version = tomllib.loads((REPO_ROOT / "kubectl-gpuval" / "pyproject.toml").read_text())[
        "project"
    ]["version"]
    assert spec["version"] == f"v{version}" == f"v{krew.launcher_version()}"
    assert spec["homepage"].startswith("https://") and spec["shortDescription"]
    assert spec["platforms"], "at least one platform"
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"] or platform["selector"]["matchLabels"]
        assert platform["uri"].startswith("https://")
        assert platform["uri"].endswith(krew.archive_name(version))
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-gpuval"
        assert {"from": "kubectl-gpuval", "to": "."} in platform["files"]
        assert {"from": "LICENSE", "to": "."} in platform["files"]
    # The checksum is the archive's that `make krew` builds now: the same bytes every time.
    built = krew.archive_bytes()
    assert built == krew.archive_bytes()
    assert hashlib.sha256(built).hexdigest() == spec["platforms"][0]["sha256"], "run make krew"
    with tarfile.open(fileobj=io.BytesIO(built)) as archive:
        modes = {m.name: m.mode for m in archive.getmembers()}
        license_text = archive.extractfile("LICENSE")
        assert license_text is not None and b"Apache License" in license_text.read()
    # The launcher runs; krew-index asks every plugin to ship its license.
    assert modes == {"kubectl-gpuval": 0o755, "LICENSE": 0o644}


def test_the_krew_launcher_is_valid_posix_sh_and_pins_its_version() -> None:
    subprocess.run(["sh", "-n", str(krew.LAUNCHER)], check=True)
    text = krew.LAUNCHER.read_text()
    assert 'SOURCE="${KUBECTL_GPUVAL_SOURCE:-kubectl-gpuval[report]==$VERSION}"' in text


def test_a_report_that_cannot_be_written_names_the_path(tmp_path: Path) -> None:
    view, _ = sample_fleet(healthy=1)
    (tmp_path / "file").write_text("")
    with pytest.raises(cluster.PluginError, match=r"--html .*cannot write the report"):
        cli.write_html(view, tmp_path / "file" / "report.html")


def test_status_names_the_fabric_groups_forming_who_is_awaited_and_the_time_left() -> None:
    validation = GpuValidation.model_validate(
        {
            "metadata": {"name": "f"},
            "status": {
                "fabric": {
                    "summary": "0/1 groups done",
                    "waiting": [
                        {
                            "group": "g1",
                            "nodes": 2,
                            "joined": [{"rank": 0, "node": "n1", "state": "started"}],
                            "waitingFor": [
                                {
                                    "rank": 1,
                                    "node": "n2",
                                    "state": "pending: 1 Insufficient nvidia.com/gpu",
                                }
                            ],
                            "gangDeadline": "2026-01-01T00:10:00Z",
                        }
                    ],
                }
            },
        }
    )
    view = FleetView("GpuValidation f", "fleet", "node", "Running", (), fabric_summary="0/1")
    out = render.render_status(view, validation, now=1767225600.0)
    assert "Fabric groups forming: 1" in out
    assert (
        "  group g1: waits for rank 1 (n2: pending: 1 Insufficient nvidia.com/gpu); joined: "
        "rank 0 (n1); 600 s left of fabric.timeouts.gangSeconds"
    ) in out


HELD = (
    "NodeActionsHeld",
    "True",
    "MaxNodesReached",
    "36 of 40 failed nodes keep their label but not their taint and cordon (36 for "
    "MaxNodesReached)",
)
SYSTEMIC = ("SystemicFailure", "True", "SameReasonOnManyNodes", "40 of 40 tested nodes failed")


def test_status_says_in_one_line_each_that_the_failures_look_systemic_and_actions_are_held() -> (
    None
):
    view, _ = sample_fleet(healthy=3)
    view = dataclasses.replace(view, conditions=(*view.conditions, HELD, SYSTEMIC))
    lines = render.render_status(view, validation("fleet", "fleet-1-abcd", 6, [])).splitlines()
    assert lines[1] == f"Node actions held: {HELD[3]}"
    assert lines[2] == (f"Likely systemic (the spec or the stack, not the nodes): {SYSTEMIC[3]}")
    calm = ("NodeActionsHeld", "False", "NotHeld", "no node action held")
    quiet = render.render_status(
        dataclasses.replace(view, conditions=(calm,)), validation("fleet", "r", 6, [])
    )
    assert "Node actions held:" not in quiet and "Likely systemic" not in quiet


def test_status_says_in_one_line_that_repair_requests_are_refused_and_a_cancelled_repair() -> None:
    refused = (
        "RepairRequestsRefused",
        "True",
        "KindNotServed",
        "the API server does not make the repair objects: RebootNode.janitor.dgxc.nvidia.com/"
        "v1alpha1 (not served): ... 3 nodes wait for their repair request (a, b, c)",
    )
    view, _ = sample_fleet(healthy=3)
    view = dataclasses.replace(view, conditions=(*view.conditions, refused))
    lines = render.render_status(view, validation("fleet", "fleet-1-abcd", 6, [])).splitlines()
    assert lines[1] == f"Repair requests refused (nothing asked yet): {refused[3]}"
    calm = (refused[0], "False", "RepairRequestsAccepted", "none refused")
    quiet = render.render_status(
        dataclasses.replace(view, conditions=(calm,)), validation("fleet", "r", 6, [])
    )
    assert "Repair requests refused" not in quiet
    status = RemediationStatus.model_validate(
        {
            "nodes": [
                {
                    "node": "gpu-5",
                    "state": "Cancelled",
                    "reason": "KernelXidReboot",
                    "action": "Reboot",
                    "repairs": 0,
                    "failedAt": "2026-12-04T18:10:02Z",
                    "requestedAt": "2026-12-04T18:10:40Z",
                    "object": "gpuval-gpu-5-1c2e9a",
                    "endedAt": "2026-12-04T18:11:02Z",
                    "endedBy": "Gone",
                }
            ],
        }
    )
    assert render.repair_lines(status)[1].endswith(
        "-> cancelled 2026-12-04T18:11:02Z (its object deleted before it ended) -> not counted; "
        "asked again only if it fails anew"
    )


def test_release_says_what_was_held_and_what_the_operator_does_next() -> None:
    held = validation("fleet", "3-abcd", 40, ["a"])
    assert held.status is not None
    held.status.conditions.append(
        held.status.conditions[0].model_copy(
            update={"type": "NodeActionsHeld", "status": "True", "message": HELD[3]}
        )
    )
    out = render.render_release(held, Release("3-abcd", 1700000000))
    assert out.startswith(
        f"released GpuValidation fleet (run 3-abcd, at 1700000000): held until now: {HELD[3]}"
    )
    assert "up to nodeActions.maxNodes again" in out and "kubectl gpuval status fleet" in out
    calm = render.render_release(validation("calm", "1-a", 2, []), Release("1-a", 5))
    assert "no node action was held" in calm


def _learned_with_one_left_out() -> tuple[GpuBaseline, Learned]:
    nodes = [node_figures(measured(f"n{i}")) for i in range(5)]
    nodes.append(node_figures(measured("slow", slowed(0.85))))
    key = nodes[0].key
    assert key is not None
    outcome = learn(nodes, key, fraction=0.1, min_nodes=3)
    made = fleet.learned_object(outcome)
    assert made is not None
    return made, outcome


def test_baseline_show_lists_them_and_one_in_detail_names_the_nodes_learning_left_out() -> None:
    made, _ = _learned_with_one_left_out()
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")

    listing = baselines.render_list([made, shipped])
    detail = baselines.render_one(made)

    assert listing.splitlines()[0].split()[:3] == ["NAME", "GPU", "GPUS"]
    rows = {line.split()[0]: line.split()[1:] for line in listing.splitlines()[1:]}
    assert rows[made.metadata.name][:6] == ["NVIDIA", "H200", "4", "700", "W", "gen5x16"]
    assert rows[shipped.metadata.name][6] == "Shipped"
    assert detail.startswith(f"GpuBaseline {made.metadata.name}: NVIDIA H200 x4, 700 W")
    assert "burn.bf16" in detail and "nccl.1MiB" in detail and "not judged" in detail
    assert "Left out by learning: 1" in detail and "slow" in detail.split("Left out")[1]
    assert "No GpuBaselines found" in baselines.render_list([])


def test_baseline_diff_sets_two_baselines_side_by_side_and_marks_what_moved() -> None:
    made, _ = _learned_with_one_left_out()
    slower = [f.model_copy(update={"centre": f.centre * 0.9}) for f in made.spec.figures[:1]]
    other = made.spec.model_copy(update={"figures": [*slower, *made.spec.figures[1:]]})

    same = baselines.render_diff(("a", made.spec), ("b", made.spec))
    moved = baselines.render_diff(("a", made.spec), ("b", other))
    shipped = next(b for b in files.shipped() if b.spec.key.gpu_product == "NVIDIA H200")
    keys = baselines.render_diff(("a", made.spec), ("shipped", shipped.spec))

    rows = same.splitlines()[3:]
    assert rows and all(" 1.000" in row and "moved" not in row for row in rows)
    first = moved.splitlines()[3]
    assert first.startswith("burn.bf16") and "0.900" in first and first.endswith("moved")
    assert "The keys differ" in keys and "per-GPU figures still compare" in keys


def test_baseline_learn_says_what_it_made_and_whom_it_left_out() -> None:
    made, outcome = _learned_with_one_left_out()
    text = baselines.render_learned([(outcome, made.metadata.name, "created")])

    assert text.splitlines()[0].endswith(
        f"created GpuBaseline {made.metadata.name} from 5 of 6 passing nodes (2 rounds)"
    )
    assert "left out slow: " in text
    assert "nothing to learn from" in baselines.render_learned([])


def test_baseline_learn_and_status_say_a_stack_is_bimodal() -> None:
    nodes = [node_figures(measured(f"slow-{i}", slowed(0.85))) for i in range(6)]
    nodes += [node_figures(measured(f"fast-{i}")) for i in range(4)]
    key = nodes[0].key
    assert key is not None
    # kubectl gpuval baseline learn is a person's choice: the better mode (cli.learn).
    outcome = learn(nodes, key, fraction=0.1, min_nodes=3, choose_mode=True)

    text = baselines.render_learned([(outcome, "h200", "created")])
    status = render.baseline_lines(BaselineRunStatus(bimodal=[outcome.bimodal]))

    first, second = text.splitlines()[:2]
    assert first.endswith("created GpuBaseline h200 from 4 of 10 passing nodes (1 rounds)")
    assert second.startswith(f"  {key.describe()} is bimodal: 4 nodes (fast-0, ")
    assert f"  bimodal: {outcome.bimodal}" in status


def test_a_learn_flag_out_of_bounds_is_refused_naming_it() -> None:
    args = cli.build_parser().parse_args(["baseline", "learn", "fleet", "--fraction", "0.9"])
    fleet_validation = GpuValidation.model_validate({"metadata": {"name": "fleet"}})

    with pytest.raises(cluster.PluginError, match=r"--fraction: 0\.9: Input should be less"):
        cli._settings(fleet_validation, args)


def test_status_says_the_run_against_its_baselines() -> None:
    status = BaselineRunStatus(
        judged=6,
        below=6,
        systemic=[
            SystemicFigure(
                figure="burn.bf16", below=6, judged=6, median_ratio=0.85, message="6 of 6 below"
            )
        ],
        learned=["nvidia-h200-x8-700w-gen5x16"],
    )

    lines = render.baseline_lines(status)

    assert lines[0] == "Baseline: 6 nodes judged, 6 below, 0 drifting from their history"
    assert "  systemic burn.bf16: 6 of 6 below" in lines
    assert render.baseline_lines(None) == []


def test_status_shows_each_nodes_way_through_the_repair_loop_with_times() -> None:
    status = RemediationStatus.model_validate(
        {
            "inRepair": 0,
            "needsRepair": 1,
            "nodes": [
                {
                    "node": "gpu-7",
                    "state": "NeedsRepair",
                    "reason": "KernelXidReboot",
                    "action": "Reboot",
                    "repairs": 2,
                    "failedAt": "2026-12-04T18:10:02Z",
                    "requestedAt": "2026-12-04T18:10:40Z",
                    "object": "gpuval-gpu-7-1c2e9a",
                    "endedAt": "2026-12-04T18:11:02Z",
                    "endedBy": "Done",
                    "revalidatedAt": "2026-12-04T18:11:20Z",
                },
                {
                    "node": "gpu-3",
                    "state": "Repaired",
                    "reason": "KernelXidReboot",
                    "action": "Reboot",
                    "repairs": 1,
                    "failedAt": "2026-12-04T18:01:10Z",
                    "requestedAt": "2026-12-04T18:01:12Z",
                    "endedAt": "2026-12-04T18:02:05Z",
                    "endedBy": "Rebooted",
                    "revalidatedAt": "2026-12-04T18:02:31Z",
                    "backInServiceAt": "2026-12-04T18:02:31Z",
                },
            ],
        }
    )
    lines = render.repair_lines(status)
    assert lines[0] == "Repairs: 0 in repair, 1 need repair by a person"
    assert lines[1] == (
        "  gpu-7  NeedsRepair  KernelXidReboot: failed 2026-12-04T18:10:02Z -> Reboot asked "
        "2026-12-04T18:10:40Z (gpuval-gpu-7-1c2e9a), repair 2 -> ended 2026-12-04T18:11:02Z (Done) "
        "-> re-validated 2026-12-04T18:11:20Z: failed -> not back: needs repair by a person after "
        "2 repairs within the window"
    )
    assert lines[2].endswith(
        "re-validated 2026-12-04T18:02:31Z: passed -> back in service 2026-12-04T18:02:31Z (81s "
        "after it failed)"
    )
    assert render.repair_lines(None) == []


def test_the_kubelets_unhealthy_device_shows_in_status_and_on_the_page_while_the_node_runs() -> (
    None
):
    report = GpuNodeReport.model_validate(
        {
            "metadata": {"name": "fleet-1-abcd-n1"},
            "spec": {"validation": "fleet", "run": "fleet-1-abcd", "node": "n1"},
            "status": {
                "phase": "Running",
                "deviceHealth": [
                    {
                        "claim": "claim:devices",
                        "resourceId": "gpu.nvidia.com/n1/gpu-0",
                        "health": "Healthy",
                    },
                    {
                        "claim": "claim:devices",
                        "resourceId": "gpu.nvidia.com/n1/gpu-3",
                        "health": "Unhealthy",
                        "message": "XID 79",
                    },
                ],
            },
        }
    )
    running = validation("fleet", "fleet-1-abcd", 1, [])
    view = fleet_view(running, [report])

    out = render.render_status(view, running)
    page = render_page(view)

    assert "Unhealthy devices (the kubelet's word): 1" in out
    assert "  n1  gpu.nvidia.com/n1/gpu-3  Unhealthy: XID 79" in out
    assert "gpu-0" not in out  # a Healthy device is no news
    section = page.split('<div id="device-health">', 1)[1].split("</div>", 1)[0]
    assert "gpu.nvidia.com/n1/gpu-3" in section and "XID 79" in section
    assert "gpu-0" not in section


def test_release_of_a_systemic_hold_says_it_releases_taints_not_repairs_unless_asked() -> None:
    """Issue 43 part 3: `release` of a systemic hold handed most of the run to the repair engine;
    its text said nothing of repairs."""
    held = validation("fleet", "3-abcd", 40, ["a"])
    held.spec = held.spec.model_copy(update={"remediation": Remediation()})
    assert held.status is not None
    held.status.conditions.append(
        held.status.conditions[0].model_copy(
            update={"type": "SystemicFailure", "status": "True", "message": SYSTEMIC[3]}
        )
    )
    out = render.render_release(held, Release("3-abcd", 1700000000))
    assert "Released: the held taints and cordons." in out
    assert (
        f"Not released: repairs. The run says the cause is systemic ({SYSTEMIC[3]}): no repair is "
        "asked for those nodes; `kubectl gpuval release --repair fleet` asks for them."
    ) in out
    asked = render.render_release(held, Release("3-abcd", 1700000000, repair=True))
    assert "Not released" not in asked
    assert f"Repairs: asked (--repair) for the nodes of the systemic failure ({SYSTEMIC[3]})" in (
        asked
    )
    args = cli.build_parser().parse_args(["release", "--repair", "fleet"])
    assert (args.name, args.repair) == ("fleet", True)
    assert cli.build_parser().parse_args(["release", "fleet"]).repair is False


def test_the_repair_path_of_a_flapping_or_withdrawn_node_reads_in_the_order_it_happened() -> None:
    """Issue 43 part 5: a node repaired, back, then failing again to NeedsRepair printed its new
    failure before the request and "re-validated: failed" for the re-validation that passed; "1
    repairs"; a withdrawn request read as a repair."""
    status = RemediationStatus.model_validate(
        {
            "inRepair": 0,
            "needsRepair": 1,
            "nodes": [
                {
                    "node": "gpu-7",
                    "state": "NeedsRepair",
                    "reason": "KernelXidReboot",
                    "action": "Reboot",
                    "repairs": 1,
                    "failedAt": "2026-12-04T18:20:00Z",
                    "requestedAt": "2026-12-04T18:10:40Z",
                    "endedAt": "2026-12-04T18:11:02Z",
                    "endedBy": "Done",
                    "revalidatedAt": "2026-12-04T18:11:20Z",
                    "backInServiceAt": "2026-12-04T18:11:20Z",
                },
                {
                    "node": "gpu-3",
                    "state": "Withdrawn",
                    "reason": "KernelXidReboot",
                    "action": "Reboot",
                    "repairs": 1,
                    "failedAt": "2026-12-04T18:01:10Z",
                    "requestedAt": "2026-12-04T18:01:12Z",
                    "object": "gpuval-gpu-3-1c2e9a",
                    "backInServiceAt": "2026-12-04T18:01:40Z",
                },
            ],
        }
    )
    lines = render.repair_lines(status)
    assert lines[1] == (
        "  gpu-7  NeedsRepair  KernelXidReboot: Reboot asked 2026-12-04T18:10:40Z, repair 1 -> "
        "ended 2026-12-04T18:11:02Z (Done) -> re-validated 2026-12-04T18:11:20Z: passed -> back "
        "in service 2026-12-04T18:11:20Z -> failed again 2026-12-04T18:20:00Z -> not back: needs "
        "repair by a person after 1 repair within the window"
    )
    assert lines[2] == (
        "  gpu-3  Withdrawn  KernelXidReboot: failed 2026-12-04T18:01:10Z -> Reboot asked "
        "2026-12-04T18:01:12Z (gpuval-gpu-3-1c2e9a), repair 1 -> back in service "
        "2026-12-04T18:01:40Z (passed before its repair ended: request withdrawn) (30s after it "
        "failed)"
    )


def test_a_node_whose_agent_pod_waits_for_the_api_server_reads_waiting_with_its_words() -> None:
    """Issue 43 part 6: a node the quota keeps waiting is neither Pending nor NotRun in `kubectl
    gpuval status` and on the page: Waiting, with the API server's words."""
    words = "exceeded quota: gpuval-agents, requested: pods=1, used: pods=2, limited: pods=2"
    report = GpuNodeReport.model_validate(
        {
            "metadata": {"name": "fleet-1-abcd-n2"},
            "spec": {"validation": "fleet", "run": "fleet-1-abcd", "node": "n2"},
            "status": {"phase": "Waiting", "reason": "AgentPodRefused", "message": words},
        }
    )
    running = validation("fleet", "fleet-1-abcd", 1, [])
    view = fleet_view(running, [report])

    out = render.render_status(view, running)

    assert "1 nodes (Waiting 1)" in out
    assert f"  n2  Waiting  AgentPodRefused  {words}" in out
