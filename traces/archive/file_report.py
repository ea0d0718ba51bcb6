"""What reading one archive file found: its header, its records, and its damage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["Damage", "FileReport"]

Damage = tuple[int, str]  # (absolute byte offset, what is wrong there)


class FileReport:
    """What reading one file found: its header and any damage."""

    __slots__ = (
        "checked",
        "compressed",
        "empty",
        "first_compressed_skip",
        "first_skip",
        "growing",
        "header",
        "header_damage",
        "header_problems",
        "lost_records",
        "path",
        "records",
        "skipped_bytes",
        "skipped_compressed",
        "skipped_records",
        "skipped_regions",
        "torn_at",
        "unchecked_at",
    )

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: dict[str, Any] = {}
        self.header_problems: list[str] = []
        self.header_damage: str | None = None
        """The header failed its checksum (or holds a key twice), read with --skip-corrupt."""
        self.checked = False
        self.compressed = False
        """The file is a zstd stream."""
        """The file carries checksums (format version 2): every batch was checked."""
        self.empty = False
        """The file holds no bytes (or only zero bytes): no header, no records."""
        self.records = 0
        self.torn_at: int | None = None
        self.growing = False
        """The torn tail is a record still being written: the file has grown past it."""
        self.skipped_bytes = 0
        self.skipped_regions = 0
        self.skipped_records = 0
        self.first_skip: Damage | None = None
        self.skipped_compressed = 0
        """Places where damaged zstd data was skipped up to the next frame."""
        self.first_compressed_skip: Damage | None = None
        self.lost_records = 0
        """Records in the checked batches skipped for failing their checksum."""
        self.unchecked_at: int | None = None
        """Where a torn tail's last batch begins: its records were read unchecked."""

    @property
    def integrity(self) -> str:
        """What the file carries to find damage with, in one line."""
        version = self.header.get("version")
        if self.checked:
            return f"format version {version}: every batch carries a checksum"
        return (
            f"format version {version}: no checksums, so damage can go unnoticed "
            f"(`tailreplay traces upgrade {self.path} -o NEW` adds them)"
        )

    def warnings(self) -> list[str]:
        """One human line per problem met so far."""
        lines = []
        if self.empty:
            lines.append(f"{self.path}: empty file skipped (no header, no records)")
        if self.header_damage is not None:
            lines.append(
                f"{self.path}: damaged header ({self.header_damage}); its fields were read "
                "as they are"
            )
        if self.header_problems:
            lines.append(
                f"{self.path}: ignored damaged header fields: {'; '.join(self.header_problems)}"
            )
        if self.torn_at is not None and self.growing:
            lines.append(
                f"{self.path}: still being written: {self.records} complete records read; "
                f"the record at byte offset {self.torn_at} was not whole yet"
            )
        elif self.torn_at is not None:
            lines.append(
                f"{self.path}: torn final record at byte offset {self.torn_at} ignored "
                f"(the writer was interrupted); {self.records} complete records read"
            )
        if self.unchecked_at is not None:
            lines.append(
                f"{self.path}: the last batch (records from byte offset {self.unchecked_at}) "
                "was cut short, so its records were read without their checksum"
            )
        if self.skipped_records and self.first_skip is not None:
            at, why = self.first_skip
            lines.append(
                f"{self.path}: skipped {self.skipped_records} damaged record(s) "
                f"(the first at byte offset {at}: {why})"
            )
        if self.skipped_compressed and self.first_compressed_skip is not None:
            at, why = self.first_compressed_skip
            data, unit = "data", "checked batch"
            if self.compressed:
                data, unit = "compressed data", "zstd frame"
            lost = f", {self.lost_records:,} records known lost" if self.lost_records else ""
            lines.append(
                f"{self.path}: skipped damaged {data} at {self.skipped_compressed} place(s), "
                f"each up to the next {unit}{lost} (the first at byte offset {at}: {why})"
            )
        if self.skipped_bytes:
            lines.append(
                f"{self.path}: skipped {self.skipped_bytes} corrupt bytes in "
                f"{self.skipped_regions} region(s)"
            )
        return lines
