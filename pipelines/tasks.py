"""Task registry: which corpus, which direction, and the defaults that go with it.

A task turns a name such as ``wmt14_ende`` into plain UTF-8 parallel text files per split
("train", "dev", "test") plus its defaults (shared vocabulary size, length limits, model
preset, decoding settings). Everything downstream (vocabulary, tf.data, evaluation) only
sees those files, so a new corpus is one new ``Task`` subclass and one factory in ``TASKS``.

Tasks:

* ``wmt14_ende`` / ``wmt14_enfr``: tfds ``wmt14_translate/de-en`` / ``fr-en``, read in the
  paper's direction (English source). dev = newstest2013, test = newstest2014 (full set,
  3,003 sentences for En-De). Section 5.1.
* ``multi30k_ende``: Multi30k task 1, raw cased text (train 29,000, val 1,014,
  test_2016_flickr 1,000), from a local directory or downloaded with sha256 checks.
* ``ptb_parsing``: English constituency parsing (Section 6.3): Penn Treebank WSJ trees
  (sections 02-21 / 22 / 23 below ``data_dir``, or ``train_trees``/``dev_trees``/``test_trees``)
  as words -> linearized trees, scored with EVALB F1 (``pipelines.parsing.task``).
* ``text``: any parallel files given by path.
"""
from __future__ import annotations

import abc
import dataclasses
import gzip
import hashlib
import os
import pathlib
import queue
import shutil
import socket
import tempfile
import threading
import types
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Mapping

from pipelines.text_io import DataError, count_lines

SPLITS = ("train", "dev", "test")
PROBE_TIMEOUT_S = 3.0

Log = Callable[[str], None]


