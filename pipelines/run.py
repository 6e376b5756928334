"""The command line: prepare, train, average, evaluate and export a Transformer.

    python pipelines/run.py                          # Multi30k En->De on a CPU, minutes
    python pipelines/run.py --task wmt14_ende --config base --train_steps 100000 \
        --batch_tokens 25000 --model_dir runs/base   # the paper's base model
    python pipelines/run.py --mode evaluate --model_dir runs/base

`python pipelines/run.py --helpfull` lists every flag.
"""
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags, logging  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("task", "multi30k_ende", "Task: multi30k_ende, wmt14_ende, wmt14_enfr, "
                    "ptb_parsing or text.")
flags.DEFINE_list("mode", ["prepare", "train", "average", "evaluate", "export"],
                  "Stages to run, in order: prepare, train, average, evaluate, export, "
                  "translate.")
flags.DEFINE_string("model_dir", None, "Model directory (default runs/<task>).")
flags.DEFINE_string("data_dir", None, "Where the task's data is (Multi30k files, tfds data "
                    "dir, WSJ tree dir). Default: $KT_DATA_DIR for Multi30k.")
flags.DEFINE_string("manual_dir", None, "tfds manual download dir.")
for _split in ("train", "dev", "test"):
    flags.DEFINE_string(f"{_split}_src", None, f"task=text: {_split} source file.")
    flags.DEFINE_string(f"{_split}_tgt", None, f"task=text: {_split} target file.")
    flags.DEFINE_string(f"{_split}_trees", None, f"task=ptb_parsing: {_split} trees, a "
                        f"bracketed .mrg file or a directory of them (default: the WSJ "
                        f"sections below --data_dir).")
flags.DEFINE_enum("target_form", None, ["tags", "xx"], "task=ptb_parsing: word symbols of "
                  "the target, each word's POS tag (default, as the paper's code) or XX "
                  "(Vinyals et al.).")
flags.DEFINE_string("config", None, "Preset name (default: the task's).")
flags.DEFINE_multi_string("config_override", [], "key=value overriding a config field; "
                          "repeatable, e.g. --config_override dropout=0.3.")
flags.DEFINE_integer("vocab_size", None, "Shared vocabulary size (default: the task's).")
flags.DEFINE_integer("train_steps", None, "Optimizer updates (default: the task's, else the "
                     "preset's; the paper: 100k base, 300k big).")
flags.DEFINE_integer("batch_tokens", None, "Global batch budget in tokens per side (default: "
                     "the task's, else the paper's 25,000).")
flags.DEFINE_integer("accumulate_steps", 1, "Batches accumulated per update (reach the "
                     "paper's batch on fewer devices).")
flags.DEFINE_integer("warmup_steps", None, "Learning-rate warm-up (Eq. 3; default: the "
                     "task's, else the paper's 4,000).")
flags.DEFINE_float("lr_scale", None, "Constant factor on the Eq. 3 learning rate (default 1).")
flags.DEFINE_integer("checkpoint_every", None, "Steps between checkpoints (default: the "
                     "task's, else 1,000).")
flags.DEFINE_integer("keep_checkpoints", 20, "Checkpoints kept.")
flags.DEFINE_integer("average_last", 5, "Checkpoints averaged for evaluation and export (the "
                     "paper: 5 base, 20 big).")
flags.DEFINE_integer("seed", 0, "Random seed (weights, data order, dropout).")
flags.DEFINE_bool("jit_compile", False, "Compile the training step with XLA.")
flags.DEFINE_bool("mixed_precision", None, "bfloat16: training computes in bfloat16 with "
                  "float32 weights, evaluate/translate decode with bfloat16 weights (default: "
                  "on where the CPU multiplies bfloat16 natively, AMX or AVX512-BF16, and "
                  "there are no GPUs; --nomixed_precision for float32).")
flags.DEFINE_integer("steps_per_execution", 1, "Training steps per tf.function call.")
flags.DEFINE_integer("num_cpu_devices", 1, "Split the CPU into N logical devices "
                     "(MirroredStrategy with N replicas on a CPU machine).")
