"""The command line: prepare, train, average, evaluate and export a Transformer.

    python pipelines/run.py                          # Multi30k En->De on a CPU, minutes
    python pipelines/run.py --task wmt14_ende --config base --train_steps 100000 \
        --batch_tokens 25000 --model_dir runs/base   # the paper's base model
    python pipelines/run.py --mode evaluate --model_dir runs/base
    python pipelines/run.py --init_from runs/multi30k_ende --task text --train_src a.en \
        --train_tgt a.de --warmup_steps 100 --train_steps 300 --model_dir runs/tuned
    python pipelines/run.py --backend jax --model_dir runs/m30_jax   # ... average, evaluate
    python pipelines/run.py --mode export --model_dir runs/m30_jax   # TensorFlow

Flags -> options (`pipelines.options.resolve`: flag > settings.json > preset > task >
paper, logged) -> stages, under the model dir's lock when they write (`pipelines.lock`);
nothing else. The decoding and export flags are `pipelines/shared_flags.py`'s, shared with
export/run.py. Results (scores, translations) go to stdout, logs to stderr; a user
error is one line on stderr and exit status 2. `--helpfull` lists every flag.
"""
import contextlib
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402

from pipelines import shared_flags, startup  # noqa: E402  (startup: before TensorFlow)
from pipelines.startup import BACKENDS  # noqa: E402

startup.select_backend(sys.argv)
from pipelines.tasks.parsing.forms import TARGET_FORMS  # noqa: E402

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(shared_flags)
flags.adopt_module_key_flags(startup)
flags.DEFINE_enum("backend", "tensorflow", list(BACKENDS), "Keras backend that trains: "
                  "tensorflow, or jax (pip install -e \".[jax]\"; jax.jit steps; "
                  "keras.distribution.DataParallel over "
                  "several devices). Under jax prepare, train, average and evaluate run (the "
                  "default --mode then); their checkpoints and final.weights.h5 are the same "
                  "files, so export, translate and score run after them under tensorflow, and "
                  "either backend resumes the other's run. tf.data feeds both.")
flags.DEFINE_string("task", None, "Task: multi30k_ende (default), wmt14_ende, wmt14_enfr, "
                    "ptb_parsing or text. After prepare: the model dir's.")
flags.DEFINE_list("mode", ["prepare", "train", "average", "evaluate", "export"],
                  "Stages to run, in order: prepare, train, average, evaluate, export, "
                  "translate, score.")
flags.DEFINE_string("model_dir", None, "Model directory (default runs/<task>).")
flags.DEFINE_string("init_from", None, "Fine-tune: start the new --model_dir from this trained "
                    "model dir's averaged weights (final.weights.h5), model config and "
                    "vocabulary (reused, never retrained), with a fresh optimizer and this "
                    "run's training flags (--warmup_steps, --train_steps, ...). Recorded in "
                    "settings.json; later runs resume the new dir from its own checkpoints.")
flags.DEFINE_bool("init_optimizer", None, "With --init_from: also restore Adam's moments and "
                  "step counter from the source's latest checkpoint, so that the step count "
                  "and Eq. 3's schedule go on from the source's step S (--train_steps counts "
                  "from 0: give S + the fine-tuning steps; no second warm-up once S >= "
                  "--warmup_steps).")
flags.DEFINE_string("data_dir", None, "Where the task's data is: the folder holding "
                    "multi30k/ (default $KT_DATA_DIR), the tfds data dir, or the WSJ tree dir.")
flags.DEFINE_string("manual_dir", None, "tfds manual download dir.")
for _split in ("train", "dev", "test"):
    flags.DEFINE_string(f"{_split}_src", None, f"task=text: {_split} source file.")
    flags.DEFINE_string(f"{_split}_tgt", None, f"task=text: {_split} target file.")
    flags.DEFINE_string(f"{_split}_trees", None, f"task=ptb_parsing: {_split} trees, a "
                        f"bracketed .mrg file or a directory of them (default: the WSJ "
                        f"sections below --data_dir).")
