"""The offline engine (``serve_offline`` on the virtual clock) serves every profile a
calibration can write, and a run that cannot go on ends cleanly."""

from __future__ import annotations

import asyncio
import gc

import pytest

from tailreplay.sim.offline_engine import OfflineRequest, Served, serve_offline
from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.virtual_clock import Stalled, run_virtual


def _served(overrides: dict[str, float], requests: list[OfflineRequest]) -> list[Served]:
    profile = PROFILES["fast"].with_overrides(**overrides)
    out: dict[int, Served] = {}
    serve_offline(profile, iter(enumerate(requests)), lambda batch: out.update(batch))
    return [out[k] for k in range(len(requests))]


@pytest.mark.timeout(30)
def test_a_prefill_priced_at_nothing_is_served_at_the_decode_steps() -> None:
    # A calibration clamps a prefill line fitted below 0 to 0: such a step costs 0 ms
    # and must still run, not read as "nothing could run" and wait forever.
    free = {"prefill_base_ms": 0.0, "prefill_per_token_ms": 0.0}
    requests = [OfflineRequest(0.0, 300, 4), OfflineRequest(0.005, 50, 3)]
    first, second = _served(free | {"decode_base_ms": 10.0, "decode_per_seq_ms": 0.0}, requests)
    assert first.status == second.status == 200
    assert len(first.token_s) == 4 and len(second.token_s) == 3
    assert first.token_s[0] == pytest.approx(0.0, abs=1e-9)  # alone, its prefill is free
    assert first.token_s[-1] == pytest.approx(0.03, abs=1e-9)  # then 3 decode steps
    # The second came during the first decode step (0-10 ms) and was prefilled in the
    # next, beside the first's decode: its first token at 20 ms, 15 ms after it came.
    assert second.token_s == pytest.approx([0.015, 0.025, 0.035], abs=1e-9)


@pytest.mark.timeout(30)
def test_a_profile_of_nothing_but_free_steps_still_ends() -> None:
    free = dict.fromkeys(
        ("prefill_base_ms", "prefill_per_token_ms", "decode_base_ms", "decode_per_seq_ms"), 0.0
    )
    served = _served(free, [OfflineRequest(0.0, 100, 5), OfflineRequest(0.0, 20, 2)])
    assert [s.status for s in served] == [200, 200]
    assert [s.token_s for s in served] == [[0.0] * 5, [0.0] * 2]


def test_a_stall_runs_what_every_task_left_to_clean_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cleaned: list[str] = []

    async def waits_forever(name: str) -> None:
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            cleaned.append(name)

    async def main() -> None:
        helper = asyncio.create_task(waits_forever("helper"))
        try:
            await waits_forever("main")
        finally:
            await asyncio.sleep(1)  # a cleanup that waits on the clock still runs
            helper.cancel()

    with pytest.raises(Stalled):
        run_virtual(main())
    gc.collect()
    assert sorted(cleaned) == ["helper", "main"]
    assert "destroyed" not in capsys.readouterr().err
