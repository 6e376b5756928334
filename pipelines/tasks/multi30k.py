"""Multi30k task 1 (Elliott et al. 2016) English->German: local files or a checked download."""

import dataclasses
import gzip
import os
import pathlib
import shutil
import types

from keras_transformer.atomic_files import atomic_files
from pipelines import Log
from pipelines.errors import DataError
from pipelines.model_dir.files import count_lines
from pipelines.tasks.base import Task, check_split
from pipelines.tasks.downloads import PROBE_TIMEOUT_S, download_verified, unreachable

MULTI30K_URL = ("https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/"
                "data/task1/raw/{name}.gz")
MULTI30K_SHA256 = types.MappingProxyType({
    "train.en": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Multi30kTask(Task):
    """Multi30k task 1, raw cased text: ``<name>.<lang>[.gz]`` looked up in ``data_dir/multi30k``,
    ``data_dir`` and ``<work_dir>/downloads/multi30k``, else downloaded and sha256-checked."""

    data_dir: str | None = None
    file_names: tuple[tuple[str, str], ...] = (
        ("train", "train"), ("dev", "val"), ("test", "test_2016_flickr"))
    expected_sizes: tuple[tuple[str, int], ...] = (
        ("train", 29_000), ("dev", 1_014), ("test", 1_000))
    probe_timeout: float = PROBE_TIMEOUT_S

    def split_files(self, split, work_dir, *, log=print):
        check_split(split)
        stem = dict(self.file_names)[split]
        paths = tuple(self._plain_file(f"{stem}.{lang}", pathlib.Path(work_dir), log)
                      for lang in (self.source_lang, self.target_lang))
        expected = dict(self.expected_sizes)[split]
        for path in paths:
            if (n := count_lines(path)) != expected:
                raise DataError(
                    f"{path} has {n:,} lines, Multi30k {stem} has {expected:,}. The file is "
                    "truncated or not the raw task-1 file; delete it so it is fetched again.")
        return paths

    def search_dirs(self, work_dir: pathlib.Path) -> list[pathlib.Path]:
        """Directories searched for the corpus files, in order."""
        root = pathlib.Path(self.data_dir).expanduser() if self.data_dir else None
        return ([root / "multi30k", root] if root else []) + [work_dir / "downloads" / "multi30k"]

    def _plain_file(self, name: str, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        for directory in self.search_dirs(work_dir):
            if (directory / name).is_file():
                return directory / name
            if (directory / f"{name}.gz").is_file():
                return self._decompress(directory / f"{name}.gz", work_dir, log)
        return self._decompress(self._download(name, work_dir, log), work_dir, log)

    def _decompress(self, gz: pathlib.Path, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        out = self.data_dir_for(work_dir) / gz.name[: -len(".gz")]
        if out.is_file() and out.stat().st_mtime_ns >= gz.stat().st_mtime_ns:
            return out
        try:
            with atomic_files(out) as (tmp,), gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except (OSError, EOFError) as e:
            raise DataError(f"{gz}: cannot decompress ({e}); delete it so it is fetched "
                            "again") from e
        log(f"{self.name}: decompressed {gz} -> {out}")
        return out

    def _download(self, name: str, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        """Download ``name``.gz into the work_dir cache, check sha256; fail fast when offline."""
        url = MULTI30K_URL.format(name=name)
        where = (f"{pathlib.Path(self.data_dir).expanduser() / 'multi30k'}" if self.data_dir
                 else "DIR/multi30k/ and pass --data_dir DIR (or set KT_DATA_DIR=DIR)")
        failures = unreachable([url], self.probe_timeout)
        if failures:
            reason = "; ".join(f"{h}: {r}" for h, r in failures.items())
            raise DataError(f"{self.name}: {name} not found in "
                            f"{', '.join(map(str, self.search_dirs(work_dir)))} and the download "
                            f"host is unreachable ({reason}). Download {url} (and the other "
                            f"Multi30k task-1 raw files) and put {name}.gz or {name} in {where}.")
        log(f"{self.name}: downloading {url}")
        target = work_dir / "downloads" / "multi30k" / f"{name}.gz"
        return download_verified(url, target, MULTI30K_SHA256[name], where)


def multi30k_ende(data_dir: str | None = None, **options) -> Multi30kTask:
    """Multi30k task 1 English->German: small, for quick end-to-end runs."""
    return Multi30kTask(
        name="multi30k_ende", source_lang="en", target_lang="de", vocab_size=8_000,
        max_source_length=128, max_target_length=128, preset="multi30k_small",
        # The default job's CPU recipe, chosen on dev (docs/results.md).
        recipe={"train_steps": 1000, "batch_tokens": 2048, "warmup_steps": 400, "lr_scale": 0.7,
                "pack": True, "checkpoint_every": 100, "average_last": 3, "choose_on_dev": True},
        data_dir=data_dir or os.environ.get("KT_DATA_DIR") or None, **options)
