"""The command line: the fronts `pipelines/run.py` and `export/run.py` of `cli.main`."""
