"""Dry-run arithmetic: due times, ramps, amplification, the tail set, shards."""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import replace
from pathlib import Path

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import ArchiveError, UsageError
from tailreplay.replayer import schedule as schedule_module
from tailreplay.replayer.schedule import ScheduleConfig, plan, schedule
from tailreplay.replayer.speed import Speed, parse_speed
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tests.helpers import HEADER, write_plain

T0 = 1_700_000_000 * 10**9


def _archive(tmp_path: Path, n: int = 400, seed: int = 3) -> tuple[Path, list[dict]]:
    rng = random.Random(seed)
    t, maps = T0, []
    for _ in range(n):
        t += rng.choice([0, 0, rng.randint(1, 200_000_000)])  # ties, as real traces have
        maps.append(
            {
                "start_ns": t,
                "trace_id": rng.randbytes(16),
                "span_id": rng.randbytes(8),
                "path": "/v1/chat/completions",
                "method": "POST",
                "duration_ns": rng.randint(10**8, 10**10),
                "input_tokens": rng.randint(10, 2000),
                "output_tokens": rng.randint(1, 500),
                "stream": True,
            }
        )
    return write_plain(tmp_path / "a.msgpack", maps), maps


def _dry(tmp_path: Path, archive: Path, *args: str, name: str = "dry") -> list:
    out = tmp_path / f"{name}.msgpack"
    result = CliRunner().invoke(
        cli, ["replay", "--dry-run", "--out", str(out), *args, str(archive)]
    )
    assert result.exit_code == 0, result.output
    planned = list(ArchiveReader([out], order="file"))
    assert f"dry run: {len(planned):,} requests planned, none sent" in result.stdout
    return planned


@pytest.mark.parametrize(
    ("spec", "factor"), [("2x", 2.0), ("200%", 2.0), ("0.5x", 0.5), ("1x", 1.0)]
)
def test_due_offsets_are_recorded_offsets_over_speed(
    tmp_path: Path, spec: str, factor: float
) -> None:
    archive, maps = _archive(tmp_path)
    got = _dry(tmp_path, archive, "--speed", spec)
    assert len(got) == len(maps)
    first = maps[0]["start_ns"]
    due = np.array([r.intended_ns - first for r in got]) / 1e9
    want = np.array([m["start_ns"] - first for m in maps]) / 1e9 / factor
    np.testing.assert_allclose(due, want, atol=1e-6)
    assert [r.orig_trace_id for r in got] == [m["trace_id"] for m in maps]


def test_ramp_offsets_integrate_the_factor(tmp_path: Path) -> None:
    archive, maps = _archive(tmp_path)
    got = _dry(tmp_path, archive, "--speed", "1x..4x")
    first = maps[0]["start_ns"]
    tau = np.array([r.intended_ns - first for r in got]) / 1e9
    recorded = np.array([m["start_ns"] - first for m in maps]) / 1e9
    span = recorded[-1]
    total = 2 * span / (1 + 4)  # the replay's length
    # ∫0^τ (1 + 3 s / T) ds = τ + 1.5 τ² / T must give back each recorded offset.
    np.testing.assert_allclose(tau + 1.5 * tau**2 / total, recorded, atol=1e-6)
    assert tau[-1] == pytest.approx(total)
    # The factor rises: later gaps are compressed more than earlier ones.
    assert np.all(np.diff(tau) >= -1e-12)


@pytest.mark.parametrize(("spec", "expected"), [("3x", 3.0), ("1x", 1.0)])
def test_amplify_sends_k_copies(tmp_path: Path, spec: str, expected: float) -> None:
    archive, maps = _archive(tmp_path, n=200)
    got = _dry(tmp_path, archive, "--amplify", spec)
    assert len(got) == expected * len(maps)
    ids = [r.orig_trace_id for r in got]
    assert all(ids.count(m["trace_id"]) == expected for m in maps)
    due = [r.intended_ns for r in got]
    assert due == sorted(due)


