"""Fine-tuning: a new model dir started from another's trained model (`--init_from`).

It takes the source's config.json, spm.model and averaged weights, so the model flags must equal
the source's; the optimizer starts fresh unless --init_optimizer restores Adam's state and step.
Until it has a checkpoint of its own, every run checks the source again (docs/training.md)."""

import dataclasses
import itertools
import os
import pathlib
import warnings
from typing import Any, Callable, Mapping

from keras_transformer.atomic_files import write_atomic
from keras_transformer.config import TransformerConfig
from keras_transformer.model_dir import FINAL_WEIGHTS_FILE, SETTINGS_FILE, VOCAB_FILE
from pipelines import Log
from pipelines.data import vocab as vocab_lib
from pipelines.data.text_io import iter_lines
from pipelines.errors import ConfigError, ModelDirError
from pipelines.model_dir import layout as md
from pipelines.model_dir.files import file_sha256

RECORD = "init_from"  # settings.json's key for where a model dir started from
COVERAGE_LINES = 10_000  # lines a side of the new train text the vocabulary's coverage reads
COVERAGE_WARNING = 0.01  # above this share of unknown or byte-fallback pieces: a warning


@dataclasses.dataclass(frozen=True)
class InitFrom:
    """Where a fine-tuned model dir starts; `config` and `source_settings` only while `pending`."""

    model_dir: str          # the source model dir, absolute
    weights_sha256: str     # of its final.weights.h5, the weights started from
    optimizer: bool         # --init_optimizer: Adam's moments and step restored too
    step: int               # the optimizer step training starts at: 0, or the source's
    config: TransformerConfig | None = None
    source_settings: dict = dataclasses.field(default_factory=dict, compare=False)

    @property
    def pending(self) -> bool:
        """Whether the model dir still has to be initialised from the source."""
        return self.config is not None

    def record(self) -> dict[str, Any]:
        """What settings.json keeps under `RECORD`."""
        return {"model_dir": self.model_dir, "weights_sha256": self.weights_sha256,
                "optimizer": self.optimizer, "step": self.step}

    def model_layer(self) -> dict[str, Any]:
        """The source's model settings, a layer of the recipe; empty once it is trained."""
        model = self.source_settings.get("model") or {}
        return {"config": model.get("preset"), "config_override": model.get("config_overrides"),
                "vocab_size": self.config.vocab_size,
                "max_length": self.config.max_length} if self.pending else {}


def resolve(given: Mapping[str, Any], model_dir: str, saved: Mapping[str, Any]
            ) -> InitFrom | None:
    """The origin of `model_dir` from --init_from or settings.json's record; None if trained
    from scratch. Checks the source while `model_dir` has no weights of its own (ConfigError,
    ModelDirError)."""
    flag, recorded = given.get("init_from"), saved.get(RECORD)
    if flag is None and recorded is None:
        if given.get("init_optimizer"):
            raise ConfigError("--init_optimizer needs --init_from SOURCE_MODEL_DIR (the model "
                              "dir whose training state to restore)")
        return None
    source = os.path.abspath(flag) if flag is not None else recorded["model_dir"]
    trained = md.has_weights(model_dir)
    if flag is not None:
        if os.path.realpath(flag) == os.path.realpath(model_dir):
            raise ConfigError(f"--init_from {flag} is the --model_dir itself: give the trained "
                              f"model dir to start from, and a new --model_dir to fine-tune in")
        if recorded and recorded["model_dir"] != source:
            raise ConfigError(f"--init_from {flag}: {model_dir} was started from "
                              f"{recorded['model_dir']}; drop the flag to continue it, or give "
                              f"a new --model_dir")
        if not recorded and trained:
            raise ConfigError(f"--init_from {flag}: {model_dir} already holds a model trained "
                              f"without it; give a new --model_dir to fine-tune in")
    optimizer = bool(given.get("init_optimizer", recorded and recorded["optimizer"]))
    if recorded and optimizer != recorded["optimizer"]:
        raise ConfigError(f"--init_optimizer {optimizer} differs from what "
                          f"{os.path.join(model_dir, SETTINGS_FILE)} records "
                          f"({recorded['optimizer']}); drop the flag, or give a new --model_dir")
    if trained:
        return InitFrom(**recorded)
    return _check_source(given, model_dir, source, recorded, optimizer)


