"""The pipe from the event loop to a child process: a wide kernel buffer, every item
delivered in order, and drops counted past the limit."""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import pickle

from tailreplay.batch_pipe import PIPE_BYTES, BatchPipe


def _limit() -> int:
    with open("/proc/sys/fs/pipe-max-size") as f:
        return int(f.read())


async def test_items_arrive_in_order_through_a_wide_pipe() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    pipe = BatchPipe(writer, limit=64 << 20, flush_s=0.01)
    await pipe.attach()
    assert pipe._transport is not None
    fd = pipe._transport.get_extra_info("pipe").fileno()
    # 1 MiB where the system allows it (the loop moves a buffer's worth per turn).
    assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == min(PIPE_BYTES, _limit())
    for i in range(2000):  # 8 MB: more than the buffer holds at once
        pipe.append((i, i.to_bytes(4, "big") * 1024))
    got: list[tuple[int, bytes]] = []

    def read_all() -> None:
        while len(got) < 2000:
            got.extend(pickle.loads(reader.recv_bytes()))

    reading = asyncio.get_running_loop().run_in_executor(None, read_all)
    pipe.flush()
    await asyncio.wait_for(reading, 30)
    pipe.close()
    assert [i for i, _ in got] == list(range(2000)) and pipe.sent == 2000 and pipe.dropped == 0


async def test_past_the_limit_items_are_dropped_and_counted() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    dropped: list[int] = []
    pipe = BatchPipe(writer, limit=1 << 20, flush_s=10, on_drop=dropped.append)
    await pipe.attach()
    for k in range(10):  # nobody reads: the pipe and then the transport fill
        for i in range(200):
            pipe.append((k * 200 + i).to_bytes(4, "big") * 1024)  # 4 KB, each its own
        pipe.flush()
    assert pipe.dropped == sum(dropped) > 0
    assert pipe.sent + pipe.dropped == 2000
    pipe.close()
    reader.close()
