"""Bad twin inputs (a profile file, simulator flags, calibration results) are one line
and their exit code: never a traceback, a hang, or a count read twice."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.cli.sim import builtin_sim
from tailreplay.errors import InputError, UsageError
from tailreplay.sim.profiles import PROFILES, load_profile
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.record import record_to_map
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import write_plain
from tests.sim.test_sim_calibrate import OFFLINE_KNOWN, _engine_timeline, _timeline_archive


def _profile_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.json"
    path.write_text(text)
    return path


def _with(**changes: object) -> str:
    return json.dumps(asdict(PROFILES["fast"]) | changes)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # json's recursion limit: a RecursionError, no ValueError
        (_with()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        # an int no float holds: math.isfinite raised OverflowError
        (
            _with()[:-1].replace('"prefill_base_ms": 4.0', '"prefill_base_ms": 1' + "0" * 400)
            + "}",
            "prefill_base_ms",
        ),
        (_with(max_num_seqs=10**400), "max_num_seqs"),
        # values the simulator cannot run: a hang, a traceback, a 500 for every request
        (_with(max_num_seqs=0), "max_num_seqs must be at least 1"),
        (_with(max_batched_tokens=0), "max_batched_tokens must be at least 1"),
        (_with(kv_tokens=0), "kv_tokens must be at least 1"),
        (_with(output_shape=0), "output_shape must be above 0"),
        (_with(output_mean=0), "output_mean must be above 0"),
    ],
)
def test_an_unusable_profile_file_is_one_line_exit_3(tmp_path: Path, text: str, says: str) -> None:
    path = _profile_file(tmp_path, text)
    with pytest.raises(InputError, match=says):
        load_profile(path)
    done = CliRunner().invoke(cli, ["sim", "--profile", str(path), "--listen", "127.0.0.1:0"])
    assert done.exit_code == 3, done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "arg",
    [
        "--max-num-seqs=0",
        "--max-num-seqs=-1",
        "--decode-base-ms=nan",
        "--decode-base-ms=inf",
        "--kv-tokens=0",
        "--output-shape=0",
        "--max-batched-tokens=0",
    ],
)
def test_a_sim_arg_no_profile_holds_is_exit_2_before_anything_starts(arg: str) -> None:
    with pytest.raises(UsageError, match="invalid --sim-arg"):
        builtin_sim("fast", 0, [arg])
    done = CliRunner().invoke(cli, ["sim", arg, "--listen", "127.0.0.1:0"])
    assert done.exit_code == 2, done.output


def test_one_results_file_given_twice_is_refused(tmp_path: Path) -> None:
    """Read twice on one clock, every request decodes beside its copy: the batches seen
    double, max_num_seqs doubles and decode_per_seq_ms halves, silently."""
    results = _timeline_archive(tmp_path / "r.msgpack", 4, n=200)
    out = tmp_path / "p.json"
    done = CliRunner().invoke(
        cli, ["sim", "calibrate", str(results), str(tmp_path / "." / "r.msgpack"), "-o", str(out)]
    )
    assert done.exit_code == 2, done.output
    assert "given twice" in done.output and not out.exists()


def _results(path: Path, **changes: object) -> Path:
    records = _engine_timeline(np.random.default_rng(4), OFFLINE_KNOWN, cap=24, n=200)
    with ArchiveWriter(path, header=make_header("replay")) as writer:
        for i, record in enumerate(records):
            if i % 5 == 0:
                for name, value in changes.items():
                    setattr(record, name, value(record) if callable(value) else value)
            writer.append(record)
    return path


def test_streams_whose_tokens_came_after_their_last_byte_are_left_out(tmp_path: Path) -> None:
    """One absurd gap (2^62 - 1 µs) in a fifth of the streams made decode_base_ms
    14,608,900,483,311 ms, exit 0 and no warning: a twin that never answers."""
    results = _results(
        tmp_path / "r.msgpack",
        chunk_gaps_us=lambda r: [*r.chunk_gaps_us[:-1], 2**62 - 1],
    )
    out = tmp_path / "p.json"
    done = CliRunner().invoke(cli, ["sim", "calibrate", str(results), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "40 answers whose first or last token came after their last byte" in done.output
    p = load_profile(out)
    assert p.decode_base_ms == pytest.approx(20.0, rel=0.3)


def test_capacity_refuses_a_sim_arg_no_profile_holds_and_a_profile_beside_twin(
    tmp_path: Path,
) -> None:
    from tailreplay.report.slo import parse_objectives
    from tailreplay.studies.capacity import CapacityStudy, check_study

    results = _results(tmp_path / "r.msgpack")
    twin = tmp_path / "twin.json"
    assert (
        CliRunner().invoke(cli, ["sim", "calibrate", str(results), "-o", str(twin)]).exit_code == 0
    )
    slo = tuple(parse_objectives(["latency:p99<=2s"]))

    def study(*sim_args: str, with_twin: bool = True) -> CapacityStudy:
        return CapacityStudy(
            (results,),
            slo,
            sim_args=sim_args,
            twin=twin if with_twin else None,
            out_dir=tmp_path / "cap",
        )

    # --max-num-seqs=0: no request is ever served, and the first trial never ended
    for sim_args in (("--max-num-seqs=0",), ("--decode-base-ms=nan",)):
        with pytest.raises(UsageError, match="--sim-arg"):
            check_study(study(*sim_args))
        with pytest.raises(UsageError, match="--sim-arg"):
            check_study(study(*sim_args, with_twin=False))
    # the simulator takes the last --profile: the trials ran "fast", the answer named the twin
    for sim_args in (("--profile=fast",), ("--profile", "fast")):
        with pytest.raises(UsageError, match="--twin"):
            check_study(study(*sim_args))
    assert not (tmp_path / "cap").exists()


def test_a_fifo_as_the_twin_is_one_line_not_a_wait_for_a_writer(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "twin.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_profile(fifo)  # opened, it waited for a writer: capacity --twin FIFO hung


def test_a_step_cost_of_more_than_an_hour_is_no_profile(tmp_path: Path) -> None:
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({**asdict(PROFILES["fast"]), "decode_base_ms": 1e13}))
    with pytest.raises(InputError, match="decode_base_ms must be at most 3,600,000 ms"):
        load_profile(path)


def test_damaged_results_calibrate_with_skip_corrupt_as_the_error_says(tmp_path: Path) -> None:
    results, out = tmp_path / "r.msgpack", tmp_path / "p.json"
    # A plain archive (no checked batches): the damage takes a few records, not a batch.
    timeline = _engine_timeline(np.random.default_rng(4), OFFLINE_KNOWN, cap=24)
    write_plain(results, [record_to_map(r) for r in timeline])
    data = bytearray(results.read_bytes())
    middle = len(data) * 3 // 5
    data[middle : middle + 64] = b"\xc1" * 64  # 0xc1: never a msgpack byte
    results.write_bytes(bytes(data))
    done = CliRunner().invoke(cli, ["sim", "calibrate", str(results), "-o", str(out)])
    assert done.exit_code == 3 and "--skip-corrupt" in done.output, done.output
    again = ["sim", "calibrate", str(results), "-o", str(out), "--skip-corrupt"]
    done = CliRunner().invoke(cli, again)
    assert done.exit_code == 0, done.output
    assert "corrupt bytes in 1 region(s)" in done.output, done.output
    assert load_profile(out).decode_per_seq_ms == pytest.approx(0.5, rel=0.05)


def test_the_value_free_sim_flags_overrides_in_knows_are_sims_own() -> None:
    from tailreplay.declared import declarations
    from tailreplay.sim.profiles import SIM_FLAGS
    from tailreplay.sim.settings import SimArgs

    flags = {s.flags[0] for _, s in declarations(SimArgs) if s.is_flag}
    assert flags == SIM_FLAGS


def test_a_copy_of_a_results_file_counts_each_request_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    results, copy, out = tmp_path / "r.msgpack", tmp_path / "copy.msgpack", tmp_path / "p.json"
    with ArchiveWriter(results, header=make_header("replay")) as writer:
        for record in _engine_timeline(rng, OFFLINE_KNOWN, cap=24):
            record.trace_id, record.span_id = rng.bytes(16), rng.bytes(8)  # as a replay's
            writer.append(record)
    copy.write_bytes(results.read_bytes())
    done = CliRunner().invoke(cli, ["sim", "calibrate", str(results), str(copy), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "500 records repeat a request read already" in done.output
    fitted = load_profile(out)
    assert fitted.decode_per_seq_ms == pytest.approx(0.5, rel=0.02)
    assert fitted.max_num_seqs == 24