def test_fractional_amplify_is_a_deterministic_draw(tmp_path: Path) -> None:
    archive, maps = _archive(tmp_path, n=400)
    a = _dry(tmp_path, archive, "--amplify", "1.5x", name="first")
    b = _dry(tmp_path, archive, "--amplify", "1.5x", name="second")
    assert [r.orig_trace_id for r in a] == [r.orig_trace_id for r in b]
    assert 1.35 * len(maps) < len(a) < 1.65 * len(maps)


def test_tail_set_and_budgets(tmp_path: Path) -> None:
    archive, maps = _archive(tmp_path)
    got = _dry(tmp_path, archive)
    threshold = np.percentile([m["duration_ns"] for m in maps], 99)
    by_id = {m["trace_id"]: m for m in maps}
    tail_ids = {m["trace_id"] for m in maps if m["duration_ns"] >= threshold}
    assert {r.orig_trace_id for r in got if r.tail} == tail_ids and len(tail_ids) == 4
    for r in got:
        m = by_id[r.orig_trace_id]
        want = math.ceil(1.8 * m["output_tokens"]) if r.tail else m["output_tokens"]
        assert r.max_tokens == want


@pytest.mark.parametrize(
    ("durations", "quantile", "tail"),
    [
        ([2 * 10**9] * 300, "0.99", 0),  # all tie: no tail, not every request
        ([2 * 10**9] * 300, "0.5", 0),
        ([10**9] * 295 + [7 * 10**9] * 5, "0.99", 5),  # the longest tie among themselves
        ([10**9] * 200 + [3 * 10**9] * 100, "0.99", 0),  # a third at the top: not the tail
        ([10**9] * 150 + [2 * 10**9] * 50, "0.5", 50),  # nearer half than all
    ],
)
def test_ties_at_the_threshold_do_not_make_everyone_the_tail(
    tmp_path: Path, durations: list[int], quantile: str, tail: int
) -> None:
    maps = [
        {"start_ns": T0 + i * 10**7, "duration_ns": d, "input_tokens": 10, "output_tokens": 20}
        for i, d in enumerate(durations)
    ]
    path = write_plain(tmp_path / "a.msgpack", maps)
    config = ScheduleConfig(paths=[path], tail_quantile=float(quantile))
    p = plan(config)
    items = list(schedule(config, p))
    assert p.tail_count == sum(i.tail for i in items) == tail
    assert sum(i.budget == 36 for i in items) == tail  # the stretch reaches those alone


def test_tail_by_service_demand_when_no_latencies(tmp_path: Path) -> None:
    maps = [
        {"start_ns": T0 + i * 10**7, "input_tokens": (i * 7919) % 30_000 + 1,
         "output_tokens": i % 97 + 1}
        for i in range(300)
    ]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    config = ScheduleConfig(paths=[archive])
    p = plan(config)
    assert p.tail_by == "service_demand"
    demand = [0.0125 * m["input_tokens"] + 6.04 * m["output_tokens"] for m in maps]
    threshold = np.percentile(demand, 99)
    items = list(schedule(config, p))
    # The first pass (columns) and the second (records) pick the same three.
    assert p.tail_count == sum(i.tail for i in items) == sum(d >= threshold for d in demand) == 3
    assert {i.record.start_ns for i in items if i.tail} == {
        m["start_ns"] for m, d in zip(maps, demand, strict=True) if d >= threshold
    }
    longest = max(m["input_tokens"] + (math.ceil(1.8 * m["output_tokens"]) if i.tail else
                  m["output_tokens"]) for m, i in zip(maps, items, strict=True))  # fmt: skip
    assert p.longest == longest


def test_the_default_tail_cost_is_the_default_simulator_profiles() -> None:
    from tailreplay.replayer.schedule import DEFAULT_TAIL_COST
    from tailreplay.sim.profiles import DEFAULT_PROFILE, profile

    p = profile(DEFAULT_PROFILE)
    assert DEFAULT_TAIL_COST.input_ms == p.prefill_per_token_ms
    assert DEFAULT_TAIL_COST.output_ms == pytest.approx(p.decode_ms(1), abs=1e-12)


