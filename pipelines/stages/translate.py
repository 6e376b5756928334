"""The translate and score stages: a line in, a line out, by the `Translator` the export writes."""
from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import sys
from typing import TYPE_CHECKING, TextIO

from keras_transformer.data import text
from pipelines import Log
from pipelines.data import prepare, vocab as vocab_lib
from pipelines.data.progress import Progress
from pipelines.data.text_io import iter_lines
from pipelines.errors import ConfigError, DataError
from pipelines.model_dir import layout as md
from pipelines.stages import made_from
from pipelines.model_dir.files import input_identity
from pipelines.settings import describe
from pipelines.settings.options import Recipe
from pipelines.stages.export import make_translator
from pipelines.stages.partial_output import resumable

if TYPE_CHECKING:
    from keras_transformer.serving import Translator

TRANSLATE_CHUNK = 32  # sentences the translate stage decodes at a time


def chunk_seed(seed: int, index: int) -> int:
    """Chunk `index`'s sampling seed, as the SavedModel's options signature derives it."""
    return (seed + index * 2 ** 32 + 2 ** 63) % 2 ** 64 - 2 ** 63


def _translate_lines(translator: Translator, options: Recipe, chunk: list[str],
                     prefixes: list[str] | None, index: int = 0,
                     terms: list[str] | None = None) -> list[str]:
    """Output lines for the `index`-th `chunk`: translations, or with `IOOptions.detailed` one JSON
    object per line (`Translator.translate`'s details, as the options signature answers)."""
    io, beam, sampling = options.io, options.decoding.beam, options.decoding.sampling
    if not io.detailed and sampling is None and terms is None:
        return translator.translate(chunk)
    if sampling is not None:
        sampling = dataclasses.replace(sampling, seed=chunk_seed(sampling.seed, index))
    rows = translator.translate(
        chunk, beam_size=beam.beam_size, alpha=beam.alpha, max_extra_length=beam.extra_length,
        n_best=io.n_best, details=True, prefixes=prefixes, sampling=sampling,
        terms=None if terms is None else [line.split("\t") for line in terms])
    if not io.detailed:
        return [row["translations"][0] for row in rows]
    kept = {"translations", "scores"} | ({"tokens", "token_log_probs"} if io.with_scores else
                                         set()) | ({"alignment"} if io.with_alignment else set())
    lines = []
    for row in rows:
        row["scores"] = [round(v, 6) for v in row["scores"]]
        row["token_log_probs"] = [[round(v, 6) for v in each] for each in row["token_log_probs"]]
        lines.append(json.dumps({k: v for k, v in row.items() if k in kept}, ensure_ascii=False))
    return lines


def _resume_key(options: Recipe) -> dict | None:
    """What --output's lines are made from (`partial_output.resumable`); None for stdin."""
    io = options.io
    if io.input is None or io.input == "-":
        return None
    files = [p for p in (io.input, io.prefix_file, io.terms_file) if p is not None]
    return json.loads(json.dumps({
        "files": input_identity(files), "weights": made_from.weights_identity(options),
        "decoding": dataclasses.asdict(options.decoding), "io": dataclasses.asdict(io),
        "quantize": options.export.quantize, "checkpoint": options.evaluation.checkpoint},
        default=str))


class _InputLines:
    """The input in chunks with its prefix and terms lines, counting lines read and cut."""

    def __init__(self, options: Recipe, max_length: int, spm_proto: bytes, log: Log):
        self.lines = (line for _, line in iter_lines(options.io.input))
        # Files read line by line with the input: (path, lines, what one line holds).
        self.beside = {name: (path, (line for _, line in iter_lines(path)), what)
                       for name, path, what in (("prefixes", options.io.prefix_file, "prefix"),
                                                ("terms", options.io.terms_file, "line of terms"))
                       if path is not None}
        self.count, self.first, self.cut = 0, None, 0
        self.max_length, self.log = max_length, log
        self.pieces = vocab_lib.python_processor(spm_proto)

    def skip(self, done: int) -> None:
        """Reads past the first `done` lines (already translated), keeping the first one."""
        self.count, self.first = done, next(self.lines, None)
        collections.deque(itertools.islice(self.lines, done - 1), maxlen=0)
        for _, source, _ in self.beside.values():
            collections.deque(itertools.islice(source, done), maxlen=0)

    def chunks(self):
        """(index, lines, prefixes or None, terms or None) per chunk."""
        while chunk := list(itertools.islice(self.lines, TRANSLATE_CHUNK)):
            prefixes, terms = (self._beside(name, chunk) for name in ("prefixes", "terms"))
            self.first = chunk[0] if self.first is None else self.first
            self._warn_if_cut(chunk)
            self.count += len(chunk)
            yield (self.count - len(chunk)) // TRANSLATE_CHUNK, chunk, prefixes, terms

    def _warn_if_cut(self, chunk: list[str]) -> None:
        """One stderr line per source longer than the model reads (EOS included)."""
        for offset, ids in enumerate(self.pieces.encode(chunk)):
            if len(ids) + 1 > self.max_length:
                self.cut += 1
                self.log(f"translate: line {self.count + offset + 1}: {len(ids) + 1:,} tokens "
                         f"(EOS included), more than the {self.max_length} the model reads "
                         f"(--max_input_length): translated from its first "
                         f"{self.max_length - 1} pieces")

    def _beside(self, name: str, chunk: list[str]) -> list[str] | None:
        if name not in self.beside:
            return None
        path, source, what = self.beside[name]
        taken = list(itertools.islice(source, len(chunk)))
        if len(taken) != len(chunk):
            raise DataError(f"{path} has fewer lines than the input ({self.count + len(taken)} "
                            f"for at least {self.count + len(chunk)}); give one {what} per "
                            "input line")
        return taken