def host_reachable(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Try a TCP connection to ``host:port`` within ``timeout`` seconds (name lookup included).

    Downloaders retry name resolution for minutes when offline; this probe answers in at
    most ``timeout`` seconds so an offline run fails at once with instructions instead.
    Returns ``(reachable, reason)``.
    """

    outcome: queue.Queue = queue.Queue(maxsize=1)

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.put((True, ""))
        except OSError as e:
            outcome.put((False, str(e) or type(e).__name__))

    # A daemon thread: a name lookup stuck in the resolver must not hold up interpreter exit.
    threading.Thread(target=attempt, name=f"probe-{host}", daemon=True).start()
    try:
        return outcome.get(timeout=timeout)
    except queue.Empty:
        return False, f"no answer within {timeout:g} s"


def _unreachable(urls: list[str], timeout: float) -> dict[str, str]:
    """Map each unreachable host among ``urls`` to the reason; hosts are probed in parallel."""
    targets = sorted({_host_port(u) for u in urls})
    results: dict[tuple[str, int], tuple[bool, str]] = {}

    def probe(target: tuple[str, int]) -> None:
        results[target] = host_reachable(target[0], target[1], timeout)

    threads = [threading.Thread(target=probe, args=(t,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 1.0)
    failures = {}
    for host, port in targets:
        ok, reason = results.get((host, port), (False, f"no answer within {timeout:g} s"))
        if not ok:
            failures[host] = reason
    return failures


def _host_port(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlparse(url)
    default = 443 if parsed.scheme == "https" else 80
    return parsed.hostname or "", parsed.port or default


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def _replace_all(pairs: list[tuple[pathlib.Path, pathlib.Path]]) -> None:
    """``os.replace`` every (tmp, final) pair: the last file renamed marks completion."""
    for tmp, final in pairs:
        os.replace(tmp, final)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task(abc.ABC):
    """A translation task: language pair, defaults, and the text files of each split.

    Lengths count subword tokens including the EOS (source) or BOS (target) the pipeline adds.
    """

    name: str
    source_lang: str
    target_lang: str
    vocab_size: int
    max_source_length: int
    max_target_length: int
    preset: str
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50

    @property
    def max_length(self) -> int:
        """Longest sequence the model must embed (for the positional encoding size)."""
        return max(self.max_source_length, self.max_target_length)

    @abc.abstractmethod
    def split_files(
        self, split: str, work_dir: os.PathLike | str, *, log: Log = print
    ) -> tuple[pathlib.Path, pathlib.Path]:
        """Return ``(source_path, target_path)``: parallel UTF-8 text for ``split``.

        Files are materialized under ``work_dir`` when the corpus is not plain text already;
        a second call reuses them.
        """

    def describe(self) -> str:
        """One line for logs: name, direction and defaults."""
        return (
            f"task {self.name}: {self.source_lang}->{self.target_lang}, "
            f"vocab {self.vocab_size:,}, max length {self.max_source_length}/"
            f"{self.max_target_length}, preset {self.preset}, beam {self.beam_size}, "
            f"alpha {self.alpha}, extra length {self.extra_length}"
        )

    def data_dir_for(self, work_dir: os.PathLike | str) -> pathlib.Path:
        """Where this task materializes its text files inside ``work_dir``."""
        return pathlib.Path(work_dir) / "data" / self.name

    # Hooks for tasks whose output is not plain text (parsing); translation needs none.

    def vocab_symbols(self, train_target: pathlib.Path) -> list[str]:
        """Strings the shared vocabulary must keep as single pieces."""
        return []

    def decoding_constraint(self, spm_proto: bytes):
        """A `keras_transformer.search.DecodingConstraint` for beam search, or None."""
        return None

    def serving_input(self, sentences):
        """In-graph: the exported model's input sentences as the model expects them."""
        return sentences

    def serving_output(self, sentences, outputs):
        """In-graph: the exported model's answer from its inputs and decoded outputs."""
        return outputs


@dataclasses.dataclass(frozen=True, kw_only=True)
class TfdsTranslationTask(Task):
    """A TensorFlow Datasets translation builder, read as ``source_lang -> target_lang``.

    ``data_dir``/``manual_dir`` are passed to tfds. When the dataset is not prepared yet, the
    download hosts are probed first (``PROBE_TIMEOUT_S``) so that an offline machine gets a
    ``DataError`` with what to download and where to put it within seconds.
    """

    builder_name: str
    config: str
    split_names: tuple[tuple[str, str], ...] = (
        ("train", "train"),
        ("dev", "validation"),
        ("test", "test"),
    )
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
        _check_split(split)
        return dict(self.split_names)[split]

    def split_files(self, split, work_dir, *, log=print):
        _check_split(split)
        out = self.data_dir_for(work_dir)
        src = out / f"{split}.{self.source_lang}"
        tgt = out / f"{split}.{self.target_lang}"
        if src.is_file() and tgt.is_file():
            return src, tgt
        builder = self.prepared_builder(log=log)
        self._write_split(builder, split, src, tgt, log)
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
            raise DataError(
                f"{self.name}: tensorflow-datasets needs the missing module {e.name!r} to "
                f"download {self.tfds_name}; run `pip install {e.name}`."
            ) from e
        urls: list[str] = []
        for subsets in builder.subsets.values():
            for subset in subsets:
                ds = wmt.DATASET_MAP[subset]
                if ds.get_manual_dl_files(source):
                    continue  # tfds itself explains manual-only corpora
                urls.extend(u for u in ds.get_url(source) if u not in urls)
        return [(u, infos[u].filename if u in infos else None) for u in urls]

    def prepared_builder(self, *, log: Log = print):
        """Return the tfds builder, downloading and preparing it first if needed.

        Raises:
          DataError: not prepared, raw files not in ``manual_dir`` and a download host is
            unreachable; the message lists the files, the directory and the alternatives.
        """
        import tensorflow_datasets as tfds

        builder = self.builder()
        if builder.is_prepared():
            return builder
        manual_dir = self.resolved_manual_dir(builder)
        missing = [
            (url, fname)
            for url, fname in self.required_downloads(builder)
            if not (fname and (manual_dir / fname).is_file())
        ]
        failures = _unreachable([u for u, _ in missing], self.probe_timeout) if missing else {}
        if failures:
            raise DataError(self._offline_message(builder, manual_dir, missing, failures))
        log(
            f"{self.name}: preparing tfds {self.tfds_name} in {builder.data_dir} "
            f"(manual_dir {manual_dir}); this downloads and converts the raw corpus once"
        )
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir))
        )
        return builder

    def _offline_message(self, builder, manual_dir, missing, failures) -> str:
        hosts = "; ".join(f"{h}: {r}" for h, r in failures.items())
        lines = [
            f"{self.name}: tfds dataset {self.tfds_name} is not prepared in "
            f"{builder.data_dir}, and download hosts are unreachable ({hosts}). "
            "This machine looks offline. Do one of:",
            f"  1. download these files and put them, under these names, in {manual_dir} "
            "(choose another directory with --manual_dir), then rerun:",
        ]
        for url, fname in missing:
            if fname:
                lines.append(f"       {url}  ->  {manual_dir / fname}")
            else:
                lines.append(
                    f"       {url}  (no checksum registered in tfds: only a networked "
                    "tfds download can fetch it; use option 2)"
                )
        lines += [
            "  2. on a machine with network run `python -c \"import tensorflow_datasets as "
            f"tfds; tfds.builder('{self.tfds_name}', data_dir='DIR').download_and_prepare()\"`, "
            f"copy DIR/{self.builder_name} to "
            f"{pathlib.Path(builder.data_dir).parents[2]}/ and rerun (or pass --data_dir DIR);",
            "  3. or use --task text with your own parallel files (--train_src, --train_tgt, ...).",
        ]
        return "\n".join(lines)

    def _write_split(self, builder, split, src: pathlib.Path, tgt: pathlib.Path, log: Log):
        """Write one tfds split as two aligned text files (temp names, then rename)."""
        tfds_split = self.tfds_split(split)
        what = dict(self.split_descriptions).get(split, tfds_split)
        src.parent.mkdir(parents=True, exist_ok=True)
        ds = builder.as_dataset(split=tfds_split).batch(4096)
        tmp_src = src.with_name(src.name + ".tmp")
        tmp_tgt = tgt.with_name(tgt.name + ".tmp")
        count, next_report = 0, 200_000
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
            tmp_src.unlink()
            tmp_tgt.unlink()
            raise DataError(
                f"{self.name}: tfds {self.tfds_name} split {tfds_split} ({what}) has "
                f"{count:,} pairs, expected {expected:,}. The prepared dataset in "
                f"{builder.data_dir} is not the standard one; delete it and prepare again."
            )
        _replace_all([(tmp_src, src), (tmp_tgt, tgt)])
        log(f"{self.name}: {split} ({what}): {count:,} pairs -> {src}, {tgt}")


