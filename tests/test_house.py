"""The shape of the house: imports run one way (the command line, then pipelines/, then
export/, then the library; inside pipelines/, from the stages down to the model directory),
pipelines/ imports export/ only in its export stage, settings resolve without TensorFlow, no
module is over 450 lines, no function over 60, no decoding function takes over 8 parameters,
pipelines/ is sorted by job, private TensorFlow and Keras APIs in one module."""
import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("cli", "pipelines", "export", "keras_transformer")
"""From the top down: a package may import those below it, never those above."""
PIPELINES = ("stages", "training", "settings", "evaluation", "data", "tasks",
             "model_dir", "errors", "durations")
"""pipelines/'s parts from the top down (a sub-package, or a module at its top; `pipelines`
itself, the run log, is below them all): each may import those below it, never those above,
so there is no cycle."""
FRONTS = (ROOT / "pipelines" / "run.py", ROOT / "export" / "run.py")
"""The two scripts that start the command line: fronts of `cli.main`, not library modules."""


def modules(package: str):
    return [path for path in sorted((ROOT / package).rglob("*.py")) if path not in FRONTS]


def imported_modules(path: pathlib.Path) -> set[str]:
    """The modules `path` imports, at module level or inside functions (`from a import b`: `a`
    and `a.b`, since b may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_packages(path: pathlib.Path) -> set[str]:
    """The top-level packages `path` imports."""
    return {name.split(".")[0] for name in imported_modules(path)}


def pipelines_part(module: str) -> str | None:
    """The part of pipelines/ (`PIPELINES`) that a dotted module name lies in, if any."""
    parts = module.split(".")
    return parts[1] if parts[0] == "pipelines" and len(parts) > 1 and parts[1] in PIPELINES \
        else None


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_run_one_way(layer):
    above = set(LAYERS[:LAYERS.index(layer)])
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & above)
             for path in modules(layer) if imported_packages(path) & above}
    assert not wrong


def test_pipelines_parts_import_one_way():
    parts = {path.relative_to(ROOT / "pipelines").parts[0].removesuffix(".py")
             for path in modules("pipelines")} - {"__init__"}
    assert parts == set(PIPELINES), "a new part of pipelines/ needs its place in PIPELINES"
    wrong = {}
    for path in modules("pipelines"):
        own = pipelines_part(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if own is None:
            continue
        above = set(PIPELINES[:PIPELINES.index(own)])
        found = {module for module in imported_modules(path) if pipelines_part(module) in above}
        if found:
            wrong[str(path.relative_to(ROOT))] = sorted(found)
    assert not wrong


def test_the_fronts_only_start_the_command_line():
    for front in FRONTS:
        assert imported_packages(front) - {"pathlib", "sys"} == {"cli"}, front


def test_no_module_is_over_450_lines():
    long = {str(path.relative_to(ROOT)): n for layer in LAYERS for path in modules(layer)
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 450}
    assert not long


def test_pipelines_is_sorted_by_job():
    top = [path.name for path in (ROOT / "pipelines").glob("*.py")]
    assert len(top) <= 12, top


def test_pipelines_imports_export_only_in_its_export_stage():
    """The SavedModel is the library's (`keras_transformer.serving`); export/ holds the fronts,
    the op check and the CTranslate2 conversion, which only the export stage runs."""
    wrong = sorted(str(path.relative_to(ROOT)) for path in modules("pipelines")
                   if "export" in imported_packages(path)
                   and path != ROOT / "pipelines" / "stages" / "export.py")
    assert not wrong


PRIVATE_API = re.compile(r"tensorflow\.python|keras\.src|pywrap_|\._flatten_layers")


def test_private_tensorflow_and_keras_apis_live_in_one_module():
    """`keras_transformer/tf_internals.py` holds every private API the product needs, each with
    the reason and the versions it was checked against."""
    wrong = sorted(str(path.relative_to(ROOT)) for layer in LAYERS for path in modules(layer)
                   if PRIVATE_API.search(path.read_text(encoding="utf-8"))
                   and path != ROOT / "keras_transformer" / "tf_internals.py")
    assert not wrong


def test_settings_resolve_without_importing_tensorflow_or_keras(tmp_path):
    """The command line resolves its settings (and refuses bad flags) before TensorFlow loads:
    `python -X importtime` of a resolution lists neither TensorFlow nor Keras."""
    import subprocess
    import sys

    code = ("from pipelines.settings import resolver; "
            f"resolver.resolve({{'model_dir': {str(tmp_path / 'model')!r}, "
            "'beam_size': 8, 'quantize': 'int8'}); print('resolved')")
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "resolved", run.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
              if line.startswith("import time:")}
    assert not {name for name in loaded
                if name.split(".")[0] in ("tensorflow", "keras", "tensorflow_text", "jax")}


MAX_FUNCTION_LINES = 60
"""A function's body, docstring excluded, at most this long."""
MAX_DECODING_PARAMETERS = 8
"""A decoding function (keras_transformer/decoding/) takes at most this many (self excluded)."""


def _functions_of(source: str) -> list:
    return [node for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _functions(path: pathlib.Path) -> list:
    return _functions_of(path.read_text(encoding="utf-8"))


def body_lines(function: ast.FunctionDef) -> int:
    """Lines from the first statement after the docstring to the last."""
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def parameter_count(function: ast.FunctionDef) -> int:
    a = function.args
    names = [arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return (len(names) - (names[:1] in (["self"], ["cls"]))
            + (a.vararg is not None) + (a.kwarg is not None))


def test_no_function_is_over_60_lines():
    long = {f"{path.relative_to(ROOT)}:{fn.name}": n for layer in LAYERS
            for path in modules(layer) for fn in _functions(path)
            if (n := body_lines(fn)) > MAX_FUNCTION_LINES}
    assert not long


def test_no_decoding_function_takes_over_8_parameters():
    wide = {f"{path.relative_to(ROOT)}:{fn.name}": n
            for path in (ROOT / "keras_transformer" / "decoding").rglob("*.py")
            for fn in _functions(path) if (n := parameter_count(fn)) > MAX_DECODING_PARAMETERS}
    assert not wide


@pytest.mark.parametrize("source, rule", [
    ("def f():\n    '''doc'''\n" + "    x = 1\n" * 61, body_lines),
    ("def f(a, b, c, d, e, f, g, h, i):\n    pass\n", parameter_count),
])
def test_the_rules_catch_a_function_one_over(source, rule):
    """What the two tests above measure: 61 body lines, 9 parameters."""
    [function] = _functions_of(source)
    assert rule(function) == {body_lines: 61, parameter_count: 9}[rule]
