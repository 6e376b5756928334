"""The train stage: the recipe's (or resumed, or fine-tuned) model, trained under a strategy."""
import keras

from pipelines import Log
from pipelines.data import prepare, vocab as vocab_lib
from pipelines.errors import ConfigError, ModelDirError
from pipelines.settings import describe, init_from as init_lib
from pipelines.model_dir import layout as md
from pipelines.settings.options import Recipe, config_for
from pipelines.stages.evaluate import dev_metric_evaluator
from pipelines.stages.prepare import record_settings
from pipelines.training import devices, train as train_lib


def run_train(options: Recipe, strategy, log: Log = print):
    task = options.task
    if options.training.dev_metric_every and not task.has_split("dev"):
        raise ConfigError("--dev_metric_every needs a dev split: give its files (e.g. "
                          "--dev_src/--dev_tgt, --dev_trees) or drop the flag")
    # Multi-worker: only the chief writes the model dir; the others write below workers/.
    chief = devices.is_chief(strategy)
    if not chief and not prepare.vocab_path(options.model_dir).is_file():
        raise ModelDirError(f"{options.model_dir} is not prepared: run --mode prepare once "
                            f"before starting the workers (only the chief writes it)")
    init = options.init if options.init is not None and options.init.pending else None
    if init is not None and chief:
        init_lib.copy_vocabulary(init, options.model_dir, log)
    proto = prepare.ensure_vocab(task, options.model_dir, options.data.vocab_size, log=log)
    if md.has_weights(options.model_dir):  # resuming: the config the weights were made with
        config = md.read_config(options.model_dir)
    else:  # fine-tuning: the source's model, exactly; else the recipe's
        config = (init.config if init is not None
                  else config_for(options, vocab_lib.vocab_size_of(proto)))
        if chief:
            md.save_config(options.model_dir, config)
    if chief:
        record_settings(options, trained=True)
    training = options.training
    keras.mixed_precision.set_global_policy(training.precision_policy)
    log(describe.describe_model(options, config))
    for warning in (describe.describe_short_run(options), task.corpus_warning()):
        if warning:
            log(warning)
    dev_metric = (dev_metric_evaluator(options, task, config.max_length, log)
                  if training.dev_metric_every else None)
    try:
        return train_lib.train(task, options.model_dir, config, training, strategy=strategy,
                               dev_metric_fn=dev_metric, verbose=options.progress, log=log,
                               initialise=init and init_lib.initialiser(init, log),
                               initial_step=options.init.step if options.init else 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
