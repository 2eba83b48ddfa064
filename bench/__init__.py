"""Benchmarks behind BENCHMARKS.md, each run from the repository root as a module: `python -m bench.glue`."""
