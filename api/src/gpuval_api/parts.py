"""The GPU models gpuval knows, by the product name NVML gives them: the agent's expected figures
per part (gpuval_agent.parts) are for these, and the shipped baselines are of them. A baseline of
another model is still taken (a fleet's own GPUs are what its baseline is of), with a note saying
gpuval has never measured that model. Pure: the agent and the kubectl plugin read it here, so
the plugin never imports the agent."""

from __future__ import annotations

from typing import Final

H200: Final = "NVIDIA H200"
H100_SXM: Final = "NVIDIA H100 80GB HBM3"

KNOWN_PRODUCTS: tuple[str, ...] = (H200, H100_SXM)


def unknown_product_note(product: str) -> str | None:
    """What to say of a baseline's GPU model gpuval does not know; None for a known one."""
    if product in KNOWN_PRODUCTS:
        return None
    shown = product if len(product) <= 64 else product[:63] + "…"
    return (
        f"GPU model {shown!r} is not one gpuval knows ({', '.join(KNOWN_PRODUCTS)}: NVML's "
        "names, exactly): its nodes are judged against it as given, with no expected figures "
        "of gpuval's to check it by"
    )
