"""Archives shipped inside the package, so an installed tailreplay has something to replay."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from tailreplay.private import open_private

__all__ = ["SAMPLES", "write_sample"]

SAMPLES = {
    "peak": (
        "peak.msgpack",
        "the busiest 5 minutes of Azure's 2023 LLM conversation trace "
        "(2,382 requests; token counts, no latencies)",
    ),
}


def write_sample(name: str, out: Path) -> None:
    """Copy the sample ``name`` (a key of ``SAMPLES``) to ``out``."""
    source = resources.files("tailreplay.traces").joinpath(SAMPLES[name][0])
    with source.open("rb") as src, open_private(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
