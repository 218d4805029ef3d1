"""XIDs since boot from the kernel log: /dev/kmsg under the root path (the structured ring
buffer, readable by a privileged agent), else `dmesg` on the real root. An unreadable log is said
with what was tried; it never passes for a clean one."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

from gpuval_agent.state.model import KernelLog, KernelXid

# NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)")
# dmesg's (and our kmsg lines') time since boot: '[ 8640.123456] ...'.
_SINCE_BOOT = re.compile(r"^\[\s*(\d+\.\d+)\]")
_MAX_RECORD = 8192
_DMESG_TIMEOUT = 5.0
# Lines kept around each XID line for the evidence bundle.
CONTEXT_BEFORE, CONTEXT_AFTER = 3, 3


def _kmsg_message(record: str) -> str | None:
    """One /dev/kmsg record ('6,1234,5678,-;text', the third field microseconds since boot) as
    dmesg prints it ('[    0.005678] text'); None for continuation lines."""
    head, sep, text = record.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[2].isdigit():
        return None
    return f"[{int(fields[2]) / 1e6:12.6f}] " + text.rstrip("\n").split("\n", 1)[0]


def _read_kmsg(path: Path) -> list[str]:
    """Every record /dev/kmsg still holds (a plain file in recorded trees); raises OSError."""
    lines: list[str] = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not path.is_char_device():
            with os.fdopen(os.dup(fd), "r", errors="replace") as stream:
                text = stream.read()
            return [m for m in (_kmsg_message(r) for r in text.splitlines()) if m is not None]
        while True:
            try:
                chunk = os.read(fd, _MAX_RECORD)
            except OSError as error:
                if error.errno == errno.EAGAIN:
                    return lines  # the end of the buffer
                if error.errno == errno.EPIPE:
                    continue  # the ring buffer overwrote the record being read
                raise
            if not chunk:
                return lines
            message = _kmsg_message(chunk.decode(errors="replace"))
            if message is not None:
                lines.append(message)
    finally:
        os.close(fd)


def _read_dmesg() -> list[str]:
    """`dmesg` of the machine the agent runs on; raises OSError with why it failed."""
    binary = shutil.which("dmesg")
    if binary is None:
        raise OSError("dmesg is not installed")
    try:
        done = subprocess.run(
            [binary], capture_output=True, text=True, timeout=_DMESG_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise OSError(f"dmesg did not answer within {_DMESG_TIMEOUT:g} s") from None
    if done.returncode != 0:
        raise OSError(done.stderr.strip() or f"dmesg exited {done.returncode}")
    return done.stdout.splitlines()


def parse_xids(lines: list[str]) -> list[KernelXid]:
    """The XID lines among `lines`."""
    found = []
    for index, line in enumerate(lines):
        match = _XID.search(line)
        stamp = _SINCE_BOOT.match(line)
        if match:
            found.append(
                KernelXid(
                    xid=int(match.group(2)),
                    pci=match.group(1).lower(),
                    line=index,
                    text=line,
                    since_boot=float(stamp.group(1)) if stamp else None,
                )
            )
    return found


def read_kernel_log(root: Path) -> KernelLog:
    """The XIDs of the kernel log under `root`, with the lines around each."""
    kmsg = root / "dev/kmsg"
    tried: list[str] = []
    lines: list[str] | None = None
    source = None
    try:
        lines, source = _read_kmsg(kmsg), "/dev/kmsg"
    except OSError as error:
        tried.append(f"{kmsg}: {error.strerror or error}")
    if lines is None and root == Path("/"):
        try:
            lines, source = _read_dmesg(), "dmesg"
        except OSError as error:
            tried.append(f"dmesg: {error}")
    if lines is None:
        return KernelLog(error="; ".join(tried))
    xids = parse_xids(lines)
    keep: set[int] = set()
    for xid in xids:
        keep.update(range(max(0, xid.line - CONTEXT_BEFORE), xid.line + CONTEXT_AFTER + 1))
    context = [f"{i}: {lines[i]}" for i in sorted(keep) if i < len(lines)]
    uptime = _uptime(root)
    return KernelLog(
        source=source, lines=context, xids=xids, line_count=len(lines), uptime_seconds=uptime
    )


def _uptime(root: Path) -> float | None:
    """Seconds since boot (/proc/uptime), to give each XID its age."""
    try:
        return float((root / "proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def gpu_of(xid: KernelXid, bus_ids: dict[int, str]) -> int | None:
    """The GPU an XID line names: its PCI domain:bus:device against each GPU's sysfs address."""
    return next((g for g, a in bus_ids.items() if a.lower().startswith(xid.pci)), None)
