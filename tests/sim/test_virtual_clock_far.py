"""The virtual clock keeps going past 2^24 s (194 days of virtual time): a replay of a
long span, or one slowed down (``--speed 0.01x``), must not spin forever."""

from __future__ import annotations

import asyncio

import pytest

from tailreplay.sim.virtual_clock import run_virtual


@pytest.mark.timeout(20)
@pytest.mark.parametrize("start", [1e6, 2.0**24 + 1, 5 * 365 * 86400.0, 2.0**40])
def test_small_sleeps_after_a_long_jump_still_end(start: float) -> None:
    async def main() -> float:
        await asyncio.sleep(start)
        for _ in range(3):
            await asyncio.sleep(0.006)
        return asyncio.get_running_loop().time()

    assert run_virtual(main()) >= start