def _one_line(text: bytes) -> bytes:
    """Keep one sentence on one line whatever the corpus contains."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


MULTI30K_URL = (
    "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/"
    "data/task1/raw/{name}.gz"
)
MULTI30K_SHA256 = types.MappingProxyType(
    {
        "train.en": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        "train.de": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        "val.en": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        "val.de": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        "test_2016_flickr.en": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        "test_2016_flickr.de": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    }
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Multi30kTask(Task):
    """Multi30k task 1 (Elliott et al. 2016), raw cased text.

    Files are looked up as ``<name>.<lang>`` or ``<name>.<lang>.gz`` in ``data_dir/multi30k``,
    then ``data_dir``, then the download cache ``<work_dir>/downloads/multi30k``; missing
    ones are downloaded from the dataset's GitHub repository at a fixed commit and checked
    against their sha256.
    """

    data_dir: str | None = None
    file_names: tuple[tuple[str, str], ...] = (
        ("train", "train"),
        ("dev", "val"),
        ("test", "test_2016_flickr"),
    )
    expected_sizes: tuple[tuple[str, int], ...] = (
        ("train", 29_000),
        ("dev", 1_014),
        ("test", 1_000),
    )
    probe_timeout: float = PROBE_TIMEOUT_S

    def split_files(self, split, work_dir, *, log=print):
        _check_split(split)
        stem = dict(self.file_names)[split]
        paths = tuple(
            self._plain_file(f"{stem}.{lang}", pathlib.Path(work_dir), log)
            for lang in (self.source_lang, self.target_lang)
        )
        expected = dict(self.expected_sizes)[split]
        for path in paths:
            n = count_lines(path)
            if n != expected:
                raise DataError(
                    f"{path} has {n:,} lines, Multi30k {stem} has {expected:,}. The file is "
                    "truncated or not the raw task-1 file; delete it so it is fetched again."
                )
        return paths

    def search_dirs(self, work_dir: pathlib.Path) -> list[pathlib.Path]:
        """Directories searched for the corpus files, in order."""
        dirs = []
        if self.data_dir:
            root = pathlib.Path(self.data_dir).expanduser()
            dirs += [root / "multi30k", root]
        return dirs + [work_dir / "downloads" / "multi30k"]

    def _plain_file(self, name: str, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        """Path of the uncompressed file ``name``, decompressing or downloading as needed."""
        for directory in self.search_dirs(work_dir):
            if (directory / name).is_file():
                return directory / name
            if (directory / f"{name}.gz").is_file():
                return self._decompress(directory / f"{name}.gz", work_dir, log)
        gz = self._download(name, work_dir, log)
        return self._decompress(gz, work_dir, log)

    def _decompress(self, gz: pathlib.Path, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        out = self.data_dir_for(work_dir) / gz.name[: -len(".gz")]
        if out.is_file() and out.stat().st_mtime_ns >= gz.stat().st_mtime_ns:
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        try:
            with gzip.open(gz, "rb") as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, out)
        except (OSError, EOFError) as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise DataError(f"{gz}: cannot decompress ({e}); delete it so it is fetched again") from e
        log(f"{self.name}: decompressed {gz} -> {out}")
        return out

    def _download(self, name: str, work_dir: pathlib.Path, log: Log) -> pathlib.Path:
        """Download ``name``.gz into the work_dir cache, check sha256; fail fast when offline."""
        cache = work_dir / "downloads" / "multi30k"
        url = MULTI30K_URL.format(name=name)
        where = (
            f"{pathlib.Path(self.data_dir).expanduser() / 'multi30k'}"
            if self.data_dir
            else "$KT_DATA_DIR/multi30k (or --data_dir DIR/multi30k)"
        )
        failures = _unreachable([url], self.probe_timeout)
        if failures:
            reason = "; ".join(f"{h}: {r}" for h, r in failures.items())
            raise DataError(
                f"{self.name}: {name} not found in {', '.join(map(str, self.search_dirs(work_dir)))} "
                f"and the download host is unreachable ({reason}). Download {url} "
                f"(and the other Multi30k task-1 raw files) and put {name}.gz or {name} in "
                f"{where}."
            )
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / f"{name}.gz"
        log(f"{self.name}: downloading {url}")
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{target.name}.")
        try:
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=60) as response, os.fdopen(fd, "wb") as out:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != MULTI30K_SHA256[name]:
                raise DataError(
                    f"{url}: sha256 {digest.hexdigest()} differs from the expected "
                    f"{MULTI30K_SHA256[name]}; the download is corrupt or the source changed. "
                    f"Put a verified copy of {name}.gz in {where}."
                )
            os.replace(tmp, target)
        except (OSError, urllib.error.URLError) as e:
            raise DataError(f"{url}: download failed ({e}); put {name}.gz in {where}") from e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextFilesTask(Task):
    """Any parallel text files, one sentence a line, given per split by path."""

    files: tuple[tuple[str, str | None, str | None], ...] = ()

    def split_files(self, split, work_dir, *, log=print):
        _check_split(split)
        for name, src, tgt in self.files:
            if name == split and src and tgt:
                return pathlib.Path(src), pathlib.Path(tgt)
        raise DataError(
            f"task {self.name}: no files for split {split!r}; pass --{split}_src and "
            f"--{split}_tgt (one sentence a line, UTF-8, same number of lines)."
        )


def _wmt14(pair: str, source: str, target: str, vocab_size: int, sizes, **options) -> TfdsTranslationTask:
    return TfdsTranslationTask(
        name=f"wmt14_{source}{target}",
        source_lang=source,
        target_lang=target,
        vocab_size=vocab_size,
        max_source_length=256,
        max_target_length=256,
        preset="base",
        builder_name="wmt14_translate",
        config=pair,
        split_descriptions=(("train", "WMT14 training data"), ("dev", "newstest2013"),
                            ("test", "newstest2014")),
        expected_sizes=sizes,
        data_dir=options.pop("data_dir", None),
        manual_dir=options.pop("manual_dir", None),
        **options,
    )


def wmt14_ende(**options) -> TfdsTranslationTask:
    """WMT 2014 English->German (Section 5.1: 4.5M pairs, 37,000 shared BPE tokens)."""
    return _wmt14("de-en", "en", "de", 37_000, (("test", 3_003),), **options)


def wmt14_enfr(**options) -> TfdsTranslationTask:
    """WMT 2014 English->French (Section 5.1: 36M pairs, 32,000 word-pieces)."""
    return _wmt14("fr-en", "en", "fr", 32_000, (("test", 3_003),), **options)


def multi30k_ende(data_dir: str | None = None, **options) -> Multi30kTask:
    """Multi30k task 1 English->German: small, for quick end-to-end runs."""
    return Multi30kTask(
        name="multi30k_ende",
        source_lang="en",
        target_lang="de",
        vocab_size=8_000,
        max_source_length=128,
        max_target_length=128,
        preset="multi30k_small",
        data_dir=data_dir or os.environ.get("KT_DATA_DIR") or None,
        **options,
    )


def text(
    train_src: str | None = None,
    train_tgt: str | None = None,
    dev_src: str | None = None,
    dev_tgt: str | None = None,
    test_src: str | None = None,
    test_tgt: str | None = None,
    **options,
) -> TextFilesTask:
    """Parallel text files given by path (languages "src"/"tgt" unless overridden)."""
    return TextFilesTask(
        name="text",
        source_lang="src",
        target_lang="tgt",
        vocab_size=32_000,
        max_source_length=256,
        max_target_length=256,
        preset="base",
        files=(
            ("train", train_src, train_tgt),
            ("dev", dev_src, dev_tgt),
            ("test", test_src, test_tgt),
        ),
        **options,
    )


def ptb_parsing(**options) -> Task:
    """Penn Treebank WSJ constituency parsing (Section 6.3); see ``pipelines.parsing.task``.

    Imported on use: the parsing code (and nltk) is only loaded for this task, and
    ``pipelines.parsing.task`` can build on ``Task`` without a circular import.
    """
    from pipelines.parsing.task import ptb_parsing as factory

    return factory(**options)


TASKS: Mapping[str, Callable[..., Task]] = types.MappingProxyType(
    {
        "wmt14_ende": wmt14_ende,
        "wmt14_enfr": wmt14_enfr,
        "multi30k_ende": multi30k_ende,
        "ptb_parsing": ptb_parsing,
        "text": text,
    }
)

_OVERRIDABLE = frozenset(
    f.name for f in dataclasses.fields(Task) if f.name not in ("name",)
)


def get_task(name: str, **options) -> Task:
    """Build the task ``name`` with ``options``; ``None`` options are ignored.

    Options are the factory's own (``data_dir``, ``manual_dir``, ``train_src`` ...) or any
    ``Task`` field to override a default (``vocab_size``, ``max_source_length``, ``beam_size``...).
    """
    if name not in TASKS:
        raise DataError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    options = {k: v for k, v in options.items() if v is not None}
    overrides = {k: options.pop(k) for k in list(options) if k in _OVERRIDABLE}
    try:
        task = TASKS[name](**options)
    except TypeError as e:
        raise DataError(f"task {name}: unsupported option(s) {sorted(options)}: {e}") from None
    return dataclasses.replace(task, **overrides) if overrides else task
