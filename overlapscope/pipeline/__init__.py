"""Orchestration, above ingest and analysis: the one pipeline from a RUN argument to an `Analysis`.

`run.analyze_run(path, RunOptions(...))` is what every command, the pytest plugin and the Python
API call; `options.RunOptions` declares every read and analysis option once. The Parquet cache
(`cache`), the process pool (`pool`) and the Dask map/reduce (`distributed`) live here, so the
readers only read and the analyzers only compute. Kept free of imports: `overlapscope --help`
loads `pipeline.options` alone.
"""
