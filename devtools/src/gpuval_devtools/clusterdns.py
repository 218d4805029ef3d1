"""The test node's cluster DNS: a stand-in for CoreDNS that answers Service names and nothing else.

Pods resolve ``<service>.<namespace>.svc.cluster.local`` (the chart's ``helm test`` pod reaches the
operator's metrics Service by name). This server answers A queries for such names with the
Service's ClusterIP, read from the API server, answers every other name under the cluster domain
with NXDOMAIN and refuses the rest, so no query ever leaves the machine. UDP only: answers are one
record, never truncated.

``python -m gpuval_devtools.clusterdns --listen 10.244.0.1 --server URL --ca F --cert F --key F``
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

DOMAIN = "cluster.local"
TYPE_A = 1
CLASS_IN = 1
NOERROR, NXDOMAIN, REFUSED, FORMERR = 0, 3, 5, 1
TTL = 5

Lookup = Callable[[str, str], str | None]


def parse_question(packet: bytes) -> tuple[int, int, str, int, int, int]:
    """(id, flags, name, qtype, qclass, end of the question) of a query with one question."""
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        raise ValueError(f"{qdcount} questions")
    labels, offset = [], 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii").lower())
        offset += 1 + length
    qtype, qclass = struct.unpack("!HH", packet[offset + 1 : offset + 5])
    return ident, flags, ".".join(labels), qtype, qclass, offset + 5


def answer(packet: bytes, lookup: Lookup) -> bytes:
    """The response to one query: the ClusterIP of a Service name, else NXDOMAIN or REFUSED."""
    try:
        ident, flags, name, qtype, qclass, end = parse_question(packet)
    except (ValueError, IndexError, UnicodeDecodeError, struct.error):
        return struct.pack(
            "!HHHHHH", struct.unpack("!H", packet[:2])[0], 0x8000 | FORMERR, 0, 0, 0, 0
        )
    question = packet[12:end]
    rcode, records = REFUSED, b""
    if name == DOMAIN or name.endswith("." + DOMAIN):
        rcode = NXDOMAIN
        parts = name.removesuffix("." + DOMAIN).split(".")
        if len(parts) == 3 and parts[2] == "svc":
            address = lookup(parts[1], parts[0])
            if address is not None:
                rcode = NOERROR
                if qtype == TYPE_A and qclass == CLASS_IN:
                    records = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL, 4)
                    records += socket.inet_aton(address)
    # QR, AA (authoritative for the cluster domain), RD copied from the query.
    reply_flags = 0x8400 | (flags & 0x0100) | rcode
    header = struct.pack("!HHHHHH", ident, reply_flags, 1, 1 if records else 0, 0, 0)
    return header + question + records


class ServiceLookup:
    """ClusterIPs read from the API server, remembered for a few seconds."""

    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server.rstrip("/")
        self.context = context
        self.cache: dict[tuple[str, str], tuple[float, str | None]] = {}

    def __call__(self, namespace: str, service: str) -> str | None:
        now = time.monotonic()
        hit = self.cache.get((namespace, service))
        if hit is not None and now - hit[0] < 2:
            return hit[1]
        url = f"{self.server}/api/v1/namespaces/{namespace}/services/{service}"
        try:
            with urllib.request.urlopen(url, context=self.context, timeout=5) as reply:
                spec = json.load(reply).get("spec") or {}
            ip = spec.get("clusterIP")
            address = ip if ip and ip != "None" else None
        except urllib.error.HTTPError as err:
            if err.code != 404:
                print(f"clusterdns: {url}: HTTP {err.code}", file=sys.stderr, flush=True)
            address = None
        self.cache[(namespace, service)] = (now, address)
        return address


def serve(listen: str, port: int, lookup: Lookup) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((listen, port))
    print(f"clusterdns: serving {DOMAIN} on {listen}:{port}", file=sys.stderr, flush=True)
    while True:
        packet, peer = sock.recvfrom(512)
        if len(packet) >= 12:
            sock.sendto(answer(packet, lookup), peer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuval_devtools.clusterdns", description=__doc__
    )
    parser.add_argument("--listen", required=True)
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert, args.key)
    serve(args.listen, args.port, ServiceLookup(args.server, context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
