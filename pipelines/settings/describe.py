"""The run log's lines about the resolved options: their values and where each came from
(`describe_origins`), and the device's precision and XLA choices (`describe_device`)."""
import dataclasses

from keras_transformer.decoding import DecodingSettings
from pipelines.settings import device_policy
from pipelines.settings.options import RunOptions


def describe_origins(options: RunOptions, every: bool = True) -> str:
    """One log line of the resolved values and where each came from (see the module doc):
    `every` value, or only those not at the paper's defaults, grouped by origin (a device
    default by "device": `describe_device` gives its reason)."""
    values = options.values()
    named = [(name, origin) for name, origin in options.origins.items() if name in values]
    if every:
        return ", ".join(f"{name} {values[name]!r} ({origin})" for name, origin in named)
    paper = dataclasses.asdict(DecodingSettings())
    groups: dict[str, list[str]] = {}
    for name, origin in named:
        if origin != "default" and values[name] != paper.get(name, ...):
            groups.setdefault(origin.split(":")[0], []).append(f"{name}={values[name]}")
    changed = "; ".join(f"{origin}: {' '.join(items)}" for origin, items in groups.items())
    return f"{changed or 'all'} (the rest: the paper's defaults; --verbose lists every value)"


def describe_device(options: RunOptions, device: device_policy.Device) -> str:
    """One log line: the device, the training precision and XLA setting, and why each
    (`device: <why>` for the device's defaults, else the flag or settings.json)."""
    t, origins = options.training, options.origins
    return (f"device: {device.describe()}: {t.precision_policy} "
            f"({origins['precision_policy']}); XLA {'on' if t.jit_compile else 'off'} "
            f"({origins['jit_compile']})")