flags.DEFINE_enum("target_form", None, list(TARGET_FORMS), "task=ptb_parsing: what stands "
                  "for a word in the target: its POS tag (tags, as the paper's code), XX (xx, "
                  "Vinyals et al.), the word itself (words, copied from the source), or a tag "
                  "or XX after which the decoder reads the next word (read_tags, the default; "
                  "read_xx).")
flags.DEFINE_string("config", None, "Preset name (default: the task's).")
flags.DEFINE_multi_string("config_override", None, "key=value overriding a config field; "
                          "repeatable, e.g. --config_override dropout=0.3.")
flags.DEFINE_integer("vocab_size", None, "Shared vocabulary size (default: the preset's "
                     "own where it declares one, else the task's).")
flags.DEFINE_integer("train_steps", None, "Optimizer updates (default: the task's, else the "
                     "preset's; the paper: 100k base, 300k big).")
flags.DEFINE_integer("batch_tokens", None, "Global batch budget in tokens per side (default: "
                     "the task's, else the paper's 25,000).")
flags.DEFINE_integer("accumulate_steps", None, "Batches accumulated per update (reach the "
                     "paper's batch on fewer devices; default 1).")
flags.DEFINE_integer("warmup_steps", None, "Learning-rate warm-up (Eq. 3; default: the "
                     "task's, else the paper's 4,000).")
flags.DEFINE_float("lr_scale", None, "Constant factor on the Eq. 3 learning rate (default 1).")
flags.DEFINE_integer("checkpoint_every", None, "Steps between checkpoints (default: the "
                     "task's, else 1,000).")
flags.DEFINE_integer("keep_checkpoints", None, "Newest checkpoints kept (default 20; with "
                     "--keep_best_by dev_metric the best ones are kept too).")
flags.DEFINE_integer("average_last", None, "Checkpoints averaged for evaluation and export "
                     "(default 5 as for the paper's base; 20 for big).")
flags.DEFINE_integer("seed", None, "Random seed (weights, data order, dropout; and translate's "
                     "sampling: the same seed, the same samples; default: the model dir's, "
                     "else 0).")
flags.DEFINE_bool("jit_compile", None, "Compile the training step with XLA (default: on "
                  "GPUs, and on a CPU from d_model 512; pipelines/device_policy.py).")
flags.DEFINE_bool("mixed_precision", None, "Train in mixed precision (float32 weights): "
                  "mixed_bfloat16 on a CPU and on GPUs of compute capability >= 8.0, "
                  "mixed_float16 with loss scaling on older GPUs. Default: on where it is "
                  "faster (bfloat16 CPU instructions, GPUs >= 7.0). bfloat16 training sets "
                  "the decoding precision's default to bfloat16 too.")
flags.DEFINE_bool("pack", None, "Train on packed rows, several pairs end to end in each row "
                  "with attention kept within each pair, instead of length buckets: almost "
                  "no padding (prepare's table shows both; default off).")
flags.DEFINE_integer("steps_per_execution", None, "Training steps per tf.function call.")
flags.DEFINE_integer("memory_limit_mb", None, "Memory one training step may use; checked "
                     "on the largest batch before training (default: on a CPU the RAM "
                     "available, on a GPU no limit).")
flags.DEFINE_integer("num_cpu_devices", 1, "Split the CPU into N logical devices "
                     "(MirroredStrategy with N replicas on a CPU machine; under --backend jax, "
                     "N XLA CPU devices and DataParallel).")
flags.DEFINE_integer("dev_metric_every", None, "Steps between dev-metric evaluations (the "
                     "task's metric: BLEU, F1 for parsing; 0: never).")
flags.DEFINE_alias("dev_bleu_every", "dev_metric_every")
flags.DEFINE_integer("dev_metric_sentences", None, "The first N dev sentences are decoded "
                     "for the dev metric (default 200; 0: all).")
flags.DEFINE_alias("dev_bleu_sentences", "dev_metric_sentences")
flags.DEFINE_enum("keep_best_by", None, ["last", "dev_metric"], "Checkpoints the average "
                  "stage averages (--average_last of them): the last (default), or those with "
                  "the best recorded dev metric, which are then kept on disk beside the "
                  "--keep_checkpoints newest (needs --dev_metric_every).")
