"""GrowingColumn: a column appended to chunk by chunk holds what the chunks' selected
values joined hold, however it grew."""

from __future__ import annotations

import numpy as np
import pytest

from tailreplay.report.column_memory import GrowingColumn, joined
from tailreplay.report.request_keys import KEY


@pytest.mark.parametrize("expected", [0, 10, 100_000])
@pytest.mark.parametrize("dtype", [np.int64, np.bool_, KEY])
def test_a_grown_column_holds_every_chunk(expected: int, dtype: np.dtype) -> None:
    rng = np.random.default_rng(1)
    columns, pieces = [], []
    for part in range(3):
        column = GrowingColumn(dtype)
        for _ in range(part * 5):
            raw = rng.integers(0, 256, size=(rng.integers(0, 3000), np.dtype(dtype).itemsize))
            values = raw.astype(np.uint8).view(dtype).reshape(-1)
            rows = np.flatnonzero(rng.random(values.size) < 0.7)
            column.append(values, rows, expected)
            pieces.append(values[rows])
        columns.append(column)
    whole = joined(columns, dtype)
    assert whole.dtype == np.dtype(dtype)
    assert whole.tobytes() == np.concatenate([np.zeros(0, dtype), *pieces]).tobytes()
