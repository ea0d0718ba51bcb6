"""Demo input until the importers land (issue 6): the Azure 2023 conversation trace
written as a rotating capture, the way the proxy will write one.

Usage: python scripts/demo_capture.py CSV OUT_DIR
"""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from pathlib import Path

from tailreplay.traces.format import make_header
from tailreplay.traces.record import Record
from tailreplay.traces.writer import ArchiveWriter


def main(csv_path: str, out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = make_header("import:azure", upstream="azure-llm-trace-2023-conv", ordered=True)
    writer = ArchiveWriter(
        directory=out, prefix="azure", header=header, rotate_bytes=256 << 10, block_when_full=True
    )
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            # 7 fractional digits, no zone (SOURCES.md): keep all of them, as UTC.
            whole, frac = row["TIMESTAMP"].split(".")
            seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
            writer.append(
                Record(
                    start_ns=seconds * 10**9 + int(frac.ljust(9, "0")[:9]),
                    method="POST",
                    path="/v1/chat/completions",
                    stream=True,
                    input_tokens=int(row["ContextTokens"]),
                    output_tokens=int(row["GeneratedTokens"]),
                )
            )
    writer.close()
    print(f"wrote {writer.stats.written:,} records into {len(writer.paths)} files in {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