flags.DEFINE_integer("early_stop_patience", None, "Stop training when this many dev-metric "
                     "evaluations in a row have not improved on the best (needs "
                     "--dev_metric_every; default 0: never). The later stages run as usual.")
flags.DEFINE_enum("eval_split", None, ["dev", "test"], "Split the evaluate stage scores "
                  "(default test).")
flags.DEFINE_integer("eval_sentences", None, "Score only the first N sentences (0: all).")
flags.DEFINE_bool("decode_jit_compile", None, "Compile evaluation's beam search with XLA "
                  "(default: on in float32, off in bfloat16, which XLA's CPU backend does "
                  "not speed up).")
flags.DEFINE_string("input", None, "translate: file of source sentences (default stdin).")
flags.DEFINE_string("output", None, "translate: output file (default stdout).")
flags.DEFINE_integer("n_best", None, "translate: the N best hypotheses of each line, as JSON "
                     "lines (the beam is widened to N if smaller; sampling: N samples).")
flags.DEFINE_integer("sampling_topk", None, "translate: sample instead of beam search, each "
                     "token from the K most likely (0: no cut). Any sampling flag turns "
                     "sampling on; --seed seeds it.")
flags.DEFINE_float("sampling_topp", None, "translate: sample (nucleus) from the smallest set of "
                   "most likely tokens whose probability reaches P, in (0, 1] (1: no cut).")
flags.DEFINE_float("sampling_temperature", None, "translate: sample from the model's "
                   "distribution at temperature T > 0 (default 1 when sampling).")
flags.DEFINE_bool("with_scores", False, "translate: add each hypothesis's pieces and their "
                  "log-probabilities (JSON lines).")
flags.DEFINE_bool("with_alignment", False, "translate: add, for each target piece, the source "
                  "piece it attends to most (JSON lines).")
flags.DEFINE_string("prefix_file", None, "translate: target prefixes, line by line with the "
                    "input (empty line: none); every hypothesis starts with its prefix.")
flags.DEFINE_string("terms", None, "translate: required target phrases, line by line with the "
                    "input, tab-separated (empty line: none); every translation contains each "
                    "(lexically constrained beam search, Post & Vilar 2018).")
flags.DEFINE_string("target", None, "score: file of translations, line by line with "
                    "--input.")
flags.DEFINE_string("checkpoint", None, "evaluate, translate, score, export: decode this "
                    "checkpoint (ckpt-N) instead of final.weights.h5.")
flags.DEFINE_string("plot_attention", None, "translate: save the first sentence's "
                    "encoder-decoder attention heat map to this PNG.")

NOT_OPTIONS = ("mode", "backend", "num_cpu_devices", "dev_bleu_every", "dev_bleu_sentences",
               "verbose")
ONLY_WHEN_PRESENT = ("override_saved", "overwrite_export", "export_jit_compile",
                     "with_scores", "with_alignment")


def parse_overrides(items) -> dict:
    """`key=value` strings -> {key: JSON value, or the string itself}."""
    import json

    from pipelines.errors import ConfigError

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--config_override {item!r}: expected key=value")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


