"""A small TCP proxy for the fault suite: cuts one client process off from its server.

Every client of a run connects through the same proxy port (so they all name the same backend
deployment, which fences check), and the proxy finds which process opened each connection from
/proc (the client socket's inode, among the file descriptors of the run's worker processes).
Per process it can:
  pause  stop forwarding both ways (a black hole: nothing is lost, nothing arrives; TCP holds it)
  drop   reset its connections and every new one until healed (a refused, broken path)
  delay  forward every chunk after a delay
and `heal` restores it. tc netem is not available on this machine and network namespaces cannot
reach servers bound to loopback, hence a proxy.
"""

from __future__ import annotations

import asyncio
import os
from typing import Callable, Iterable, Optional

HOST = "127.0.0.1"


def _client_inode(client_port: int, server_port: int) -> Optional[str]:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, remote, inode = parts[1], parts[2], parts[9]
                    if (
                        int(local.rsplit(":", 1)[1], 16) == client_port
                        and int(remote.rsplit(":", 1)[1], 16) == server_port
                    ):
                        return inode
        except OSError:
            continue
    return None


def pid_of_connection(client_port: int, server_port: int, pids: Iterable[int]) -> Optional[int]:
    inode = _client_inode(client_port, server_port)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None


class _Conn:
    def __init__(self, pid: Optional[int], writers: list[asyncio.StreamWriter]) -> None:
        self.pid = pid
        self.writers = writers

    def abort(self) -> None:
        for w in self.writers:
            w.transport.abort()


class Proxy:
    def __init__(self, target_port: int, pids: Callable[[], Iterable[int]]) -> None:
        self.target_port = target_port
        self.pids = pids
        self.port = 0
        self.conns: list[_Conn] = []
        self.mode: dict[int, str] = {}
        self.gates: dict[int, asyncio.Event] = {}
        self.delay_s: dict[int, float] = {}
        self.server: Optional[asyncio.base_events.Server] = None

    async def start(self) -> "Proxy":
        self.server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in self.conns:
            c.abort()
        self.conns.clear()

    def _gate(self, pid: Optional[int]) -> asyncio.Event:
        key = pid if pid is not None else -1
        if key not in self.gates:
            ev = asyncio.Event()
            ev.set()
            self.gates[key] = ev
        return self.gates[key]

    def pause(self, pid: int) -> None:
        self.mode[pid] = "pause"
        self._gate(pid).clear()

    def drop(self, pid: int) -> None:
        self.mode[pid] = "drop"
        for c in [c for c in self.conns if c.pid == pid]:
            c.abort()
            self.conns.remove(c)

    def delay(self, pid: int, seconds: float) -> None:
        self.mode[pid] = "delay"
        self.delay_s[pid] = seconds

    def heal(self, pid: int) -> None:
        self.mode.pop(pid, None)
        self.delay_s.pop(pid, None)
        self._gate(pid).set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client_port = writer.get_extra_info("peername")[1]
        pid = pid_of_connection(client_port, self.port, list(self.pids()))
        if pid is not None and self.mode.get(pid) == "drop":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        conn = _Conn(pid, [writer, up_writer])
        self.conns.append(conn)
        await asyncio.gather(
            self._pump(reader, up_writer, pid, conn), self._pump(up_reader, writer, pid, conn)
        )

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, pid: Optional[int], conn: _Conn
    ) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                await self._gate(pid).wait()
                if pid is not None and self.mode.get(pid) == "drop":
                    break
                d = self.delay_s.get(pid) if pid is not None else None
                if d:
                    await asyncio.sleep(d)
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            conn.abort()
            if conn in self.conns:
                self.conns.remove(conn)