def run_translate(options: Recipe, log: Log = print, out: TextIO | None = None) -> int:
    """Translates --input (or stdin) to --output (or `out`, default stdout) in chunks, a line per
    input line, as the exported model answers; sampled (`chunk_seed`) or by beam search."""
    translator = make_translator(options, options.task, log)
    widened = options.io.n_best > options.decoding.beam.beam_size  # see _translate_lines
    log(f"translate: sampling instead of beam search, {describe.describe_sampling(options)}"
        if options.decoding.sampling else f"translate: {describe.describe_decoding(options)}"
        + (f" (beam widened to {options.io.n_best} for --n_best)" if widened else ""))
    source = _InputLines(options, translator.max_input_length, translator.spm_proto, log)
    progress = Progress("translate", None, "lines", log)

    def translations():
        for index, chunk, prefixes, terms in source.chunks():
            yield [line + "\n" for line in _translate_lines(
                translator, options, chunk, prefixes, index, terms)]
            progress.update(source.count)

    if options.io.output:
        with resumable(options.io.output, _resume_key(options)) as (write, done):
            if done:
                log(f"translate: resuming {options.io.output} after its first {done:,} lines")
                source.skip(done)  # the done lines: read, not translated
            for chunk in translations():
                write(chunk, source.count)
    else:
        out = out or sys.stdout
        for chunk in translations():
            out.writelines(chunk)
            out.flush()
    log(f"translate: {source.count:,} lines" + (
        f"; {source.cut:,} cut to the first {translator.max_input_length - 1} pieces"
        if source.cut else ""))
    if options.io.plot_attention and source.first is not None:
        from pipelines.evaluation.attention_plot import plot_attention

        tokenizer = vocab_lib.load_tokenizer(translator.spm_proto)
        plot_attention(translator.model, tokenizer, source.first, options.io.plot_attention,
                       translator.search, input_length=translator.max_input_length,
                       constraint=translator.functions.constraint)
        log(f"translate: attention of the first sentence -> {options.io.plot_attention}")
    return source.count


def run_score(options: Recipe, log: Log = print, out: TextIO | None = None) -> int:
    """Prints the length-penalised log-probability of each --target line given its --input's."""
    if not options.io.input or not options.io.target:
        raise ConfigError("--mode score needs --input SOURCES and --target TRANSLATIONS "
                          "(one sentence a line, the same number of lines)")
    from keras_transformer.decoding import score_ids

    model = md.load_final_model(options.model_dir, options.decoding.precision,
                                options.evaluation.checkpoint, log=log)
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    tokenizer = vocab_lib.load_tokenizer(proto)
    teacher_inputs = options.task.teacher_inputs(proto)
    source_length = options.decoding.input_length(model.config.max_length)
    sources, targets = iter_lines(options.io.input), iter_lines(options.io.target)
    out, count = out or sys.stdout, 0
    while chunk := list(itertools.islice(itertools.zip_longest(sources, targets),
                                         TRANSLATE_CHUNK)):
        if any(s is None or t is None for s, t in chunk):
            raise DataError(f"{options.io.input} and {options.io.target} have different "
                            f"numbers of lines (from line {count + 1}); score one "
                            f"translation per source line")
        source_ids = text.sentences_to_ids(tokenizer, [s for (_, s), _ in chunk], source_length)
        target_ids = text.sentences_to_ids(tokenizer, [t for _, (_, t) in chunk],
                                           model.config.max_length)
        scores = score_ids(model, source_ids, target_ids, alpha=options.decoding.beam.alpha,
                           teacher_inputs=teacher_inputs)
        out.writelines(f"{float(v):.6f}\n" for v in scores.numpy())
        out.flush()
        count += len(chunk)
    log(f"score: {count:,} lines")
    return count
