"""The quick tier (`pytest -m quick`, tests/conftest.py) keeps up with the suite: every test
module marks at least one of its tests quick."""
import ast

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def _test_modules():
    return sorted(path.relative_to(ROOT).as_posix()
                  for path in (ROOT / "tests").rglob("test_*.py"))


def _marks_quick(module: str) -> bool:
    """Whether the module's code names `pytest.mark.quick` (a decorator, a `pytest.param`'s
    marks or `pytestmark`), not in a string or comment."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Attribute) and node.attr == "quick"
               and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
               for node in ast.walk(tree))


def test_every_test_module_has_a_quick_test():
    missing = [module for module in _test_modules() if not _marks_quick(module)]
    assert not missing, f"mark one of their fastest tests @pytest.mark.quick: {missing}"
