"""The device a run trains on (`detect`), and the precision and XLA setting that suit it: pure
functions of a `Device`, each returning its choice and a reason for the run log (the flags
--mixed_precision and --jit_compile override them)."""

import dataclasses
import pathlib
import re

BFLOAT16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # bfloat16 hardware (else emulated, slower)
BFLOAT16_GPU = (8, 0)  # compute capability from which GPUs have bfloat16 tensor cores
FLOAT16_GPU = (7, 0)  # from which they have float16 ones (below it float32 is as fast)
CPU_XLA_MIN_D_MODEL = 512  # d_model from which a CPU in float32 compiles its step with XLA


@dataclasses.dataclass(frozen=True)
class Device:
    """What the run trains on, for precision and XLA (default: a CPU without bfloat16)."""

    kind: str = "cpu"                                  # or "gpu": then it trains on the GPUs
    compute_capability: tuple[int, int] | None = None  # the GPUs' lowest; None if unreported
    cpu_flags: frozenset[str] = frozenset()            # which `BFLOAT16_CPU_FLAGS` it has
    cpu_devices: int = 1                               # --num_cpu_devices
    backend: str = "tensorflow"                        # --backend

    def describe(self) -> str:
        """"gpu (compute capability 8.0)", "cpu (avx512_bf16)", "cpu", "cpu, jax", ..."""
        shown = "" if self.backend == "tensorflow" else f", {self.backend}"
        if self.kind == "gpu":
            return f"gpu (compute capability {_capability(self)}){shown}"
        details = sorted(self.cpu_flags) + ([f"{self.cpu_devices} devices"]
                                            if self.cpu_devices > 1 else [])
        return (f"cpu ({', '.join(details)})" if details else "cpu") + shown


def _capability(device: Device) -> str:
    cc = device.compute_capability
    return f"{cc[0]}.{cc[1]}" if cc else "unknown"


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The bfloat16 flags (`BFLOAT16_CPU_FLAGS`) named in /proc/cpuinfo's text."""
    return frozenset(flag for flag in BFLOAT16_CPU_FLAGS if re.search(rf"\b{flag}\b", cpuinfo))


def _gpu_capabilities(backend: str) -> list[tuple[int, int] | None]:
    """The compute capability of each GPU the backend trains on (None where unreported)."""
    if backend == "jax":
        import jax

        def capability(device):
            major, _, minor = str(getattr(device, "compute_capability", "")).partition(".")
            return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None

        return [capability(d) for d in jax.devices() if d.platform == "gpu"]
    import tensorflow as tf

    details = (tf.config.experimental.get_device_details(gpu).get("compute_capability")
               for gpu in tf.config.list_physical_devices("GPU"))
    return [tuple(c) if c else None for c in details]


def detect(cpu_devices: int = 1, backend: str = "tensorflow") -> Device:
    """This machine's `Device`; queries physical devices only (safe before any strategy)."""
    try:
        cpuinfo = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    capabilities = _gpu_capabilities(backend)
    lowest = None if not capabilities or None in capabilities else min(capabilities)
    return Device("gpu" if capabilities else "cpu", lowest, cpu_flags(cpuinfo), cpu_devices,
                  backend)


def precision(device: Device) -> tuple[str, str]:
    """(the default Keras dtype policy on `device`, why)."""
    if device.kind == "gpu":
        cc, shown = device.compute_capability, _capability(device)
        if cc is None:
            return "float32", "GPU compute capability unknown"
        if cc >= BFLOAT16_GPU:
            return "mixed_bfloat16", f"GPU compute capability {shown} has bfloat16 tensor cores"
        if cc >= FLOAT16_GPU:
            return "mixed_float16", (f"GPU compute capability {shown} has float16 tensor "
                                     f"cores, no bfloat16 ones; loss scaling on")
        return "float32", f"GPU compute capability {shown} has no float16 tensor cores"
    if device.backend != "tensorflow":
        return "float32", (f"{device.backend} compiles every step with XLA, whose CPU kernels "
                           f"do not use the bfloat16 hardware")
    if device.cpu_flags:
        return "mixed_bfloat16", (f"the CPU multiplies bfloat16 natively "
                                  f"({', '.join(sorted(device.cpu_flags))})")
    return "float32", "the CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)"


def mixed_policy(device: Device) -> str:
    """The policy --mixed_precision means on `device`: the default if mixed, else by kind."""
    name, _ = precision(device)
    if name != "float32":
        return name
    return "mixed_float16" if device.kind == "gpu" else "mixed_bfloat16"


def jit_compile(device: Device, d_model: int, policy: str) -> tuple[bool, str]:
    """(whether training compiles its step with XLA by default, why) for this model width."""
    if device.backend != "tensorflow":
        return True, f"Keras compiles every {device.backend} step (jax.jit: XLA)"
    if device.kind == "gpu":
        return True, "on GPUs XLA fuses the step's kernels"
    if device.cpu_devices > 1:
        return False, "XLA cannot reach variables mirrored on another logical CPU"
    if policy == "mixed_bfloat16":
        return False, "XLA's CPU kernels do not use the bfloat16 hardware that TensorFlow's do"
    if d_model >= CPU_XLA_MIN_D_MODEL:
        return True, f"d_model {d_model} >= {CPU_XLA_MIN_D_MODEL}: faster with XLA on a CPU"
    return False, f"d_model {d_model} < {CPU_XLA_MIN_D_MODEL}: slower with XLA on a CPU"
