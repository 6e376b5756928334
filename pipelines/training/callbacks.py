"""The training stage's Keras callbacks: checkpoints, step count, progress, dev metric."""

import time

import keras

from pipelines.data.progress import PLAIN_INTERVAL, Progress
from pipelines.model_dir import checkpoints


class StepCheckpoint(keras.callbacks.Callback):
    """Saves a checkpoint with `manager` every `every` optimizer steps and at the end."""

    def __init__(self, manager, every, start_step=0):
        super().__init__()
        self.manager = manager
        self.every = int(every)
        self._saved = int(start_step)  # a resumed run's step is already saved

    def _save(self):
        # Once an update (accumulated batches share one); never an untrained ckpt-0.
        step = int(self.model.optimizer.iterations.numpy())
        if step != self._saved and step > 0:
            self.manager.save(checkpoint_number=step, check_interval=False)
            self._saved = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) % self.every == 0:
            self._save()

    def on_train_end(self, logs=None):
        self._save()


class StopAtStep(keras.callbacks.Callback):
    """Ends `fit` when the optimizer has made `train_steps` updates (resumes included)."""

    def __init__(self, train_steps):
        super().__init__()
        self.train_steps = int(train_steps)

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.train_steps:
            self.model.stop_training = True


class StepProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar over the batches each epoch will run, each epoch opening with "train:
    steps A to B of N"; with verbose 2 (no terminal) a line at least once a minute instead, and
    each epoch's metrics as numbers people read (`readable`)."""

    def __init__(self, train_steps, accumulate_steps=1, batches_per_pass=None, log=print):
        super().__init__()
        self.train_steps, self.accumulate_steps = int(train_steps), int(accumulate_steps)
        self.batches_per_pass, self.log = batches_per_pass, log
        self.progress = None

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.verbose == 2:
            self.progress = Progress("train", self.train_steps, "steps", self.log,
                                     already=self._step(), interval=PLAIN_INTERVAL)

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        if self.progress is None:
            return super().on_train_batch_end(batch, logs)
        self.progress.update(self._step())

    def on_epoch_end(self, epoch, logs=None):
        if self.progress is None:
            return super().on_epoch_end(epoch, logs)
        self.log(f"train: step {self._step():,}: " + ", ".join(
            f"{name} {readable(value)}" for name, value in (logs or {}).items()))

    def set_params(self, params):
        super().set_params(params)
        self.steps_per_epoch = params["steps"]
        self.epochs = 1  # Keras then prints no "Epoch i/n" line: ours says what it counts

    def on_epoch_begin(self, epoch, logs=None):
        step = self._step()
        self.target = min(self.steps_per_epoch, (self.train_steps - step) * self.accumulate_steps)
        if self.verbose:
            passes = (f" ({step * self.accumulate_steps / self.batches_per_pass:.1f} passes "
                      f"over the data so far)" if self.batches_per_pass else "")
            self.log(f"train: steps {step:,} to {step + self.target // self.accumulate_steps:,}"
                     f" of {self.train_steps:,}{passes}")
        super().on_epoch_begin(epoch, logs)


def readable(value) -> str:
    """A metric as people read it: ``2450.0005 -> "2,450"``, ``3.55921 -> "3.559"``,
    ``0.00055234 -> "0.0005523"``."""
    value = float(value)
    return f"{value:,.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.4g}"


class StepTensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback, logging each epoch's scalars at the optimizer's step."""

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(int(self.model.optimizer.iterations.numpy()), logs)


class Throughput(keras.callbacks.Callback):
    """Adds target tokens/s (from the `target_tokens` metric) and the learning rate to the logs;
    the rate counts from the end of each epoch's first batch, leaving compilation out."""

    def on_epoch_begin(self, epoch, logs=None):
        self._start = None

    def on_train_batch_end(self, batch, logs=None):
        if logs is None or "target_tokens" not in logs:
            return
        tokens, now = float(logs["target_tokens"]), time.perf_counter()
        if self._start is None:
            self._start = (tokens, now)
        elif now > self._start[1]:
            logs["tokens_per_sec"] = (tokens - self._start[0]) / (now - self._start[1])
        logs["learning_rate"] = float(self.model.optimizer.learning_rate)  # at this step

    on_epoch_end = on_train_batch_end


class DevMetric(keras.callbacks.Callback):
    """Every `every_epochs` epochs, scores the dev sample with `evaluate_fn` (`model -> float`),
    records it for this step's checkpoint in `checkpoint_dir`, and stops training after
    `patience` evaluations (earlier runs' included) without a new best (`checkpoints.plateau`)."""

    def __init__(self, evaluate_fn, every_epochs=1, checkpoint_dir=None, patience=0, log=print):
        super().__init__()
        self.evaluate_fn, self.checkpoint_dir, self.log = evaluate_fn, checkpoint_dir, log
        self.every_epochs, self.patience = max(1, int(every_epochs)), int(patience)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs or logs is None:
            return
        name = self.evaluate_fn.metric_name
        logs[name] = value = self.evaluate_fn(self.model)
        if self.checkpoint_dir is None:
            return
        step = int(self.model.optimizer.iterations.numpy())
        metrics = checkpoints.record_metric(self.checkpoint_dir, step, name, value)
        reason = checkpoints.plateau(metrics, self.patience) if self.patience else None
        if reason:
            self.log(f"train: early stop at step {step:,}: {reason}")
            self.model.stop_training = True
