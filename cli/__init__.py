"""The command line, above everything else: `pipelines/run.py` and `export/run.py` are its
two fronts (`cli.main`), their flags come from the settings table (`cli.flags`), and what
runs before TensorFlow loads is `cli.startup`."""
