"""WMT 2014 via TensorFlow Datasets (Section 5.1): dev newstest2013, test newstest2014 (3,003)."""

import dataclasses
import pathlib

from keras_transformer.atomic_files import atomic_files
from pipelines import Log
from pipelines.errors import DataError
from pipelines.tasks.base import Task, check_split
from pipelines.tasks.downloads import PROBE_TIMEOUT_S, unreachable


@dataclasses.dataclass(frozen=True, kw_only=True)
class TfdsTranslationTask(Task):
    """A TensorFlow Datasets translation builder, read as ``source_lang -> target_lang``; hosts
    are probed before preparing, so an offline machine gets a quick ``DataError``."""

    builder_name: str
    config: str
    split_names: tuple[tuple[str, str], ...] = (
        ("train", "train"), ("dev", "validation"), ("test", "test"))
    split_descriptions: tuple[tuple[str, str], ...] = ()
    expected_sizes: tuple[tuple[str, int], ...] = ()
    data_dir: str | None = None
    manual_dir: str | None = None
    probe_timeout: float = PROBE_TIMEOUT_S

    @property
    def tfds_name(self) -> str:
        return f"{self.builder_name}/{self.config}"

    def tfds_split(self, split: str) -> str:
        """The tfds split name behind one of ``SPLITS``."""
        check_split(split)
        return dict(self.split_names)[split]

    def split_files(self, split, work_dir, *, log=print):
        check_split(split)
        src, tgt = (self.data_dir_for(work_dir) / f"{split}.{lang}"
                    for lang in (self.source_lang, self.target_lang))
        if not (src.is_file() and tgt.is_file()):
            self._write_split(self.prepared_builder(log=log), split, src, tgt, log)
        return src, tgt

    def builder(self):
        """The tfds builder (not prepared): cheap, offline."""
        import tensorflow_datasets as tfds

        return tfds.builder(self.tfds_name, data_dir=self.data_dir)

    def resolved_manual_dir(self, builder) -> pathlib.Path:
        """``manual_dir`` or tfds's default ``<data_dir>/downloads/manual``."""
        if self.manual_dir:
            return pathlib.Path(self.manual_dir).expanduser()
        # builder.data_dir is <root>/<builder>/<config>/<version>
        return pathlib.Path(builder.data_dir).parents[2] / "downloads" / "manual"

    def required_downloads(self, builder) -> list[tuple[str, str | None]]:
        """``(url, file name tfds looks for in manual_dir or None)`` for every raw file needed."""
        from tensorflow_datasets.translate import wmt

        source = builder.builder_config.language_pair[0]
        try:
            infos = builder.url_infos or {}
        except ModuleNotFoundError as e:  # tfds imports it lazily and does not declare it
            raise DataError(f"{self.name}: tensorflow-datasets needs the missing module {e.name!r} "
                            f"to download {self.tfds_name}; run `pip install {e.name}`.") from e
        datasets = [wmt.DATASET_MAP[subset]
                    for subsets in builder.subsets.values() for subset in subsets]
        # In order, once each; tfds itself explains manual-only corpora.
        urls = dict.fromkeys(u for ds in datasets if not ds.get_manual_dl_files(source)
                             for u in ds.get_url(source))
        return [(u, infos[u].filename if u in infos else None) for u in urls]

    def prepared_builder(self, *, log: Log = print):
        """The tfds builder, prepared first if needed; DataError if a needed host is down."""
        import tensorflow_datasets as tfds

        builder = self.builder()
        if builder.is_prepared():
            return builder
        manual_dir = self.resolved_manual_dir(builder)
        missing = [(url, fname) for url, fname in self.required_downloads(builder)
                   if not (fname and (manual_dir / fname).is_file())]
        failures = unreachable([u for u, _ in missing], self.probe_timeout) if missing else {}
        if failures:
            raise DataError(self._offline_message(builder, manual_dir, missing, failures))
        log(f"{self.name}: preparing tfds {self.tfds_name} in {builder.data_dir} "
            f"(manual_dir {manual_dir}); this downloads and converts the raw corpus once")
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
        return builder

    def _offline_message(self, builder, manual_dir, missing, failures) -> str:
        hosts = "; ".join(f"{h}: {r}" for h, r in failures.items())
        lines = [f"{self.name}: tfds dataset {self.tfds_name} is not prepared in "
                 f"{builder.data_dir}, and download hosts are unreachable ({hosts}). "
                 "This machine looks offline. Do one of:",
                 f"  1. download these files and put them, under these names, in {manual_dir} "
                 "(choose another directory with --manual_dir), then rerun:"]
        lines += [f"       {url}  ->  {manual_dir / fname}" if fname else
                  f"       {url}  (no checksum registered in tfds: only a networked tfds "
                  "download can fetch it; use option 2)" for url, fname in missing]
        lines += [
            "  2. on a machine with network run `python -c \"import tensorflow_datasets as "
            f"tfds; tfds.builder('{self.tfds_name}', data_dir='DIR').download_and_prepare()\"`, "
            f"copy DIR/{self.builder_name} to "
            f"{pathlib.Path(builder.data_dir).parents[2]}/ and rerun (or pass --data_dir DIR);",
            "  3. or use --task text with your own parallel files (--train_src, --train_tgt, ...)."]
        return "\n".join(lines)

    def _write_split(self, builder, split, src: pathlib.Path, tgt: pathlib.Path, log: Log):
        """Write one tfds split as two aligned text files (temp names, then rename)."""
        tfds_split = self.tfds_split(split)
        what = dict(self.split_descriptions).get(split, tfds_split)
        ds = builder.as_dataset(split=tfds_split).batch(4096)
        count, next_report = 0, 200_000
        with atomic_files(src, tgt) as (tmp_src, tmp_tgt):
            with open(tmp_src, "wb") as fs, open(tmp_tgt, "wb") as ft:
                for batch in ds.as_numpy_iterator():
                    for s, t in zip(batch[self.source_lang], batch[self.target_lang]):
                        fs.write(_one_line(s) + b"\n")
                        ft.write(_one_line(t) + b"\n")
                    count += len(batch[self.source_lang])
                    if count >= next_report:
                        log(f"{self.name}: wrote {count:,} {split} pairs ({what})")
                        next_report += 200_000
            expected = dict(self.expected_sizes).get(split)
            if expected is not None and count != expected:
                raise DataError(
                    f"{self.name}: tfds {self.tfds_name} split {tfds_split} ({what}) has "
                    f"{count:,} pairs, expected {expected:,}. The prepared dataset in "
                    f"{builder.data_dir} is not the standard one; delete it and prepare again.")
        log(f"{self.name}: {split} ({what}): {count:,} pairs -> {src}, {tgt}")


