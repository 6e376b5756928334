"""The shape of the house: imports run one way (the command line, then pipelines/, then
export/, then the library), no module is over 450 lines, pipelines/ is sorted by job."""
import ast
import pathlib

import pytest

pytestmark = pytest.mark.quick  # the quick tier (tests/tiers.py)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("cli", "pipelines", "export", "keras_transformer")
"""From the top down: a package may import those below it, never those above."""
FRONTS = (ROOT / "pipelines" / "run.py", ROOT / "export" / "run.py")
"""The two scripts that start the command line: fronts of `cli.main`, not library modules."""


def modules(package: str):
    return [path for path in sorted((ROOT / package).rglob("*.py")) if path not in FRONTS]


def imported_packages(path: pathlib.Path) -> set[str]:
    """The top-level packages `path` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_run_one_way(layer):
    above = set(LAYERS[:LAYERS.index(layer)])
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & above)
             for path in modules(layer) if imported_packages(path) & above}
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
