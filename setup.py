"""Only for the optional C extension; everything else lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Optional: without a compiler the install still succeeds and load_columns
        # uses its pure-Python path (~15x slower; docs/benchmarks.md).
        Extension(
            "tailreplay.traces.archive._colscan",
            ["traces/archive/_colscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