def test_shards_partition_the_unsharded_run(tmp_path: Path) -> None:
    archive, _ = _archive(tmp_path)
    whole = _dry(tmp_path, archive, "--amplify", "2x", name="whole")
    parts = [
        _dry(tmp_path, archive, "--amplify", "2x", "--shard", f"{i}/3", name=f"s{i}")
        for i in range(3)
    ]
    key = lambda r: (r.intended_ns, r.orig_trace_id, r.tail, r.max_tokens)  # noqa: E731
    union = sorted(key(r) for part in parts for r in part)
    assert union == sorted(key(r) for r in whole)
    assert len(set(union)) == len(union) and all(parts)


def test_records_without_trace_ids_in_one_tick_spread_over_the_shards(tmp_path: Path) -> None:
    # Imported or hand-made traces may have no trace ids; a coarse clock stamps many
    # requests alike. Shards must still split them, not send a whole tick from one.
    t0 = 1_700_000_000 * 10**9
    maps = [{"start_ns": t0 + (i // 30) * 3 * 10**9, "input_tokens": 100, "output_tokens": 5}
            for i in range(600)]  # fmt: skip
    archive = write_plain(tmp_path / "ticks.msgpack", maps)
    sizes = [len(_dry(tmp_path, archive, "--shard", f"{i}/3", name=f"s{i}")) for i in range(3)]
    assert sum(sizes) == 600 and min(sizes) > 150, sizes
    whole = _dry(tmp_path, archive, "--amplify", "1.5x", name="amplified")
    assert 800 < len(whole) < 1000  # half the records drew a copy, not all or none of a tick


def test_window_and_limit(tmp_path: Path) -> None:
    archive, maps = _archive(tmp_path)
    got = _dry(tmp_path, archive, "--from", "+5s", "--limit", "50")
    after = [m for m in maps if m["start_ns"] >= T0 + 5 * 10**9 + (maps[0]["start_ns"] - T0)]
    assert [r.orig_trace_id for r in got] == [m["trace_id"] for m in after[:50]]


@pytest.mark.parametrize(
    ("text", "speed"),
    [
        ("2x", Speed(2, 2)),
        ("200%", Speed(2, 2)),
        ("0.5x", Speed(0.5, 0.5)),
        ("1.5", Speed(1.5, 1.5)),
        ("1x..4x", Speed(1, 4)),
        ("50%..2x", Speed(0.5, 2)),
    ],
)
def test_parse_speed(text: str, speed: Speed) -> None:
    assert parse_speed(text) == speed


@pytest.mark.parametrize("text", ["fast", "0x", "-2x", "2x..", "x", "2xx"])
def test_parse_speed_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="invalid --speed"):
        parse_speed(text)


def test_a_ramp_plays_the_recording_at_the_speed_it_has_reached() -> None:
    s, span = Speed(1, 4), 100.0
    length = 2 * span / (1 + 4)  # the mean factor is 2.5: 100 s recorded take 40 s
    assert s.replay_offset(0.0, span) == 0.0
    assert s.replay_offset(span, span) == pytest.approx(length)
    for t in np.linspace(1, 99, 25):
        tau = s.replay_offset(t, span)
        # Recorded time advances at f(τ) = 1 + 3·τ/length per second of replay.
        step = 1e-4
        rate = step / (s.replay_offset(t + step, span) - tau)
        assert rate == pytest.approx(1 + 3 * tau / length, rel=1e-3)


def _steady(tmp_path: Path, rate: float, seconds: float) -> tuple[Path, np.ndarray]:
    offsets = np.arange(0, seconds, 1 / rate)
    maps = [{"start_ns": T0 + round(t * 1e9), "trace_id": i.to_bytes(16, "big"),
             "input_tokens": 100, "output_tokens": 5} for i, t in enumerate(offsets)]  # fmt: skip
    return write_plain(tmp_path / "steady.msgpack", maps), offsets


def test_steps_replay_each_step_at_its_factor_and_name_the_phase(tmp_path: Path) -> None:
    archive, _ = _steady(tmp_path, rate=10, seconds=600)  # 6,000 requests
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--speed", "1x,2x,3x@1m", "--out",
                                      str(tmp_path / "d.msgpack"), str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    got = list(ArchiveReader([tmp_path / "d.msgpack"], order="file"))
    due = np.array([r.intended_ns - T0 for r in got]) / 1e9
    phases = np.array([r.phase for r in got])
    # 60 s of replay at each factor, the last until the recording ends:
    # 600 at 1x, 1,200 at 2x, the remaining 4,200 at 3x (1,400 s / 3 of replay).
    assert (phases == "step 1 1x").sum() == 600 and (phases == "step 2 2x").sum() == 1200
    assert (phases == "step 3 3x").sum() == 4200
    assert due[599] < 60 <= due[600] and due[1799] < 120 <= due[1800]
    assert due[-1] == pytest.approx(120 + (599.9 - 180) / 3)
    for phase, rate in (("step 1 1x", 10), ("step 2 2x", 20), ("step 3 3x", 30)):
        gaps = np.diff(due[phases == phase])
        assert gaps == pytest.approx(np.full(gaps.size, 1 / rate))
        shown = re.search(rf"phase {phase}: [\d,]+ requests in [\d.]+ s, ([\d.]+) req/s",
                          result.output)  # fmt: skip
        assert shown and float(shown[1]) == pytest.approx(rate, rel=0.01)
    header = read_header(tmp_path / "d.msgpack")
    assert header["speed_mean"] == pytest.approx(599.9 / due[-1])


def test_pulses_burst_at_their_factor_every_period(tmp_path: Path) -> None:
    archive, _ = _steady(tmp_path, rate=10, seconds=600)
    got = _dry(tmp_path, archive, "--speed", "1x+10x:5s/60s")
    due = np.array([r.intended_ns - T0 for r in got]) / 1e9
    pulse = np.array([r.phase == "pulse" for r in got])
    assert set(r.phase for r in got) == {"base", "pulse"}
    assert np.all((due[pulse] % 60) >= 55) and np.all((due[~pulse] % 60) < 55)
    # Each 60 s period replays 55 s at 1x and 50 s of recording in its 5 s pulse.
    in_first = (due >= 55) & (due < 60)
    assert in_first.sum() == 500
    assert len(got) == 6000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1x,2x", "steps need a length"),
        ("1x,2x@0s", "durations must be positive"),
        ("1x,0x@1m", "the factor must be positive"),
        ("1x+10x:60s/60s", "shorter than its period"),
        ("1x+10x:5q/60s", "is not a duration"),
        (",".join(["1x"] * 101) + "@1m", "at most 100 steps"),
    ],
)
def test_bad_shapes_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_speed(text)


