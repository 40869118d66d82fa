"""The port a benchmark's `amodal serve` listens on.

The benchmarks start `amodal serve --port 0` and read the port the kernel gave it off the
process's own listening socket. Picking a free port first and passing it would leave the
seconds the server takes to start (imports, the database) for any process on the machine
to take that port: the server would fail to bind, or another one would answer.
"""

from __future__ import annotations

import psutil


def listening_port(pid: int) -> int | None:
    """The TCP port process `pid` listens on; None until it listens (or once it has exited)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return None
    return next((c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN), None)
