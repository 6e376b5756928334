"""The run log's lines about the resolved recipe, rendered from the recipe alone."""
import dataclasses

from keras_transformer.decoding import BeamSearch
from pipelines.settings import device_policy
from pipelines.settings.options import Recipe
from pipelines.tasks import Task


def describe_origins(options: Recipe, every: bool = True) -> str:
    """The "options:" block: `every` value with its origin, or those off the paper's defaults."""
    values = options.values()
    named = [(name, origin) for name, origin in options.origins.items() if name in values]
    if every:
        return _block("options:", [f"{name} {values[name]!r} ({origin})"
                                   for name, origin in named])
    paper = dataclasses.asdict(BeamSearch())
    groups: dict[str, list[str]] = {}
    for name, origin in named:
        if origin != "default" and values[name] != paper.get(name, ...):
            groups.setdefault(origin.split(":")[0], []).append(f"{name}={values[name]}")
    rows = [_block(f"  {origin}:", items) for origin, items in groups.items()]
    return "\n".join(["options: the rest at the paper's defaults (--verbose lists every value)"
                      if rows else "options: all at the paper's defaults", *rows])


WIDTH = 100  # columns of the options block


def _block(head: str, items: list[str]) -> str:
    """`head` and `items` space-separated, wrapped at WIDTH columns, later lines 4 spaces in."""
    lines = [head]
    for item in items:
        if len(lines[-1]) + 1 + len(item) > WIDTH and lines[-1].strip() != head.strip():
            lines.append("   ")
        lines[-1] += " " + item
    return "\n".join(lines)


def describe_device(options: Recipe, device: device_policy.Device) -> str:
    """One log line: the device, the training precision and XLA setting, each with its origin."""
    t, origins = options.training, options.origins
    return (f"device: {device.describe()}: {t.precision_policy} "
            f"({origins['precision_policy']}); XLA {'on' if t.jit_compile else 'off'} "
            f"({origins['jit_compile']})")


def describe_decoding(options: Recipe) -> str:
    """The recipe's decoding, as evaluate and the dev metric run it."""
    d, b = options.decoding, options.decoding.beam
    return (f"beam {b.beam_size}, alpha {b.alpha}, extra length {b.extra_length}, stop rule "
            f"{b.stop_rule}, max input length {d.max_input_length}, {d.precision}")


def describe_sampling(options: Recipe) -> str:
    """The recipe's sampling, as translate runs it."""
    s = options.decoding.sampling
    return (f"top-k {s.topk or 'all'}, top-p {s.topp}, temperature {s.temperature}, seed "
            f"{s.seed}, alpha {s.alpha}, extra length {s.extra_length}")


def describe_model(options: Recipe, config) -> str:
    """The training log's model block: the preset (and overrides) and its config's fields."""
    overrides = options.model.config_overrides
    head = f"train: model {options.model.preset}" + (f" with {overrides}" if overrides else "")
    return _block(head + ":", [f"{name}={value}" for name, value in config.to_dict().items()])


def describe_task(options: Recipe, task: Task) -> str:
    """One log line: the task, its direction and lengths, the vocabulary, preset and decoding."""
    return (f"task {task.name}: {task.source_lang}->{task.target_lang}, vocab "
            f"{options.data.vocab_size:,}, max length {task.max_source_length}/"
            f"{task.max_target_length}, preset {options.model.preset}, "
            f"{describe_decoding(options)}")


def describe_short_run(options: Recipe) -> str | None:
    """A warning line when training ends inside the warm-up (Eq. 3's peak unreached); else None."""
    t = options.training
    if t.train_steps >= t.warmup_steps:
        return None
    return (f"train: warning: --train_steps {t.train_steps:,} ends inside the warm-up "
            f"(--warmup_steps {t.warmup_steps:,}, {options.origins.get('warmup_steps')}): the "
            f"learning rate rises all run and reaches {t.train_steps / t.warmup_steps:.0%} of "
            f"its peak; give more steps or a shorter --warmup_steps")
