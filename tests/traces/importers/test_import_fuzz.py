"""Fuzzing the importers: real files and fixtures, mutated (``import_mutations.py``).

Properties, for every format and every input drawn: no traceback; exit 0, or 3
with exactly one ``Error:`` line and no output file left; no import past 20 s;
and an import that succeeds writes an archive that reads back whole, holding as
many records as it said. The same with ``--strict``, whose only difference is
that the first skipped row is the error.

``make test`` runs a short budget (25 inputs a format); ``make fuzz`` sets
TAILREPLAY_FUZZ_EXAMPLES (2,800), of which this test runs a third a format.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.importers import text_input
from tests.helpers import deadline, one_verdict
from tests.import_mutations import FORMATS, hostile_inputs, seeds

EXAMPLES = int(os.environ.get("TAILREPLAY_FUZZ_EXAMPLES", "0")) or None
DEADLINE_S = 20
FUZZ = settings(
    max_examples=EXAMPLES // 3 if EXAMPLES else 25,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


def _import(fmt: str, src: Path, out: Path, *strict: str) -> Result:
    out.unlink(missing_ok=True)
    with deadline(DEADLINE_S, f"import {fmt}"):
        result = CliRunner().invoke(
            cli, ["traces", "import", fmt, str(src), "-o", str(out), *strict]
        )
    what = f"{fmt} {strict}: {result.output[-3000:]}"
    if one_verdict(result, what) is not None:
        assert not out.exists(), f"{what}: an output left behind"
    else:
        said = re.search(r"imported ([\d,]+) records", result.stderr)
        assert said is not None, what
        assert len(list(ArchiveReader([out], order="file"))) == int(said[1].replace(",", ""))
    return result


@pytest.fixture(autouse=True)
def _short_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines over 64 KiB count as over-long, so that a mutation reaches the bound cheaply."""
    monkeypatch.setattr(text_input, "MAX_LINE_BYTES", 64 << 10)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_seed_imports_cleanly(tmp_path: Path, fmt: str) -> None:
    for i, data in enumerate(seeds(fmt)):
        src = tmp_path / f"seed{i}"
        src.write_bytes(data)
        result = _import(fmt, src, tmp_path / "out.msgpack", "--strict")
        assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_a_hostile_input_is_imported_or_refused_in_one_line(
    tmp_path: Path, fmt: str, data: st.DataObject
) -> None:
    src, out = tmp_path / "in", tmp_path / "out.msgpack"
    src.write_bytes(data.draw(hostile_inputs(fmt), label="input"))
    lenient = _import(fmt, src, out)
    strict = _import(fmt, src, out, "--strict")
    if "warning:" not in lenient.stderr:  # nothing skipped: --strict changes nothing
        assert strict.exit_code == lenient.exit_code, (lenient.stderr, strict.stderr)
