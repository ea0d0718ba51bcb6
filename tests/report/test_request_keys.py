"""KeyIndex: the join on request keys is a dict's (the last occurrence of a key wins),
with keys hashed or, when two keys share a hash, sorted whole."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tailreplay.report import request_keys
from tailreplay.report.request_keys import KeyIndex, keys_of


def _case(seed: int) -> tuple[list[bytes], list[bool], list[bytes], list[bool]]:
    rng = random.Random(seed)
    pool = [rng.randbytes(24) for _ in range(200)]
    indexed = [rng.choice(pool) for _ in range(700)]  # repeats: the last one wins
    looked_up = [rng.choice([*pool, rng.randbytes(24)]) for _ in range(500)]
    return (
        indexed,
        [rng.random() > 0.1 for _ in indexed],
        looked_up,
        [rng.random() > 0.1 for _ in looked_up],
    )


@pytest.mark.parametrize("collide", [False, True])
def test_find_is_a_dicts_lookup(monkeypatch: pytest.MonkeyPatch, collide: bool) -> None:
    if collide:  # every key in one of 4 hashes: the index sorts the keys themselves
        hashed = request_keys._hash
        monkeypatch.setattr(request_keys, "_hash", lambda k: hashed(k) & np.uint64(3))
    for seed in range(5):
        indexed, keyed, looked_up, asked = _case(seed)
        where = {k: i for i, k in enumerate(indexed) if keyed[i]}
        expected = [where.get(k, -1) if asked[j] else -1 for j, k in enumerate(looked_up)]
        index = KeyIndex(keys_of(indexed), np.array(keyed))
        assert index.hashed is not collide
        found = index.find(keys_of(looked_up), np.array(asked))
        assert found.tolist() == expected
        assert index.contains(keys_of(looked_up)).tolist() == [k in where for k in looked_up]


def test_an_empty_index_finds_nothing() -> None:
    keys = keys_of([b"k" * 24, b"short"])  # a key of another length matches nothing
    assert len(keys) == 1
    assert KeyIndex(keys_of([])).find(keys).tolist() == [-1]
    assert KeyIndex(keys).find(keys_of([])).tolist() == []
