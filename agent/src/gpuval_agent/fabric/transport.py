"""What NCCL says about its transport, read from its own NCCL_DEBUG=INFO lines. Pure.

NCCL logs one line per channel and peer when it connects (src/transport/*.cc), e.g.
`host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`. A `NET/...`
connection is the network between nodes (or between processes told not to use P2P and SHM);
`P2P/...` and `SHM/...` stay inside one host. What crossed nodes is the worst network seen: one
node falling back to sockets shows as Socket even when other channels went over InfiniBand.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuval_api.fabric import ExpectedTransport, Transport

# `via NET/<plugin name>/<device>[(<proxy rank>)][/GDRDMA][(PCI)][/Shared]`; plugin names such as
# "IB", "IBext_v8", "Socket", "AWS Libfabric".
_NET = re.compile(r"via NET/(?P<net>[^/\n]+?)/(?P<dev>\d+)(?:\(\d+\))?(?P<gdr>/GDRDMA)?")
_LOCAL = re.compile(r"via (?:P2P|SHM)/")
# NCCL_NET names a network that cannot start (no HCA for IB) and the init fails with
# ncclInvalidUsage. Older NCCL says "NCCL WARN Error: network IB not found."; 2.28.9 (seen on the
# H200 machine) says "NCCL INFO Failed to initialize NET plugin IB" and then "NCCL WARN Failed to
# initialize any NET plugin", the line torch's exception repeats.
_NET_MISSING = re.compile(
    r"network (?P<net>\S+) not found|Failed to initialize NET plugin (?P<plugin>\S+)"
)
_NO_NET = "Failed to initialize any NET plugin"
ANY_NET = "any"  # TransportReading.missing_net when no line named the network
_KEEP = 6
_LINE_LIMIT = 240
# Worse transports first: the one reported when several were seen.
_ORDER = (Transport.SOCKET, Transport.IB, Transport.IB_GDRDMA, Transport.UNKNOWN)


@dataclass
class TransportReading:
    transport: Transport = Transport.UNKNOWN
    lines: list[str] = field(default_factory=list)
    # The network NCCL_NET asked for could not start (its WARN line), e.g. "IB".
    missing_net: str | None = None


def _net_transport(name: str, gdr: bool) -> Transport:
    if name.startswith("IB"):
        return Transport.IB_GDRDMA if gdr else Transport.IB
    if name == "Socket":
        return Transport.SOCKET
    return Transport.UNKNOWN  # a plugin this reading does not know (e.g. AWS Libfabric)


def _short(line: str) -> str:
    text = line.strip()
    return text if len(text) <= _LINE_LIMIT else text[: _LINE_LIMIT - 1] + "…"


def read_transport(lines: Iterable[str]) -> TransportReading:
    """The transport NCCL used across nodes, and a few of its lines that say so."""
    reading = TransportReading()
    seen: set[Transport] = set()
    local = False
    kept: dict[str, str] = {}  # one line per distinct "via ..." so the kept lines say something
    for line in lines:
        # Also in torch's exception text ("Last error: Error: network IB not found."), which
        # carries no NCCL prefix.
        if (missing := _NET_MISSING.search(line)) is not None:
            reading.missing_net = (missing.group("net") or missing.group("plugin")).rstrip(".")
            kept.setdefault("missing", _short(line))
            continue
        if _NO_NET in line:
            reading.missing_net = reading.missing_net or ANY_NET
            kept.setdefault("missing", _short(line))
            continue
        if " NCCL " not in line:
            continue
        if (net := _NET.search(line)) is not None:
            found = _net_transport(net.group("net"), net.group("gdr") is not None)
            seen.add(found)
            kept.setdefault(net.group(0), _short(line))
        elif _LOCAL.search(line) is not None:
            local = True
            kept.setdefault(line[line.index("via ") :].strip(), _short(line))
    if seen:
        reading.transport = next(t for t in _ORDER if t in seen)
    elif local:
        reading.transport = Transport.P2P
    network_first = sorted(kept.values(), key=lambda text: "via NET/" not in text)
    reading.lines = network_first[:_KEEP]
    return reading


def fell_back(expected: ExpectedTransport, reading: TransportReading) -> str | None:
    """Why the transport is not the expected one (a sentence), or None when it is acceptable."""
    if expected is not ExpectedTransport.IB:
        return None
    if reading.missing_net == ANY_NET:
        return (
            "NCCL could not start any network (every NET plugin failed to initialize: no usable "
            "HCA in this node or pod), where fabric.expectedTransport is IB"
        )
    if reading.missing_net is not None:
        return (
            f"NCCL could not start network {reading.missing_net} (NCCL_NET={reading.missing_net}:"
            " no usable HCA in this node or pod), where fabric.expectedTransport is IB"
        )
    if reading.transport is Transport.SOCKET:
        return (
            "NCCL moved data between nodes over TCP sockets (via NET/Socket), where "
            "fabric.expectedTransport is IB"
        )
    return None
