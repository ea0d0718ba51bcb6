"""The workload model keeps how prompts share prefixes: fitted from Mooncake's public
conversation trace (its ``hash_ids``), a synthesis of the model shares as much with a
prefix cache of the size engines hold as the trace itself does."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.workload.prefixes import PrefixDraw, fit_prefixes
from tests.helpers import DATA, write_plain

MOONCAKE = DATA / "mooncake_fast25" / "conversation_trace.jsonl"
T0 = 1_700_000_000 * 10**9


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def cached_blocks(prompts: list[list[int]], capacity: int) -> float:
    """Mean leading blocks a prompt finds in an LRU cache of ``capacity`` blocks that
    every prompt before it went through: what an engine's prefix cache skips."""
    cache: OrderedDict[int, None] = OrderedDict()
    found = 0
    for blocks in prompts:
        hit = 0
        while hit < len(blocks) and blocks[hit] in cache:
            hit += 1
        found += hit
        for block in blocks:
            cache[block] = None
            cache.move_to_end(block)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return found / len(prompts)


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The trace as an archive, and its fitted model."""
    tmp = tmp_path_factory.mktemp("mooncake")
    archive, model = tmp / "conv.msgpack", tmp / "m.json"
    assert _run("traces", "import", "mooncake", str(MOONCAKE), "-o", str(archive))[0] == 0
    code, out, err = _run("traces", "fit", str(archive), "-o", str(model))
    assert code == 0, err
    assert "prefixes: 37% of prompt blocks (512 tokens) seen before; 1 common roots" in out
    return archive, model


def test_the_fit_reads_the_traces_structure(conversation: tuple[Path, Path]) -> None:
    _, model = conversation
    reuse = json.loads(model.read_text())["prefix_reuse"]
    # Block 0 starts every prompt and nothing more is common to all; 39% of the
    # requests extend an earlier one (41% of those whose parent can be in the hour),
    # a median 422 requests back.
    assert reuse["root_shares"] == [1.0] and reuse["root_blocks"] == [1]
    assert reuse["parent_share"] == pytest.approx(0.41, abs=0.01)
    assert reuse["distances"][16] == pytest.approx(422, rel=0.01)
    assert reuse["requests"] == 12_031


@pytest.mark.parametrize("capacity", [100, 1_000])
def test_a_synthesis_finds_as_much_in_a_prefix_cache_as_the_trace(
    conversation: tuple[Path, Path], tmp_path: Path, capacity: int
) -> None:
    # 1,000 blocks of 512 tokens is the KV cache of the simulator's fast profile (480k
    # tokens); 100, a small GPU's. Exactly replayed through it, the trace finds 1.07
    # blocks a request (the shared first block, and the turns extended soon enough).
    archive, model = conversation
    synth = tmp_path / "s.msgpack"
    assert _run("traces", "synth", str(model), "-o", str(synth), "--count", "12031")[0] == 0
    recorded = [r.prefix_hashes or [] for r in ArchiveReader([archive])]
    drawn = [r.prefix_hashes or [] for r in ArchiveReader([synth])]
    assert all(
        len(h) == -(-r.input_tokens // 512)
        for h, r in zip(drawn, ArchiveReader([synth]), strict=True)
    )
    exact = cached_blocks(recorded, capacity)
    assert cached_blocks(drawn, capacity) == pytest.approx(exact, rel=0.2)


def test_the_poisson_baseline_shares_the_same_prefixes(
    conversation: tuple[Path, Path], tmp_path: Path
) -> None:
    _, fitted = conversation
    # Lengths that follow the arrival state draw other prompt lengths in the model's
    # arm (test_fit_states.py); without them, the requests and their prefixes are one.
    m = json.loads(fitted.read_text())
    m["lengths"]["state_weights"] = None
    model = tmp_path / "m.json"
    model.write_text(json.dumps(m))
    arms = {}
    for kind in ("model", "poisson"):
        out = tmp_path / f"{kind}.msgpack"
        args = ["traces", "synth", str(model), "-o", str(out), "--count", "500", "--seed", "4"]
        assert _run(*args, "--arrivals", kind)[0] == 0
        arms[kind] = [r.prefix_hashes for r in ArchiveReader([out])]
    assert arms["model"] == arms["poisson"]
    assert any(h and h[0] == arms["model"][0][0] for h in arms["model"][1:])  # the root


def _children(prompts: list[list[int]]) -> Counter[int]:
    """How many later prompts extend each prompt (its last shared block's latest owner)."""
    owner: dict[int, int] = {}
    children: Counter[int] = Counter()
    for i, blocks in enumerate(prompts):
        shared = 0
        while shared < len(blocks) and blocks[shared] in owner:
            shared += 1
        if shared > 1:
            children[owner[blocks[shared - 1]]] += 1
        for block in blocks:
            owner[block] = i
    return children


def test_a_drawn_conversation_turn_is_extended_once() -> None:
    # 60 conversations of 8 turns, interleaved: each turn is the last one and a block
    # more, after a system prompt (block 0) every conversation starts with.
    rng = np.random.default_rng(5)
    order = rng.permutation(np.repeat(np.arange(60), 8))
    turns: dict[int, list[int]] = {}
    prompts = []
    for k, conv in enumerate(order.tolist()):
        turns[conv] = [*(turns.get(conv) or [0]), 1_000 + k]
        prompts.append(turns[conv])
    reuse = fit_prefixes(prompts)
    assert reuse is not None and reuse.root_blocks == [1]
    draw = PrefixDraw(reuse, np.random.default_rng(0))
    drawn = [draw.hashes(int(n) * 512) for n in rng.integers(2, 9, 3_000)]
    fanout = Counter(_children([d or [] for d in drawn]).values())
    # 90% of the turns extended are extended once (71% if any request could be a
    # parent again); the rest where no turn near the distance drawn was free.
    assert sum(fanout.values()) > 500
    assert fanout[1] >= 0.85 * sum(fanout.values()), fanout


def test_records_without_hashes_fit_no_prefix_model(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    maps = [{"start_ns": T0 + int(i * 1e8), "input_tokens": int(rng.integers(10, 900)),
             "output_tokens": 20} for i in range(200)]  # fmt: skip
    model = tmp_path / "m.json"
    assert (
        _run("traces", "fit", str(write_plain(tmp_path / "a.msgpack", maps)), "-o", str(model))[0]
        == 0
    )
    assert json.loads(model.read_text())["prefix_reuse"] is None
    synth = tmp_path / "s.msgpack"
    assert _run("traces", "synth", str(model), "-o", str(synth), "--count", "50")[0] == 0
    assert all(r.prefix_hashes is None for r in ArchiveReader([synth]))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"root_shares": [0.7, 0.6], "root_blocks": [1, 1]}, "prefix_reuse.root_shares"),
        ({"root_blocks": [0]}, "prefix_reuse.root_shares and root_blocks"),
        ({"parent_share": 1.5}, "prefix_reuse.parent_share and seen_share"),
        ({"distances": [5.0, 1.0]}, "prefix_reuse.distances"),
        ({"reuse": [2.0] * 33}, "prefix_reuse.distances"),
    ],
)
def test_a_malformed_prefix_model_is_one_line(
    conversation: tuple[Path, Path], tmp_path: Path, change: dict, said: str
) -> None:
    _, model = conversation
    data = json.loads(model.read_text())
    data["prefix_reuse"].update(change)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = _run(
        "traces", "synth", str(bad), "-o", str(tmp_path / "s.msgpack"), "--count", "5"
    )
    assert code == 3 and err.count("\n") == 1 and said in err, err
