"""The package version, separate from the archive format version (traces.archive)."""

__version__ = "0.1.0"
