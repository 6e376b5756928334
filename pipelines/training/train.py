"""The training loop: `model.fit` under a strategy (`devices`), resumable at any step."""

import math
import pathlib

import keras
import tensorflow as tf

from keras_transformer import (LabelSmoothedCrossEntropy, Perplexity, TokenAccuracy, TokenCount,
                               TransformerConfig, paper_optimizer, tf_internals)
from keras_transformer.data.buckets import bucket_batch_sizes
from pipelines.data.prepare import training_input, validation_input
from pipelines.model_dir import checkpoints
from pipelines.model_dir import layout as md
from pipelines.model_dir.layout import CHECKPOINT_DIR, build_model
from pipelines.settings.options import TrainingOptions
from pipelines.training import callbacks as cb
from pipelines.training import memory_check
from pipelines.training.devices import worker_dir


def compile_model(config: TransformerConfig, strategy, training: TrainingOptions):
    """The compiled model and optimizer (loss-scaled under mixed_float16) in `strategy`'s scope."""
    t = training
    with strategy.scope():
        model = build_model(config)
        optimizer = paper_optimizer(
            config.d_model, t.warmup_steps, t.lr_scale, t.adam_epsilon,
            global_clipnorm=t.clip_norm or None,
            gradient_accumulation_steps=t.accumulate_steps if t.accumulate_steps > 1 else None)
        if keras.mixed_precision.global_policy().name == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy(t.label_smoothing),
                      metrics=[TokenAccuracy(), Perplexity(label_smoothing=t.label_smoothing),
                               TokenCount()],
                      jit_compile=t.jit_compile, steps_per_execution=t.steps_per_execution)
        optimizer.build(model.trainable_variables)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        tf_internals.fit_under_multi_worker(model)
    return model


def build_compiled_metrics(model, vocab_size: int) -> None:
    """Builds the compiled loss and metrics on a small random batch (values reset): under JAX
    `fit` would otherwise build them from an iterator of its own over the data."""
    (source, target_in), target_out = memory_check.largest_batch(2, 4, 4, vocab_size)
    logits = model((source, target_in), training=False)
    model.compute_loss(x=(source, target_in), y=target_out, y_pred=logits)
    model.compute_metrics((source, target_in), target_out, logits)
    model.reset_metrics()


