"""Package names that import their module on first use (PEP 562), so that importing a light
part of the library (settings, constants, the model dir's format) never starts TensorFlow."""
import importlib
import sys


def lazy_names(package: str, where: dict[str, list[str]]):
    """(`__getattr__`, `__dir__`, `__all__`) of `package`, whose names are `where`'s values."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name):
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_of[name]), name)
        importlib.import_module(package).__dict__[name] = value  # later reads skip this
        return value

    def __dir__():
        return sorted(set(module_of) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__, sorted(module_of)


def load_when_documented(package: str) -> None:
    """Loads every name of `package` now when pdoc is documenting it: pdoc reads a module's
    `__dict__`, where a PEP 562 name appears only once something has read it."""
    if "pdoc" in sys.modules:
        module = sys.modules[package]
        for name in module.__all__:
            getattr(module, name)
