"""Where evaluate keeps each result, so that trying a decoding setting never replaces the
saved one: `eval/<split>.json` (and `.hyp`) is the result of the model dir's saved decoding
settings (settings.json); a run with other settings (`--override_saved --beam_size 2`)
writes `eval/<split>.beam_size2.json` beside it, named by the settings that differ; and
`eval/index.json` lists every result with its settings and scores."""

import pathlib

from pipelines.model_dir.files import read_json, write_json_atomic
from pipelines.model_dir.layout import EVAL_DIR

INDEX_FILE = "index.json"


def result_name(split: str, decoding: dict, saved: dict | None) -> str:
    """`split` for the saved settings (or when none are saved), else `split` and the
    settings that differ from them: `test.alpha0.3.beam_size8`."""
    changed = sorted(k for k, v in decoding.items() if saved and k in saved and saved[k] != v)
    return ".".join([split, *(f"{k}{decoding[k]}" for k in changed)])


def update_index(model_dir, name: str, info: dict) -> pathlib.Path:
    """Adds or replaces result `name` in eval/index.json (atomically); returns its path."""
    path = pathlib.Path(model_dir) / EVAL_DIR / INDEX_FILE
    index = read_json(path, {})
    index[name] = {"file": f"{name}.json", **info}
    write_json_atomic(path, index)
    return path
