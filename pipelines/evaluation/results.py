"""Where evaluate keeps each result, so that a run that scores something else never replaces a
recorded one: `eval/<split>.json` is the model dir's own; another run is named by what differs
(`result_name`), e.g. `test.ckpt-500.beam_size2.first20`. `eval/index.json` lists them all."""

import hashlib
import pathlib
from typing import Sequence

from keras_transformer.model_dir import WEIGHTS_SUFFIX
from pipelines.errors import DataError
from pipelines.model_dir.files import file_sha256, read_json, write_json_atomic
from pipelines.model_dir.layout import EVAL_DIR, EVAL_INDEX_FILE


def result_name(split: str, decoding: dict, saved: dict | None, *, sentences: int = 0,
                checkpoint: str | None = None, files: Sequence[str] = ()) -> str:
    """`split`, then what differs from the model dir's own result, in order: the `files`'
    digest, the `checkpoint`, each decoding setting that differs from `saved`, `sentences`."""
    changed = sorted(k for k, v in decoding.items() if saved and k in saved and saved[k] != v)
    return ".".join([split, *([f"files-{files_digest(files)}"] if files else []),
                     *([pathlib.Path(checkpoint).name.removesuffix(WEIGHTS_SUFFIX)]
                       if checkpoint else []),
                     *(f"{k}{decoding[k]}" for k in changed),
                     *([f"first{sentences}"] if sentences else [])])


def files_digest(paths: Sequence[str]) -> str:
    """The first 8 hex digits of the sha256 of the files' contents, in order."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            file_sha256(path, digest)
        except OSError as e:
            raise DataError(f"{path}: cannot read it ({e.strerror}); check the path") from None
        digest.update(b"\0")
    return digest.hexdigest()[:8]


def update_index(model_dir, name: str, info: dict) -> pathlib.Path:
    """Adds or replaces result `name` in eval/index.json (atomically); returns its path."""
    path = pathlib.Path(model_dir) / EVAL_DIR / EVAL_INDEX_FILE
    index = read_json(path, {})
    index[name] = {"file": f"{name}.json", **info}
    write_json_atomic(path, index)
    return path