def _one_line(text: bytes) -> bytes:
    """Keep one sentence on one line whatever the corpus contains."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


def _wmt14(target: str, vocab_size: int, **options) -> TfdsTranslationTask:
    return TfdsTranslationTask(
        name=f"wmt14_en{target}", source_lang="en", target_lang=target, vocab_size=vocab_size,
        max_source_length=256, max_target_length=256, preset="base", config=f"{target}-en",
        builder_name="wmt14_translate", expected_sizes=(("test", 3_003),), split_descriptions=(
            ("train", "WMT14 training data"), ("dev", "newstest2013"), ("test", "newstest2014")),
        **options)


def wmt14_ende(data_dir: str | None = None, manual_dir: str | None = None,
               **options) -> TfdsTranslationTask:
    """WMT 2014 English->German (Section 5.1: 4.5M pairs, 37,000 shared BPE tokens)."""
    return _wmt14("de", 37_000, data_dir=data_dir, manual_dir=manual_dir, **options)


def wmt14_enfr(data_dir: str | None = None, manual_dir: str | None = None,
               **options) -> TfdsTranslationTask:
    """WMT 2014 English->French (Section 5.1: 36M pairs, 32,000 word-pieces; big: dropout 0.1)."""
    return _wmt14("fr", 32_000, data_dir=data_dir, manual_dir=manual_dir,
                  **{"preset_overrides": {"big": {"dropout": 0.1}}, **options})