def _check_source(given: Mapping[str, Any], model_dir: str, source: str,
                  recorded: Mapping[str, Any] | None, optimizer: bool) -> InitFrom:
    """The source's model, weights digest and start step, checked (see `resolve`)."""
    if not os.path.isdir(source):
        raise ModelDirError(f"--init_from {source}: no such model directory; give a trained "
                            f"model dir (one with {FINAL_WEIGHTS_FILE})")
    weights = md.final_weights(source)
    if not weights.is_file():
        raise ModelDirError(f"--init_from {source}: no {FINAL_WEIGHTS_FILE} to start from; "
                            f"train and average it first (pipelines/run.py --mode average "
                            f"--model_dir {source})")
    config = md.read_config(source)
    settings = md.load_settings(source)
    proto = vocab_lib.read_model_proto(pathlib.Path(source) / VOCAB_FILE)
    own_vocab = pathlib.Path(model_dir) / VOCAB_FILE
    if own_vocab.is_file() and own_vocab.read_bytes() != proto:
        raise ConfigError(f"--init_from {source}: {own_vocab} is another vocabulary than the "
                          f"source's (prepared without --init_from?); give a new --model_dir")
    digest = file_sha256(weights).hexdigest()
    if recorded and recorded["weights_sha256"] != digest:
        raise ModelDirError(f"{weights} has changed since {model_dir} was started from it "
                            f"(sha256 {digest[:12]}, recorded {recorded['weights_sha256'][:12]}); "
                            f"restore it, or give a new --model_dir to start from these weights")
    init = InitFrom(source, digest, optimizer, 0, config, dict(settings))
    for name, value in init.model_layer().items():
        if given.get(name) is not None and value is not None and given[name] != value:
            raise ConfigError(f"--{name} {given[name]!r} differs from {value!r}, the model of "
                              f"--init_from {source}: a fine-tuned model keeps its source's "
                              f"model; drop the flag")
    if optimizer:
        saved = md.checkpoint_paths(md.checkpoint_dir(source))
        if not saved:
            raise ModelDirError(f"--init_optimizer: {md.checkpoint_dir(source)} has no "
                                f"checkpoint to restore Adam's state from; drop the flag")
        init = dataclasses.replace(init, step=int(saved[-1].rsplit("-", 1)[1]))
    return init


def check_training(init: InitFrom | None, train_steps: int, accumulate_steps: int) -> None:
    """Refuses training flags that cannot continue the source's optimizer state."""
    if init is None or not init.pending or not init.optimizer:
        return
    if train_steps <= init.step:
        raise ConfigError(f"--train_steps {train_steps}: with --init_optimizer the step counter "
                          f"goes on from the source's {init.step:,}; give more (the source's "
                          f"steps + the fine-tuning steps)")
    source = (init.source_settings.get("training") or {}).get("accumulate_steps", 1)
    if accumulate_steps != source:
        raise ConfigError(f"--accumulate_steps {accumulate_steps} differs from the source's "
                          f"{source}: --init_optimizer restores Adam's state, gradient "
                          f"accumulators included; give --accumulate_steps {source} or drop "
                          f"--init_optimizer")


def copy_vocabulary(init: InitFrom, model_dir: os.PathLike | str, log: Log = print) -> None:
    """Copies the source's spm.model into `model_dir` (if absent) for prepare to reuse."""
    target = pathlib.Path(model_dir) / VOCAB_FILE
    if target.is_file():
        return
    proto = vocab_lib.read_model_proto(pathlib.Path(init.model_dir) / VOCAB_FILE)
    write_atomic(target, proto)
    log(f"vocab: copied {init.model_dir}/{VOCAB_FILE} "
        f"({vocab_lib.vocab_size_of(proto):,} pieces), the vocabulary of --init_from")


def report_coverage(init: InitFrom, proto: bytes, train_files, log: Log = print) -> float:
    """Logs and returns the share of unknown or byte-fallback pieces in the new train text."""
    lines = itertools.chain.from_iterable(
        (line for _, line in itertools.islice(iter_lines(path), COVERAGE_LINES))
        for path in train_files)
    rate, pieces = vocab_lib.fallback_rate(proto, lines)
    line = (f"vocab: {rate:.2%} of the {pieces:,} pieces of the new train text (first "
            f"{COVERAGE_LINES:,} lines a side) are unknown or byte fallback under the "
            f"vocabulary of {init.model_dir}")
    if rate > COVERAGE_WARNING:
        line = (f"warning: {line}: above {COVERAGE_WARNING:.0%}, it covers this corpus badly "
                f"(characters it never saw); expect fine-tuning to gain less")
    log(line)
    return rate


def initialiser(init: InitFrom, log: Log = print) -> Callable:
    """`(model, optimizer) -> start step`: loads the source's final weights (and with
    --init_optimizer Adam's state) into a model dir with no checkpoint to resume from."""
    def initialise(model, optimizer) -> int:
        weights = md.final_weights(init.model_dir)
        digest = file_sha256(weights).hexdigest()
        if digest != init.weights_sha256:
            raise ModelDirError(f"{weights} has changed (sha256 {digest[:12]}, recorded "
                                f"{init.weights_sha256[:12]}); restore it, or give a new "
                                f"--model_dir to start from these weights")
        step, detail = 0, "a fresh optimizer from step 0"
        if init.optimizer:
            from pipelines.model_dir import checkpoints

            manager = checkpoints.checkpoint_manager(
                model, optimizer, md.checkpoint_dir(init.model_dir))
            step = checkpoints.restore_latest(manager, optimizer)
            if step != init.step:
                raise ModelDirError(f"{md.checkpoint_dir(init.model_dir)}: the latest "
                                    f"checkpoint is now at step {step:,}, not {init.step:,}; "
                                    f"give a new --model_dir to start from it")
            detail = f"Adam's moments and step {step:,} from {manager.latest_checkpoint}"
        try:
            with warnings.catch_warnings():  # the compiled model's optimizer: not in the file
                warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
                model.load_weights(weights)
        except (OSError, ValueError, KeyError) as e:
            raise ModelDirError(f"{weights}: cannot load into this model ({e}); give a "
                                f"trained model dir to --init_from") from None
        log(f"train: starting from {weights} (sha256 {digest[:12]}), with {detail}")
        return step

    return initialise