flags.DEFINE_integer("dev_bleu_every", 0, "Steps between dev BLEU evaluations (0: never).")
flags.DEFINE_integer("dev_bleu_sentences", 200, "Dev sentences decoded for dev BLEU.")
flags.DEFINE_integer("beam_size", None, "Beam size (default: the task's; the paper: 4).")
flags.DEFINE_float("alpha", None, "Length penalty alpha (default: the task's; paper: 0.6).")
flags.DEFINE_integer("extra_length", None, "Max output = input length + this (paper: 50).")
flags.DEFINE_enum("eval_split", "test", ["dev", "test"], "Split the evaluate stage scores.")
flags.DEFINE_integer("eval_sentences", None, "Score only the first N sentences of the split.")
flags.DEFINE_bool("decode_jit_compile", None, "Compile beam search with XLA when decoding "
                  "(default: on, except when decoding in bfloat16; see --mixed_precision).")
flags.DEFINE_string("export_dir", None, "SavedModel base dir (default <model_dir>/export).")
flags.DEFINE_integer("export_version", None, "Version subdirectory (default: next number).")
flags.DEFINE_bool("overwrite_export", False, "Replace an existing export version.")
flags.DEFINE_string("input", None, "translate: file of source sentences (default stdin).")
flags.DEFINE_string("output", None, "translate: output file (default stdout).")
flags.DEFINE_string("plot_attention", None, "translate: save the first sentence's "
                    "encoder-decoder attention heat map to this PNG.")


def _parse_overrides(items):
    import json

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise app.UsageError(f"--config_override {item!r}: expected key=value")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


def options_from_flags():
    from pipelines.stages import STAGES, RunOptions

    unknown = [m for m in FLAGS.mode if m not in STAGES]
    if unknown:
        raise app.UsageError(f"--mode {','.join(unknown)}: choose from {', '.join(STAGES)}")
    task_options = {"data_dir": FLAGS.data_dir, "manual_dir": FLAGS.manual_dir,
                    "target_form": FLAGS.target_form}
    for split in ("train", "dev", "test"):
        for side in ("src", "tgt", "trees"):
            task_options[f"{split}_{side}"] = FLAGS[f"{split}_{side}"].value
    task_options = {k: v for k, v in task_options.items() if v is not None}
    return RunOptions(
        task=FLAGS.task, model_dir=FLAGS.model_dir or os.path.join("runs", FLAGS.task),
        task_options=task_options, preset=FLAGS.config,
        config_overrides=_parse_overrides(FLAGS.config_override), vocab_size=FLAGS.vocab_size,
        train_steps=FLAGS.train_steps, batch_tokens=FLAGS.batch_tokens,
        accumulate_steps=FLAGS.accumulate_steps, warmup_steps=FLAGS.warmup_steps,
        lr_scale=FLAGS.lr_scale, checkpoint_every=FLAGS.checkpoint_every,
        keep_checkpoints=FLAGS.keep_checkpoints, average_last=FLAGS.average_last,
        seed=FLAGS.seed, jit_compile=FLAGS.jit_compile, mixed_precision=FLAGS.mixed_precision,
        steps_per_execution=FLAGS.steps_per_execution, dev_bleu_every=FLAGS.dev_bleu_every,
        dev_bleu_sentences=FLAGS.dev_bleu_sentences, beam_size=FLAGS.beam_size,
        alpha=FLAGS.alpha, extra_length=FLAGS.extra_length, eval_split=FLAGS.eval_split,
        eval_sentences=FLAGS.eval_sentences,
        decode_jit_compile=FLAGS.decode_jit_compile, export_dir=FLAGS.export_dir,
        export_version=FLAGS.export_version, overwrite_export=FLAGS.overwrite_export,
        input_file=FLAGS.input, output_file=FLAGS.output, plot_attention=FLAGS.plot_attention)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)  # keep TensorFlow's checkpoint chatter out
    from pipelines import train as train_lib

    train_lib.configure_cpu_devices(FLAGS.num_cpu_devices)  # before TensorFlow starts
    import keras

    from pipelines import stages
    from pipelines.model_dir import ModelDirError
    from pipelines.text_io import DataError

    options = options_from_flags()
    keras.utils.set_random_seed(options.seed)
    try:
        for stage in FLAGS.mode:
            print(f"== {stage} ({options.task}, {options.model_dir})", flush=True)
            if stage == "train":
                strategy = train_lib.make_strategy(options.jit_compile)
                stages.run_train(options, strategy)
            else:
                getattr(stages, f"run_{stage}")(options)
    except (DataError, ModelDirError, train_lib.TrainingSetupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    app.run(main)
