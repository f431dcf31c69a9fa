"""A TCP proxy that can partition one ZooKeeper server from its peers (tests/servers.sh runs it
for the `zk-follower` group; see tests/SERVERS.md).

    partition_proxy.py CONTROL_PORT LISTEN:TARGET [LISTEN:TARGET...]

Forwards each LISTEN port on 127.0.0.1 to TARGET on 127.0.0.1 (zk-follower-3's links to the
quorum and election ports of zk-follower-1 and -2). A line on the CONTROL port commands it; each
command is answered with one line, the state once the command took effect:

    pause   freeze every link both ways: nothing passes, connections stay open (new ones are
            accepted and held), as in a partition where packets are lost          -> "paused"
    resume  close every connection made before (both ends see a reset, as after a real
            partition: the peers reconnect), then forward again                  -> "running"
    status  -> "paused" or "running"

It starts running (not paused). No dependencies beyond the standard library.
"""

import asyncio
import sys

HOST = "127.0.0.1"


class Links:
    def __init__(self) -> None:
        self.open = asyncio.Event()  # set: forwarding; clear: paused
        self.open.set()
        self.generation = 0  # bumped by resume: older connections are closed
        self.conns = set()

    def state(self) -> str:
        return "running" if self.open.is_set() else "paused"

    def pause(self) -> None:
        self.open.clear()

    def resume(self) -> None:
        self.generation += 1
        for conn in list(self.conns):
            for writer in conn:
                writer.transport.abort()
        self.conns.clear()
        self.open.set()

    async def pump(self, src, dst, generation: int) -> None:
        try:
            while True:
                data = await src.read(65536)
                # Paused: hold what was read (and the end of the stream) until resumed.
                await self.open.wait()
                if generation != self.generation or not data:
                    break
                dst.write(data)
                await dst.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            dst.transport.abort()

    def forward(self, target: int):
        async def accept(reader, writer) -> None:
            generation = self.generation
            await self.open.wait()
            if generation != self.generation:
                writer.transport.abort()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, target)
            except OSError:
                writer.transport.abort()
                return
            conn = (writer, up_writer)
            self.conns.add(conn)
            try:
                await asyncio.gather(
                    self.pump(reader, up_writer, generation),
                    self.pump(up_reader, writer, generation),
                )
            finally:
                self.conns.discard(conn)

        return accept

    async def control(self, reader, writer) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                command = line.decode(errors="replace").strip()
                if command == "pause":
                    self.pause()
                elif command == "resume":
                    self.resume()
                elif command != "status":
                    writer.write(f"error: unknown command {command!r}\n".encode())
                    await writer.drain()
                    continue
                writer.write(f"{self.state()}\n".encode())
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            writer.close()


async def main(argv) -> None:
    if len(argv) < 2:
        sys.exit("usage: partition_proxy.py CONTROL_PORT LISTEN:TARGET [LISTEN:TARGET...]")
    links = Links()
    servers = []
    for spec in argv[1:]:
        listen, target = (int(p) for p in spec.split(":"))
        servers.append(await asyncio.start_server(links.forward(target), HOST, listen))
        print(f"partition_proxy: {HOST}:{listen} -> {HOST}:{target}", flush=True)
    # The control port last: once it answers, every link listens.
    servers.append(await asyncio.start_server(links.control, HOST, int(argv[0])))
    print(f"partition_proxy: control on {HOST}:{argv[0]}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
