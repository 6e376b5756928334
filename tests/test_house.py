"""The shape of the house: imports run one way (the command line, then pipelines/, then
export/, then the library; inside pipelines/, from the stages down to the model directory), no
module is over 450 lines, pipelines/ is sorted by job."""
import ast
import pathlib

import pytest

pytestmark = pytest.mark.quick  # the quick tier (tests/tiers.py)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("cli", "pipelines", "export", "keras_transformer")
"""From the top down: a package may import those below it, never those above."""
PIPELINES = ("load", "stages", "training", "settings", "evaluation", "data", "tasks",
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
