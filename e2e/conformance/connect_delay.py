#!/usr/bin/python3
"""connect_delay.py -- relay a unix socket to another, holding each new
connection for a moment before it reaches the server.

    connect_delay.py LISTEN_PATH TARGET_PATH [DELAY_S]

Used by csi-sanity.sh in front of kegfs-csi: csi-test v5.3.1's utils.Connect
reads the gRPC channel's state once and then waits for it to change; when the
channel is already READY at that first read (a fast unix socket on a busy
machine) it waits its full minute and fails the spec with "Connection timed
out".  Holding the server's first bytes back for DELAY_S (default 0.2 s) keeps
the channel CONNECTING until csi-sanity waits for the change.  The bytes of
every call pass unchanged.  Exits on SIGTERM.
"""
import asyncio
import os
import signal
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main(listen, target, delay):
    async def client(creader, cwriter):
        await asyncio.sleep(delay)
        try:
            sreader, swriter = await asyncio.open_unix_connection(target)
        except OSError as e:
            print("connect_delay: %s: %s" % (target, e), file=sys.stderr)
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter), pipe(sreader, cwriter))

    server = await asyncio.start_unix_server(client, path=listen)
    os.chmod(listen, 0o600)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()
    try:
        os.unlink(listen)
    except OSError:
        pass


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: connect_delay.py LISTEN_PATH TARGET_PATH [DELAY_S]")
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) == 4 else 0.2))
