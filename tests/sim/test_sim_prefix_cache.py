"""The simulator's prefix cache in the engine: hits, LRU eviction, exact KV accounting."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tailreplay.sim.batching import Engine, Sequence
from tailreplay.sim.prefix_cache import block_hashes
from tailreplay.sim.profiles import PROFILES, EngineProfile

BS = 16
# Sub-millisecond steps: these tests are about what is cached and counted, not time.
TINY = PROFILES["default"].with_overrides(
    decode_base_ms=0.2, decode_per_seq_ms=0.0, prefill_base_ms=0.2, prefill_per_token_ms=0.0,
    max_model_len=4096, kv_tokens=256, max_batched_tokens=2048, block_size=BS,
)  # fmt: skip


def prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100_000) for _ in range(n)]


def test_block_hashes_are_chained_over_full_blocks() -> None:
    a = prompt(1, 100)
    b = a[:40] + prompt(2, 60)  # shares two full blocks and 8 tokens of the third
    ha, hb = block_hashes(a, BS), block_hashes(b, BS)
    assert len(ha) == len(hb) == 6  # 100 // 16: the partial last block is not hashed
    assert ha[:2] == hb[:2] and ha[2] != hb[2]
    # Chained: a block with the same tokens after a different prefix hashes differently.
    c = prompt(3, 16) + a[16:]
    hc = block_hashes(c, BS)
    assert hc[0] != ha[0] and all(x != y for x, y in zip(hc[1:], ha[1:], strict=True))
    assert block_hashes(a, BS) == ha  # the same tokens, the same hashes
    assert block_hashes(a[:15], BS) == []


def check_accounting(engine: Engine) -> None:
    """The engine's KV figures against a count made from scratch from its sequences."""
    size, cache = engine.profile.block_size, engine.cache
    own = sum(s.context - size * len(s.blocks) for s in engine.running)
    pinned = Counter(b for s in engine.running for b in s.blocks)
    assert all(len(set(s.blocks)) == len(s.blocks) for s in engine.running)
    # Each running sequence's blocks are a prefix of its prompt's, and all are cached.
    for s in engine.running:
        assert s.blocks == s.block_hashes[: len(s.blocks)]
        assert all(b in cache for b in s.blocks)
    assert cache.pinned_tokens == size * len(pinned)
    assert engine.kv_used == own + size * len(pinned)
    assert engine.kv_used + cache.free_tokens <= engine.profile.kv_tokens
    assert engine.kv_usage == engine.kv_used / engine.profile.kv_tokens