def checkpoint_optimizer(optimizer):
    """The optimizer checkpoints hold, the same under every precision: the paper's Adam,
    unwrapped from a `LossScaleOptimizer` (a resumed float16 run starts its scale again)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def _record_missing_metric(model, step, checkpoint_every, every_epochs, checkpoint_dir,
                           dev_metric_fn, log=print):
    """Records the dev metric of restored checkpoint `step` if one is due there but missing."""
    if -(-step // checkpoint_every) % every_epochs or \
            step in checkpoints.read_metrics(checkpoint_dir):
        return
    log(f"train: the dev metric of step {step:,} was not recorded (the run stopped before): "
        f"evaluating it now")
    checkpoints.record_metric(checkpoint_dir, step, dev_metric_fn.metric_name, dev_metric_fn(model))


def _check_memory(model, strategy, task, config: TransformerConfig, t: TrainingOptions, *,
                  resumed: bool, log) -> None:
    """Stops before training when the largest batch would not fit (`memory_check`; TF only)."""
    if keras.backend.backend() != "tensorflow":
        log(f"train: the largest-batch memory check runs under TensorFlow only; under "
            f"{keras.backend.backend()} a --batch_tokens too large fails at its first batch")
        build_compiled_metrics(model, config.vocab_size)  # TensorFlow's fit iterates once
        return
    replicas = strategy.num_replicas_in_sync
    longest = task.max_length  # the largest bucket's boundary
    per_replica = bucket_batch_sizes([longest], t.batch_tokens, replicas)[0] // replicas
    # The probe draws dropout masks: a resumed run restores its random state.
    restored = [(v, v.numpy()) for v in checkpoints.random_state(model)] if resumed else []
    batch = memory_check.largest_batch(per_replica, min(longest, task.max_source_length),
                                       min(longest, task.max_target_length), config.vocab_size)
    memory_check.check_largest_batch(model, strategy, batch, limit_mb=t.memory_limit_mb,
                                     jit_compile=t.jit_compile, log=log)
    for variable, value in restored:
        variable.assign(value)


def _training_data(task, model_dir, t: TrainingOptions, replicas: int,
                   steps: tuple[int, int], validate: bool, log):
    """(the training input; its dataset past the batches of the updates from `steps[0]` to
    `steps[1]`; the dev input or None). Bucket-boundary shapes only for XLA."""
    data = training_input(task, model_dir, batch_tokens=t.batch_tokens, batch_multiple=replicas,
                          seed=t.seed, pad_to_bucket=t.jit_compile, pack=t.pack, log=log)
    dataset = data.dataset
    initial_step, step = steps
    if step > initial_step:  # the batches the restored updates were made of
        log(f"train: skipping the {(step - initial_step) * t.accumulate_steps:,} batches "
            f"trained on before step {step:,}, so that the data order goes on as if the run "
            f"had not stopped")
        dataset = dataset.skip((step - initial_step) * t.accumulate_steps)
    # Repeated (Keras may keep the iterator across epochs); never packed: exact passes.
    dev = (validation_input(task, model_dir, batch_tokens=t.batch_tokens,
                            batch_multiple=replicas, pad_to_bucket=t.jit_compile, log=log)
           if validate and task.has_split("dev") else None)
    return data, dataset, dev


def _finished(step: int, t: TrainingOptions, checkpoint_dir, log) -> bool:
    """Whether a resumed run has nothing left (its steps done, or stopped early), saying so."""
    if step >= t.train_steps:
        log(f"train: already at step {step:,} >= --train_steps {t.train_steps:,}; nothing to do")
        return True
    stopped = t.early_stop_patience and step and checkpoints.plateau(
        checkpoints.read_metrics(checkpoint_dir), t.early_stop_patience)
    if stopped:
        log(f"train: stopped early before, at step {step:,}: {stopped}; nothing to do "
            f"(a larger --early_stop_patience, or 0, trains on)")
    return bool(stopped)


def train(task, model_dir, config: TransformerConfig, training: TrainingOptions, *, strategy,
          dev_metric_fn=None, validate: bool = True, verbose=1, log=print,
          initialise=None, initial_step: int = 0):
    """Trains until the optimizer has made `training.train_steps` updates, resuming (and skipping
    the batches already trained on) if it can; returns the model. One Keras epoch is
    `checkpoint_every` updates and ends with a checkpoint (and `dev_metric_fn`, every
    `dev_metric_every` updates). A fine-tuned model passes `initialise` (`(model, optimizer) ->
    step`, called only without a checkpoint to resume) and `initial_step`."""
    t = training
    model = compile_model(config, strategy, training)
    own_dir = worker_dir(strategy, model_dir)
    checkpoint_dir = own_dir / CHECKPOINT_DIR
    optimizer = checkpoint_optimizer(model.optimizer)
    manager = checkpoints.checkpoint_manager(
        model, optimizer, checkpoint_dir, t.keep_checkpoints,
        keep_best=t.average_last if t.keep_best_by == "dev_metric" else 0)
    step = checkpoints.restore_latest(manager, optimizer)
    if step:
        log(f"train: resumed from {manager.latest_checkpoint} at step {step:,}")
    dev_every_epochs = max(1, -(-t.dev_metric_every // t.checkpoint_every))
    if step and dev_metric_fn is not None and t.dev_metric_every:
        _record_missing_metric(model, step, t.checkpoint_every, dev_every_epochs,
                               checkpoint_dir, dev_metric_fn, log)
    if not step and initialise is not None:
        step = initialise(model, optimizer)
    if _finished(step, t, checkpoint_dir, log):
        return model
    replicas = strategy.num_replicas_in_sync
    _check_memory(model, strategy, task, config, t, resumed=bool(step), log=log)
    data, dataset, dev = _training_data(task, model_dir, t, replicas, (initial_step, step),
                                        validate, log)
    log(f"train: {replicas} replica(s), {data.batches_per_epoch:,} batches per pass over the "
        f"data, batch budget {t.batch_tokens:,} tokens x {t.accumulate_steps} accumulated, "
        f"steps {step:,} -> {t.train_steps:,}")
    callbacks = [cb.StopAtStep(t.train_steps), cb.Throughput(), cb.StepProgbar(
                     t.train_steps, t.accumulate_steps, data.batches_per_epoch, log=log),
                 cb.StepCheckpoint(manager, t.checkpoint_every, start_step=step)]
    if dev_metric_fn is not None and t.dev_metric_every:
        callbacks.append(cb.DevMetric(dev_metric_fn, every_epochs=dev_every_epochs,
                                      checkpoint_dir=checkpoint_dir,
                                      patience=t.early_stop_patience, log=log))
    callbacks.append(cb.StepTensorBoard(str(own_dir / md.LOGS_DIR)))
    try:
        model.fit(dataset, validation_data=dev and dev.dataset,
                  validation_steps=dev and dev.batches_per_epoch,
                  epochs=math.ceil(t.train_steps / t.checkpoint_every),
                  initial_epoch=step // t.checkpoint_every,
                  steps_per_epoch=t.checkpoint_every * t.accumulate_steps,
                  callbacks=callbacks, verbose=verbose, shuffle=False)
    except KeyboardInterrupt:  # Ctrl-C: say where training stands (the CLI prints it)
        kept = manager.latest_checkpoint
        where = f"checkpoint {pathlib.Path(kept).name} kept" if kept else "no checkpoint yet"
        raise KeyboardInterrupt(
            f"at step {int(model.optimizer.iterations.numpy()):,}; {where}") from None
    return model
