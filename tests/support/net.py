"""Loopback helpers shared by the real-server starters: free ports, sockets a process listens on.

The project rule is that every server a test starts listens on 127.0.0.1 only; the
``listening_sockets`` helper lets a test prove it for a real process instead of trusting
its flags.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

LOOPBACK = "127.0.0.1"


class ServerUnavailable(RuntimeError):
    """A binary or package a real server needs is not installed here.

    ``reason`` says what is missing and which package provides it; the pytest fixtures
    turn it into a skip, code outside pytest can show it as is.
    """


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may still take it)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def wait_until(what: str, ready: Callable[[], bool], timeout_s: float, describe_failure: Callable[[], str],
               interval_s: float = 0.05) -> None:
    """Poll ``ready`` until it is true; on timeout raise with ``describe_failure()`` (a log tail)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{describe_failure()}")


def log_tail(path: Path, chars: int = 4000) -> str:
    """The end of a server's log file, for error messages; empty when it does not exist."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the fd closed while we looked
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _decode_address(hex_address: str) -> tuple[str, int]:
    host_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(host_hex)
    if len(raw) == 4:
        host = str(ipaddress.IPv4Address(raw[::-1]))
    else:  # IPv6 is stored as four little-endian 32-bit words
        words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
        host = str(ipaddress.IPv6Address(b"".join(words)))
    return host, int(port_hex, 16)


def listening_sockets(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state, and every UDP socket, owned by ``pids``.

    Read from /proc (Linux only), so it sees what the processes really bound, whatever their
    configuration claims.
    """
    inodes: set[str] = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    found: set[tuple[str, int]] = set()
    for table, listening_only in (("tcp", True), ("tcp6", True), ("udp", False), ("udp6", False)):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            state, inode = fields[3], fields[9]
            if inode in inodes and (state == "0A" or not listening_only):  # 0A = TCP_LISTEN
                found.add(_decode_address(fields[1]))
    return found


def processes() -> dict[int, tuple[int, str]]:
    """Every live process by pid: its parent's pid and its state letter (from /proc)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[1]), fields[0])
    return found


def child_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc), e.g. a postmaster and its workers."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in processes().items():
        children.setdefault(parent, []).append(child)
    result, todo = [], [pid]
    while todo:
        current = todo.pop()
        result.append(current)
        todo.extend(children.get(current, []))
    return result