def given_flags() -> dict:
    """The flags the user set (None means: not given), by name."""
    given = {}
    for flag in FLAGS.get_key_flags_for_module(sys.modules[__name__]):
        if flag.name in NOT_OPTIONS or flag.value is None:
            continue
        if flag.name in ONLY_WHEN_PRESENT and not flag.present:
            continue
        given[flag.name] = flag.value
    if "config_override" in given:
        given["config_override"] = parse_overrides(given["config_override"])
    return given


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv):
    startup.import_tensorflow(FLAGS.verbose)
    from pipelines.errors import ConfigError, UserError

    if len(argv) > 1:
        log(f"error: unexpected arguments: {' '.join(argv[1:])}")
        return 2
    logging.set_verbosity(logging.WARNING)  # keep TensorFlow's checkpoint chatter out
    from pipelines.training import train as train_lib

    backend = FLAGS.backend
    train_lib.configure_devices(FLAGS.num_cpu_devices, backend)  # before TensorFlow starts
    import keras

    from pipelines import device_policy
    from pipelines import options as options_lib
    from pipelines import stages

    try:
        unknown = [m for m in FLAGS.mode if m not in stages.STAGES]
        if unknown:
            raise ConfigError(f"--mode {','.join(unknown)}: choose from {', '.join(stages.STAGES)}")
        modes = FLAGS.mode
        if backend != "tensorflow":
            if not FLAGS["mode"].present:  # the default job: the stages this backend runs
                modes = [m for m in modes if m in stages.ANY_BACKEND_STAGES]
            later = [m for m in modes if m not in stages.ANY_BACKEND_STAGES]
            if later:
                raise ConfigError(f"--mode {later[0]}: runs TensorFlow's serving graph; under "
                                  f"--backend {backend} run {','.join(stages.ANY_BACKEND_STAGES)}"
                                  f", then --mode {','.join(later)} without --backend")
        sampling = [name for name in options_lib.SAMPLING_FLAGS if getattr(FLAGS, name) is not None]
        if sampling and "translate" not in FLAGS.mode:
            raise ConfigError(f"--{sampling[0]}: only --mode translate samples")
        if FLAGS.terms is not None and "translate" not in FLAGS.mode:
            raise ConfigError("--terms: only --mode translate takes required phrases")
        if FLAGS.terms is not None and sampling:
            raise ConfigError(f"--terms: beam search only; drop --{sampling[0]} (sampling does "
                              "not take required phrases)")
        if FLAGS.quantize is not None and not {"export", "translate"} & set(FLAGS.mode):
            raise ConfigError("--quantize: only --mode export and translate use it (evaluate "
                              "decodes the weights as trained)")
        if FLAGS.format is not None and "export" not in FLAGS.mode:
            raise ConfigError("--format: only --mode export writes one")
        device = device_policy.detect(FLAGS.num_cpu_devices, backend)
        options = options_lib.resolve(given_flags(), device=device)
        log(f"options: {options_lib.describe_origins(options, every=FLAGS.verbose)}")
        if "train" in FLAGS.mode:
            log(options_lib.describe_device(options, device))
        keras.utils.set_random_seed(options.training.seed)
        results = sys.stdout
        # One writer per model dir (its lock). Under multi-worker training only the chief
        # writes it; the other workers only train, into <model_dir>/workers/.
        chief = train_lib.is_chief()
        # Keras draws its progress bars on stdout: send them, and all logs, to stderr.
        with stages.model_dir_lock(modes, options), contextlib.redirect_stdout(sys.stderr):
            for stage in modes:
                if not chief and stage != "train":
                    log(f"== {stage}: skipped, a worker other than the chief only trains")
                    continue
                split = options.evaluation.split
                if (stage == "evaluate" and not FLAGS["mode"].present
                        and not options.make_task().has_split(split)):
                    log(f"== evaluate: skipped, task {options.data.task} has no {split} data "
                        f"(--{split}_src/--{split}_tgt; --mode evaluate asks for it)")
                    continue
                log(f"== {stage} ({options.data.task}, {options.model_dir})")
                if stage == "train":
                    strategy = train_lib.make_strategy(options.training.jit_compile)
                    stages.run_train(options, strategy, log=log)
                    if not train_lib.is_chief(strategy):
                        log("train: done; the chief runs the later stages")
                        return 0
                elif stage in ("evaluate", "translate", "score"):
                    getattr(stages, f"run_{stage}")(options, log=log, out=results)
                else:
                    getattr(stages, f"run_{stage}")(options, log=log)
        if modes != FLAGS.mode:
            log(f"export under TensorFlow: python pipelines/run.py --mode "
                f"{','.join(m for m in FLAGS.mode if m not in modes)} --model_dir "
                f"{options.model_dir}")
    except UserError as e:
        log(f"error: {e}")
        return 2
    except KeyboardInterrupt as e:  # every file is written under a temporary name first
        log(f"interrupted {e.args[0] if e.args else 'by the user'}; run the same command "
            f"to resume")
        return 130
    except stages.OpCheckError as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=startup.parse_flags)
