"""The API reference: every public name of the library (`__all__` of its packages) has a
docstring, and pdoc builds the reference pages from them (the command of docs/library.md)."""
import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

PACKAGES = ("keras_transformer", "keras_transformer.data", "keras_transformer.decoding",
            "keras_transformer.layers", "keras_transformer.serving")


def _imported_from(package: str, name: str) -> str:
    """The module `name` of `package` comes from (pdoc reads a constant's docstring, the string
    under its assignment, in the module that assigns it): the package's import of it, or its
    `lazy_names` map."""
    source = pathlib.Path(importlib.import_module(package).__file__).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and name in {a.name for a in node.names}:
            return node.module
        if isinstance(node, ast.Dict):
            for key, names in zip(node.keys, node.values):
                if name in ast.literal_eval(names):
                    return ast.literal_eval(key)
    return package


@pytest.mark.quick
def test_every_public_name_has_a_docstring():
    import pdoc.doc

    missing = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:  # names load on first use (keras_transformer.lazy)
            getattr(module, name)
        documented = pdoc.doc.Module.from_name(package)
        for name in importlib.import_module(package).__all__:
            doc = documented.get(name)
            if isinstance(doc, pdoc.doc.Variable) and not doc.docstring.strip():
                doc = pdoc.doc.Module.from_name(_imported_from(package, name)).get(name)
            if doc is None or not doc.docstring.strip():
                missing.append(f"{package}.{name}")
    assert not missing


def test_pdoc_builds_a_page_per_package_naming_every_public_name(tmp_path):
    """docs/library.md's command, in a fresh interpreter: pdoc imports the library itself."""
    run = subprocess.run([sys.executable, "-m", "pdoc", "-o", str(tmp_path), *PACKAGES],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "does not resolve" not in run.stderr, run.stderr[-3000:]
    for package in PACKAGES:
        page = (tmp_path / (package.replace(".", "/") + ".html")).read_text(encoding="utf-8")
        absent = [name for name in importlib.import_module(package).__all__
                  if f'id="{name}"' not in page]
        assert not absent, (package, absent)