def checked(engine: Engine, seen: list[int]) -> Engine:
    """Check the accounting after every admission and every step the engine runs."""

    def wrap(method: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            method(*args)
            check_accounting(engine)
            seen.append(1)

        return run

    engine._admit = wrap(engine._admit)  # type: ignore[method-assign]
    engine._finish_step = wrap(engine._finish_step)  # type: ignore[method-assign]
    return engine


@pytest.fixture
async def engine_for() -> AsyncIterator[Callable[[EngineProfile], Engine]]:
    engines: list[Engine] = []
    checks: list[int] = []

    def make(profile: EngineProfile) -> Engine:
        engine = checked(Engine(profile), checks)
        engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.stop()
    assert checks, "the accounting was never checked"


async def run(engine: Engine, tokens: list[int], target: int = 2) -> Sequence:
    seq = engine.submit(len(tokens), target, block_hashes(tokens, engine.profile.block_size))
    async with asyncio.timeout(10):
        while await seq.next_tokens():
            pass
    assert seq.generated == target
    return seq


async def test_a_cached_prefix_is_not_prefilled_again_but_the_last_token_is(
    engine_for: Callable[[EngineProfile], Engine],
) -> None:
    engine = engine_for(TINY)
    a = prompt(1, 100)
    first = await run(engine, a)
    assert first.cached_tokens == 0 and engine.stats.prefill_tokens == 100
    again = await run(engine, a)
    assert again.cached_tokens == 96  # six full blocks; the last 4 tokens computed
    assert engine.stats.prefill_tokens == 100 + 4
    assert engine.stats.prompt_tokens == 200  # vLLM's counter: whole prompts, once each
    # A prompt of whole blocks: its last block is computed again for its last token.
    b = prompt(2, 96)
    await run(engine, b)
    assert (await run(engine, b)).cached_tokens == 80
    # A prompt sharing two blocks with `a` hits those two only.
    c = a[:40] + prompt(3, 60)
    assert (await run(engine, c)).cached_tokens == 32
    assert engine.stats.prefix_queries == 100 + 100 + 96 + 96 + 100
    assert engine.stats.prefix_hits == 96 + 80 + 32
    assert engine.kv_used == 0 and engine.cache.pinned_tokens == 0


async def test_lru_eviction_keeps_the_recently_used_and_evicts_tails_first(
    engine_for: Callable[[EngineProfile], Engine],
) -> None:
    # 256 tokens of KV; each prompt is 72 tokens: 4 cached blocks (64 tokens) each.
    engine = engine_for(TINY)
    prompts = {name: prompt(seed, 72) for seed, name in enumerate("ABCDE")}
    hashes = {name: block_hashes(p, BS) for name, p in prompts.items()}

    def cached(name: str) -> list[bool]:
        return [h in engine.cache for h in hashes[name]]

    for name in "ABC":
        await run(engine, prompts[name])
    assert engine.cache.evictions == 0 and engine.cache.free_tokens == 3 * 64
    # D's 72 tokens (+2 generated) need room: A, the least recently used, gives way
    # from its tail (its last block), keeping the head that later blocks build on.
    await run(engine, prompts["D"])
    assert engine.cache.evictions == 1
    assert cached("A") == [True, True, True, False]
    assert cached("B") == cached("C") == cached("D") == [True] * 4
    # A again hits its three blocks, computes the fourth, and is now the most recent;
    # the room it takes comes from B, now the least recently used.
    assert (await run(engine, prompts["A"])).cached_tokens == 48
    assert cached("A") == [True] * 4 and cached("B") == [True, True, True, False]
    # E evicts four more blocks: the rest of B, then C's tail. A (recently used) stays.
    await run(engine, prompts["E"])
    assert engine.cache.evictions == 6
    assert cached("A") == cached("D") == cached("E") == [True] * 4
    assert cached("B") == [False] * 4 and cached("C") == [True, True, True, False]
    assert engine.kv_used == 0 and engine.cache.free_tokens == 256 - 16


async def test_shared_blocks_are_held_once_and_preemption_keeps_accounting_exact(
    engine_for: Callable[[EngineProfile], Engine],
) -> None:
    # Sequences share three system prompts, run concurrently, share cached blocks while
    # they run, and outgrow a small KV cache, so eviction and preemption both happen;
    # every admission and step is checked against a count from scratch.
    profile = TINY.with_overrides(kv_tokens=500, max_num_seqs=8, max_batched_tokens=128)
    engine = engine_for(profile)
    rng = random.Random(4)
    systems = [prompt(100 + i, 48 + 16 * i) for i in range(3)]
    tokens = [rng.choice(systems) + prompt(i, rng.randint(1, 60)) for i in range(60)]
    targets = [rng.randint(1, 120) for _ in tokens]
    seqs = [
        engine.submit(len(t), n, block_hashes(t, BS)) for t, n in zip(tokens, targets, strict=True)
    ]

    async def drain(seq: Sequence) -> None:
        while await seq.next_tokens():
            pass

    async with asyncio.timeout(60):
        await asyncio.gather(*(drain(s) for s in seqs))
    assert [s.generated for s in seqs] == targets
    assert engine.stats.preemptions > 0 and engine.cache.evictions > 0
    # Most found their system prompt's blocks cached: all but the first eight (admitted
    # together, before any was computed) and those whose blocks the pressure evicted
    # (47 of 60 here: the schedule depends on nothing but the submissions).
    hits = [s.cached_tokens for s in seqs]
    assert sum(h is not None and h >= 48 for h in hits) >= 40, hits
    assert engine.stats.prefix_hits == sum(h or 0 for h in hits)
    assert engine.stats.prefix_queries == sum(len(t) for t in tokens)
    # Whole prompts once each, however often preemption made them recompute.
    assert engine.stats.prompt_tokens == sum(len(t) for t in tokens)
    assert engine.kv_used == 0 and engine.cache.pinned_tokens == 0
    assert 0 < engine.cache.free_tokens <= profile.kv_tokens


async def test_with_the_prefix_cache_off_nothing_is_cached_or_counted(
    engine_for: Callable[[EngineProfile], Engine],
) -> None:
    engine = engine_for(TINY.with_overrides(prefix_caching=False))
    a = prompt(1, 100)
    for _ in range(2):
        seq = await run(engine, a)
        assert seq.cached_tokens is None
    assert engine.stats.prefill_tokens == engine.stats.prompt_tokens == 200
    assert engine.stats.prefix_queries == engine.stats.prefix_hits == 0
    assert engine.cache.free_tokens == 0 and engine.kv_used == 0
