"""The options of benchmarks/operator_scale.py: its command line (`parse_options`, every bad value
refused with its flag and value), the GpuValidation each run applies (`validation`), and what the
simulated control plane is started with (kwok-controller's parallelism, the Go runtime's GOGC and
GOMEMLIMIT)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scale_baseline
import scale_fabric
import scale_repairs

# kwokctl's --heartbeat-factor by default (--heartbeat-factor; operator_scale.main says why).
HEARTBEAT_FACTOR = 15
# spec.agent.devices: the device plugin's nvidia.com/gpu, or DRA ResourceClaims.
DEVICE_PLUGIN, DRA = "devicePlugin", "dra"
# kwok-controller's own: pods it marks Running at once, and node leases it renews at once, for all
# its nodes (--kwok-pod-parallelism, --kwok-lease-parallelism; operator_scale.main says why).
KWOK_PARALLELISM = 4


@dataclass(frozen=True)
class Options:
    nodes: int
    max_concurrent: str
    join: int
    batch_seconds: int
    fabric: bool
    racks: int
    phase_seconds: float
    baseline: bool
    runs: int
    heartbeat_factor: int = HEARTBEAT_FACTOR
    kwok_pods: int = KWOK_PARALLELISM
    kwok_leases: int = KWOK_PARALLELISM
    apiserver_profile: Path | None = None  # --apiserver-profile: the profiles go here
    fabric_timeline: Path | None = None  # --fabric-timeline: each fabric pod's stage times
    go_gc: str | None = None  # --control-plane-gogc: GOGC of the control plane's processes
    go_memory_limit: str | None = None  # --control-plane-memory-limit: their GOMEMLIMIT
    devices: str = DEVICE_PLUGIN  # --devices: spec.agent.devices (dra: GPUs in ResourceSlices)
    # --remediation: the share of nodes failing with a reboot-class XID until repaired.
    remediation: float = 0.0

    def first_wave(self) -> int:
        """Agent pods the first wave has (spec.maxConcurrent of the nodes)."""
        if self.max_concurrent.endswith("%"):
            return -(-self.nodes * int(self.max_concurrent[:-1]) // 100)
        return min(self.nodes, int(self.max_concurrent))


VALIDATION = "/apis/gpuval.dev/v1alpha1/gpuvalidations/scale"


def validation(opts: Options, run: int = 1) -> dict[str, Any]:
    """The GpuValidation for run number `run`: spec.history is 3 (the default) for the first and
    3 + `run` for a later one, so each later run is a spec change."""
    spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"gpuval.dev/scale": "yes"}},
        "maxConcurrent": opts.max_concurrent,
        "nodeTimeoutSeconds": 3600,
        "nodeActions": {"label": True},
        "gating": {"join": True, "reboot": True, "batchSeconds": opts.batch_seconds},
        "history": 3 if run == 1 else 3 + run,
    }
    if opts.fabric:
        spec["fabric"] = scale_fabric.FABRIC_SPEC
    if opts.baseline:
        spec["baseline"] = scale_baseline.BASELINE_SPEC
    if opts.devices == DRA:
        spec["agent"] = {"devices": DRA}
    if opts.remediation:
        spec["nodeActions"] = scale_repairs.NODE_ACTIONS
        spec["remediation"] = scale_repairs.REMEDIATION_SPEC
    return {
        "apiVersion": "gpuval.dev/v1alpha1",
        "kind": "GpuValidation",
        "metadata": {"name": "scale"},
        "spec": spec,
    }


def parse_options(
    argv: Sequence[str] | None = None, description: str = ""
) -> tuple[Options, Path | None]:
    """The options from `argv` (the command line when None); a bad value exits (status 2)
    with its flag and value named."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--max-concurrent", default="25%")
    parser.add_argument("--join", type=int, default=5, help="nodes to add after the last run")
    parser.add_argument("--batch-seconds", type=int, default=10, help="spec.gating.batchSeconds")
    parser.add_argument("--fabric", action="store_true", help="spec.fabric on, faults injected")
    parser.add_argument("--racks", type=int, default=40, help="topology domains (--fabric)")
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=10.0,
        help="the model's set-up time per agent phase (--fabric's modelled wall time)",
    )
    parser.add_argument(
        "--baseline", action="store_true", help="spec.baseline on (Learn, history kept)"
    )
    parser.add_argument("--runs", type=int, default=1, help="runs, each after a spec change")
    parser.add_argument(
        "--heartbeat-factor",
        type=int,
        default=HEARTBEAT_FACTOR,
        help="kwok's heartbeats and the node grace stretched this many times "
        "(operator_scale.main says why)",
    )
    for what, does in (("pod", "marks pods Running"), ("lease", "renews node leases")):
        parser.add_argument(
            f"--kwok-{what}-parallelism",
            type=int,
            default=KWOK_PARALLELISM,
            help=f"how many at once kwok-controller {does} for all its nodes (kwok's own: "
            f"{KWOK_PARALLELISM}; operator_scale.main says why)",
        )
    parser.add_argument(
        "--control-plane-gogc",
        metavar="PERCENT",
        help="GOGC of the control plane's processes (kube-apiserver, etcd, kwok-controller, "
        "the scheduler and controller manager; Go's own 100 by default; see go_runtime_env)",
    )
    parser.add_argument(
        "--control-plane-memory-limit",
        metavar="SIZE",
        help="GOMEMLIMIT of the same processes, each (e.g. 6GiB; none by default)",
    )
    parser.add_argument(
        "--apiserver-profile",
        type=Path,
        metavar="DIR",
        help="with --fabric: CPU profiles of kube-apiserver, 20 s each, back to back over the "
        "fabric phase, kept in DIR and summarised (fabricApiserverCpuProfiles; needs `go`)",
    )
    parser.add_argument(
        "--fabric-timeline",
        type=Path,
        metavar="FILE",
        help="with --fabric: each fabric pod's name and when it was made, bound, Running and "
        "ended (epoch seconds), as JSON",
    )
    parser.add_argument(
        "--devices",
        choices=(DEVICE_PLUGIN, DRA),
        default=DEVICE_PLUGIN,
        help="spec.agent.devices: with dra the nodes advertise no nvidia.com/gpu, their GPUs are "
        "published in ResourceSlices as NVIDIA's DRA driver does, and each agent pod claims them",
    )
    parser.add_argument(
        "--remediation",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="spec.remediation on (mode Template, NVSentinel's RebootNode): this share of the "
        "nodes fails with a reboot-class XID until a stand-in janitor reboots it "
        "(benchmarks/scale_repairs.py)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: there is at least one run; give --runs 1 or more")
    for flag, value in (("pod", args.kwok_pod_parallelism), ("lease", args.kwok_lease_parallelism)):
        if value < 1:
            parser.error(f"--kwok-{flag}-parallelism {value}: give 1 or more")
    gogc = args.control_plane_gogc
    if gogc is not None and gogc != "off" and not (gogc.isdigit() and int(gogc) > 0):
        parser.error(f"--control-plane-gogc {gogc}: give a percentage above 0, or off")
    limit = args.control_plane_memory_limit
    if limit is not None and not re.fullmatch(r"[0-9]+([KMGT]iB|B)?", limit):
        parser.error(f"--control-plane-memory-limit {limit}: give bytes, or a size like 6GiB")
    if not 0 <= args.remediation <= 0.5:
        parser.error(f"--remediation {args.remediation}: give a share of the nodes from 0 to 0.5")
    if args.heartbeat_factor < 1:
        parser.error(f"--heartbeat-factor {args.heartbeat_factor}: give 1 (kwok's own) or more")
    if args.fabric_timeline is not None and not args.fabric:
        parser.error(f"--fabric-timeline {args.fabric_timeline}: times fabric pods; add --fabric")
    if args.apiserver_profile is not None and not args.fabric:
        parser.error(
            f"--apiserver-profile {args.apiserver_profile}: profiles the fabric phase; add --fabric"
        )
    opts = Options(
        args.nodes,
        args.max_concurrent,
        args.join,
        args.batch_seconds,
        args.fabric,
        args.racks,
        args.phase_seconds,
        args.baseline,
        args.runs,
        args.heartbeat_factor,
        args.kwok_pod_parallelism,
        args.kwok_lease_parallelism,
        args.apiserver_profile,
        args.fabric_timeline,
        args.control_plane_gogc,
        args.control_plane_memory_limit,
        args.devices,
        args.remediation,
    )
    return opts, args.json


def kwok_options(opts: Options) -> dict[str, int] | None:
    """kwok-controller's options when they are not kwok's own (None: no KwokConfiguration)."""
    if (opts.kwok_pods, opts.kwok_leases) == (KWOK_PARALLELISM, KWOK_PARALLELISM):
        return None
    return {"podPlayStageParallelism": opts.kwok_pods, "nodeLeaseParallelism": opts.kwok_leases}


def go_runtime_env(opts: Options) -> dict[str, str]:
    """GOGC and GOMEMLIMIT for the control plane's processes, which kwokctl starts with this
    process's environment. At Go's own GOGC of 100, garbage collection was 40 of kube-apiserver's
    265 CPU-seconds over the 10,000-node fabric phase (its CPU profiles), on the same two cores
    as everything the benchmark measures; a real control plane's collector runs on cores of its
    own. A larger GOGC trades memory for that CPU; GOMEMLIMIT bounds the memory."""
    env = {}
    if opts.go_gc is not None:
        env["GOGC"] = opts.go_gc
    if opts.go_memory_limit is not None:
        env["GOMEMLIMIT"] = opts.go_memory_limit
    return env
