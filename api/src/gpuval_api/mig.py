"""Multi-Instance GPU: what a MIG profile is a share of, the H200's profiles, and a node's MIG
layout as one comparable string. Pure.

A MIG device is a GPU instance (a share of the GPU's memory slices and compute slices) with one
compute instance over all of it, named `<compute slices>g.<memory>gb` (NVIDIA's MIG user guide,
"MIG Device Names"). The H200 (141 GB, 132 SMs) has seven compute slices and eight memory slices;
its profiles, from the guide's "Supported MIG Profiles" table (fraction of memory, fraction of SMs)
and `nvidia-smi mig -lgip` on an H200 (SMs per profile): 1g.18gb 1/8 of the memory, 16 SMs;
1g.35gb 2/8, 26 SMs; 2g.35gb 2/8, 32 SMs; 3g.71gb 4/8, 60 SMs; 4g.71gb 4/8, 64 SMs; 7g.141gb the
whole memory, 132 SMs. The 1g.35gb's 26 SMs is the H100's figure for the same GH100 profile.

An instance is expected to reach its share of the whole GPU's figures: its SMs' share of the
compute, its memory slices' share of the memory bandwidth (gpuval_agent.parts).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from gpuval_api import parts

# A MIG-capable GPU's compute and memory slices (A100, H100, H200, B200).
COMPUTE_SLICES: Final = 7
MEMORY_SLICES: Final = 8

_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:\+\w+)?$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile of a GPU model."""

    name: str
    compute_slices: int
    memory_slices: int
    sms: int


@dataclass(frozen=True, slots=True)
class MigModel:
    """A MIG-capable GPU model: its SMs when whole, and its profiles by name."""

    sms: int
    profiles: dict[str, MigProfile]


H200: Final = MigModel(
    sms=132,
    profiles={
        p.name: p
        for p in (
            MigProfile("1g.18gb", 1, 1, 16),
            MigProfile("1g.35gb", 1, 2, 26),
            MigProfile("2g.35gb", 2, 2, 32),
            MigProfile("3g.71gb", 3, 4, 60),
            MigProfile("4g.71gb", 4, 4, 64),
            MigProfile("7g.141gb", 7, 8, 132),
        )
    },
)
# By the product name NVML gives the parent GPU.
MODELS: Final = {parts.H200: H200}


def compute_slices_of(profile: str) -> int | None:
    """'3g.71gb' -> 3, '1c.3g.71gb' -> 3 (the GPU instance's slices); None when not a profile."""
    match = _PROFILE.match(profile)
    return int(match.group(2)) if match else None


def known_profile(product: str | None, profile: str) -> MigProfile | None:
    """The profile of a known GPU model (the '+me' media-extension variants share their base's
    figures)."""
    model = MODELS.get(product or "")
    return None if model is None else model.profiles.get(profile.split("+", 1)[0])


@dataclass(frozen=True, slots=True)
class MigShare:
    """An instance's share of its whole GPU: of the SMs (compute) and of the memory."""

    compute: float
    memory: float


def share_of(
    product: str | None,
    profile: str,
    *,
    sms: int | None = None,
    parent_sms: int | None = None,
    memory_bytes: int | None = None,
    parent_memory_bytes: int | None = None,
) -> MigShare:
    """What share of the whole GPU an instance is: measured counts first (its SMs of the parent's,
    its memory of the parent's), then the known profile, then the profile's name (its compute
    slices of seven; memory as compute)."""
    known = known_profile(product, profile)
    model = MODELS.get(product or "")
    if sms and parent_sms:
        compute = sms / parent_sms
    elif known is not None and model is not None:
        compute = known.sms / model.sms
    else:
        compute = (compute_slices_of(profile) or COMPUTE_SLICES) / COMPUTE_SLICES
    memory: float | None = None
    if known is not None:
        memory = known.memory_slices / MEMORY_SLICES
    elif memory_bytes and parent_memory_bytes:
        memory = memory_bytes / parent_memory_bytes
    return MigShare(compute=min(compute, 1.0), memory=min(memory or compute, 1.0))


# How a baseline key names a MIG instance's product: its parent GPU's NVML name, then the profile
# ('NVIDIA H200 MIG 1g.18gb'); an instance's figures are its profile's, never a whole GPU's.
IN_PRODUCT: Final = " MIG "


def key_product(name: str, profile: str | None) -> str:
    """The product a baseline key names for a unit: its GPU's name, with a MIG profile after."""
    return f"{name}{IN_PRODUCT}{profile}" if profile else name


def parent_product(product: str) -> tuple[str, str]:
    """'NVIDIA H200 MIG 1g.18gb' -> ('NVIDIA H200', '1g.18gb'); a whole GPU's -> (it, '')."""
    model, _, profile = product.partition(IN_PRODUCT)
    return model, profile


def unit_name(index: int, profile: str | None = None, parent_index: int | None = None) -> str:
    """How a unit is named: 'GPU 3', or a MIG instance by its profile and parent GPU ('MIG
    1g.18gb instance 6 of GPU 0': the unit index of an instance is no GPU's)."""
    if profile is None:
        return f"GPU {index}"
    return f"MIG {profile} instance {index} of GPU {parent_index}"


def mig_layout(profiles: Iterable[str]) -> str:
    """A node's MIG instances as one string, e.g. '7x1g.18gb' or '1x3g.71gb+2x2g.35gb': the same
    layout gives the same string whatever the order the instances were listed in."""
    counts = Counter(profiles)
    ordered = sorted(counts.items(), key=lambda item: (-(compute_slices_of(item[0]) or 0), item[0]))
    return "+".join(f"{count}x{profile}" for profile, count in ordered)
