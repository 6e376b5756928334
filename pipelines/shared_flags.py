"""The flags both command lines define: decoding and export, one name for each setting.

`pipelines/run.py` (every stage) and `export/run.py` (the export alone) both import this
module, so a setting has the same name, meaning and help in both, and each name is the
option name `pipelines.options.resolve` reads. `--jit_compile` is not among them: it is
the training step's XLA, a `pipelines/run.py` flag; the exported search's is
`--export_jit_compile`. `export/run.py` keeps its earlier names as aliases (`--version`,
`--precision`, `--overwrite`).
"""
from absl import flags

flags.DEFINE_integer("beam_size", None, "Beam size (default: the model dir's, else the "
                     "task's; the paper: 4). Fixed in an exported graph.")
flags.DEFINE_float("alpha", None, "Length penalty alpha (default: the model dir's, else the "
                   "task's; the paper: 0.6).")
flags.DEFINE_integer("extra_length", None, "Max output = input length + this (default: the "
                     "model dir's, else the task's; the paper: 50).")
flags.DEFINE_integer("max_input_length", None, "Longest source in tokens (EOS included); "
                     "longer inputs keep their first pieces (default: the model dir's, else "
                     "the task's limit; at most the model's max_length).")
flags.DEFINE_enum("stop_rule", None, ["exact", "best_finished"], "When beam search stops "
                  "a sentence: exact (default) once no live hypothesis can beat its finished "
                  "ones; best_finished once its best finished one beats the best live one "
                  "as it stands (CTranslate2's rule: fewer steps, results may differ).")
flags.DEFINE_enum("decode_precision", None, ["float32", "bfloat16"], "Precision of "
                  "evaluate, translate and export (default: the model dir's; bfloat16 if "
                  "trained with mixed precision).")
flags.DEFINE_bool("override_saved", False, "Let decoding flags differ from the model dir's "
                  "settings.json for this run (evaluate, translate, export).")
flags.DEFINE_string("export_dir", None, "SavedModel base dir, the model base path TensorFlow "
                    "Serving watches (default <model_dir>/export).")
flags.DEFINE_integer("export_version", None, "Version subdirectory to write (default: one "
                     "more than the largest existing version, 1 if none).")
flags.DEFINE_bool("overwrite_export", False, "Replace an existing export version.")
flags.DEFINE_bool("export_jit_compile", False, "XLA-compile the exported beam search "
                  "(TensorFlow Serving then needs --xla_cpu_compilation_enabled on CPU).")
flags.DEFINE_string("quantize", None, "export (and translate): int8 stores the model's "
                    "matrices as int8, a quarter of float32's bytes, dequantized to the "
                    "decode precision once per request (export/README.md). Default: the "
                    "weights as trained.")
flags.DEFINE_enum("format", None, ["saved_model", "ctranslate2"], "export: saved_model (the "
                  "default; TensorFlow Serving), or ctranslate2: a CTranslate2 model in "
                  "<model_dir>/export_ct2 (or --export_dir), float32, with spm.model "
                  "(export/ctranslate2.py; needs pip install -e \".[ctranslate2]\").")
flags.DEFINE_bool("check_ops", True, "After exporting, check that every op is registered by "
                  "core TensorFlow or tensorflow-text; exit 1 if not.")

NAMES = ("beam_size", "alpha", "extra_length", "max_input_length", "stop_rule",
         "decode_precision",
         "override_saved", "export_dir", "export_version", "overwrite_export",
         "export_jit_compile", "check_ops", "quantize", "format")
"""The flags defined here, each also the name of the option it sets."""
