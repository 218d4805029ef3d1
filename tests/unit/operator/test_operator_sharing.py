"""Shared GPUs (time-slicing, MPS) as GPU feature discovery labels them, and what gpuval makes of
them (gpuval_api.gfd; docs/operator/devices.md, "Shared GPUs"). Pure, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from gpuval_api.gfd import GpuSharing, SharingStrategy, shared_labels, sharing_of
from gpuval_devtools.kwoknodes import GpuNode
from gpuval_operator.nodes.facts import NodeFacts


def test_a_time_sliced_node_has_its_physical_count_and_replicas_and_can_be_held_whole() -> None:
    labels = shared_labels(SharingStrategy.TIME_SLICING, 4, 8, "NVIDIA-H200")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-SHARED"
    sharing = sharing_of(labels, 32)
    assert sharing == GpuSharing("time-slicing", 4, 8)
    assert sharing.exclusive_possible and sharing.annotation() == "time-slicing/4"
    assert sharing.describe() == "8 GPUs as 32 time-slicing replicas"


def test_an_mps_node_cannot_give_one_pod_a_whole_gpu() -> None:
    sharing = sharing_of(shared_labels(SharingStrategy.MPS, 2, 4, "Tesla-T4"), 8)
    assert sharing is not None and not sharing.exclusive_possible


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"},
        {"nvidia.com/gpu.count": "8"},
    ],
    ids=["no GFD", "GFD, not shared", "count only"],
)
def test_a_node_whose_gpus_are_not_shared_has_no_sharing(labels: dict[str, str]) -> None:
    assert sharing_of(labels, 8) is None


def test_replicas_without_a_strategy_label_are_time_slicing_and_the_count_comes_from_capacity() -> (
    None
):
    assert sharing_of({"nvidia.com/gpu.replicas": "4"}, 16) == GpuSharing("time-slicing", 4, 4)


def test_a_kwok_node_made_shared_carries_what_gfd_sets_and_advertises_every_replica() -> None:
    manifest: dict[str, Any] = GpuNode(
        "n1", gpus=8, sharing=SharingStrategy.TIME_SLICING, replicas=4
    ).manifest()
    labels = manifest["metadata"]["labels"]
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert manifest["status"]["capacity"]["nvidia.com/gpu"] == "32"
    facts = NodeFacts.parse(manifest, "v")
    assert facts.gpus == 32 and facts.sharing == GpuSharing("time-slicing", 4, 8)
    plain = NodeFacts.parse(GpuNode("n2").manifest(), "v")
    assert plain.sharing is None and plain.gpus == 8