def test_out_may_not_overwrite_an_input(tmp_path: Path) -> None:
    archive, _ = _archive(tmp_path, n=20)
    before = archive.read_bytes()
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--out", str(archive), str(archive)])
    assert result.exit_code == 2 and "also an input" in result.output
    assert archive.read_bytes() == before


def test_prompt_correction_converges_and_is_bounded() -> None:
    from tailreplay.replayer.prompts import PromptMaker

    p = PromptMaker()
    # A target whose tokenizer counts 10% more: prompts shrink to match.
    for _ in range(200):
        content = p.content_tokens(1000)
        p.observe(p.rendered_tokens(content), round(1.1 * p.rendered_tokens(content)))
    assert abs(1.1 * p.rendered_tokens(p.content_tokens(1000)) - 1000) <= 2
    # A mock that reports the same usage whatever it gets must not blow prompts up.
    q = PromptMaker()
    for _ in range(500):
        q.observe(q.rendered_tokens(q.content_tokens(16)), 14)
    assert q.content_tokens(16) <= 32


def _append(path: Path, maps: list[dict]) -> None:
    with open(path, "ab") as f:
        for m in maps:
            f.write(msgpack.packb(m))


def test_a_capture_still_being_written_replays_as_it_was_first_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy appends records while the replay reads the file: between the plan's
    loads and between the plan and the schedule. Every read stops at what the plan's
    first load counted, so the tail, the counts and the requests sent agree."""
    path, maps = _archive(tmp_path, n=200)
    (tmp_path / "late").mkdir()
    late = _archive(tmp_path / "late", n=40, seed=8)[1]
    for m in late:  # long and early: they would move the tail and the first start
        m["duration_ns"], m["start_ns"] = 10**11, m["start_ns"] - 10**9
    loads = []
    load = schedule_module.load_columns

    def load_then_append(*args: object, **kw: object):
        cols = load(*args, **kw)
        loads.append(cols.n)
        if len(loads) == 1:
            _append(path, late[:20])  # written while the plan reads the token columns
        return cols

    monkeypatch.setattr(schedule_module, "load_columns", load_then_append)
    config = ScheduleConfig(paths=[path], speed=Speed(1.0, 1.0), drop_retries=True)
    the_plan = plan(config)
    assert loads[0] == 200 and set(loads) == {200} and len(loads) >= 3
    assert the_plan.count == 200 and the_plan.per_file == (200,)
    _append(path, late[20:])  # and more before the schedule reads it
    planned = list(schedule(config, the_plan))
    assert len(planned) == 200
    assert {p.record.trace_id for p in planned} == {m["trace_id"] for m in maps}
    assert sum(p.tail for p in planned) == the_plan.tail_count
    # Another process planning with this plan's counts (a worker) plans the same set;
    # a fresh plan sees the whole file as it is now.
    monkeypatch.setattr(schedule_module, "load_columns", load)
    again = plan(replace(config, per_file=the_plan.per_file))
    assert again == the_plan
    assert plan(config).count == 240


def test_a_file_rotated_or_truncated_while_read_is_one_line_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that holds fewer records than the plan's first read counted (truncated,
    or replaced by a shorter one as a rotation does) cannot be the set the plan
    describes: the plan's later loads and the schedule's pass both refuse it."""
    path, maps = _archive(tmp_path, n=300)
    short = write_plain(tmp_path / "short.msgpack", maps[:40])
    load = schedule_module.load_columns

    def load_then_rotate(*args: object, **kw: object):
        cols = load(*args, **kw)
        if cols.n == 300:  # the first read: the rotation lands right after it
            (tmp_path / "copy.msgpack").write_bytes(short.read_bytes())
            os.replace(tmp_path / "copy.msgpack", path)
        return cols

    monkeypatch.setattr(schedule_module, "load_columns", load_then_rotate)
    out = tmp_path / "o.msgpack"
    result = CliRunner().invoke(
        cli, ["replay", "--dry-run", "--limit", "100", "--out", str(out), str(path)]
    )
    assert result.exit_code == 3, result.output
    assert result.stderr.strip() == (
        f"Error: {path}: changed while being read (300 records at the first read, 40 now); "
        "replay a copy that nothing rewrites"
    )
    monkeypatch.setattr(schedule_module, "load_columns", load)
    config = ScheduleConfig(paths=[short], speed=Speed(1.0, 1.0))
    the_plan = plan(config)
    short.write_bytes(short.read_bytes()[:200])  # truncated after the plan
    with pytest.raises(ArchiveError, match=r"changed while being read \(40 records"):
        list(schedule(config, the_plan))


def test_a_record_out_of_start_order_inside_to_is_still_sent(tmp_path: Path) -> None:
    """An archive that says it is in start order but holds one record written late: with
    --to, the pass reads on past --to until it has every record the plan counted."""
    maps = [
        dict(m, start_ns=T0 + 10**9 + i * 10**7) for i, m in enumerate(_archive(tmp_path)[1][:100])
    ]
    late = dict(maps[0], start_ns=T0 + 5 * 10**8, trace_id=b"L" * 16)
    path = write_plain(tmp_path / "o.msgpack", [*maps, late], {**HEADER, "ordered": True})
    config = ScheduleConfig(paths=[path], speed=Speed(1.0, 1.0), end_ns=T0 + 12 * 10**8)
    the_plan = plan(config)
    sent = list(schedule(config, the_plan))
    assert the_plan.count == len(sent) == 21
    assert b"L" * 16 in {p.record.trace_id for p in sent}
