"""The quick tier (`pytest -m quick`, tests/tiers.py) keeps up with the suite: every test
module has a quick test, and every entry of the list names a test that exists."""
import ast

from tests.tiers import QUICK, ROOT


def _test_modules():
    return sorted(path.relative_to(ROOT).as_posix()
                  for path in (ROOT / "tests").rglob("test_*.py"))


def _tests_of(module: str) -> set[str]:
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_test_module_has_a_quick_test():
    quick_modules = {entry.split("::", 1)[0] for entry in QUICK}
    missing = [module for module in _test_modules() if module not in quick_modules]
    assert not missing, (f"add one of their fastest tests to QUICK in tests/tiers.py: "
                         f"{missing}")


def test_every_quick_entry_names_a_test():
    wrong = []
    for entry in QUICK:
        module, _, name = entry.partition("::")
        if not (ROOT / module).is_file():
            wrong.append(entry)
        elif name and name.split("[", 1)[0] not in _tests_of(module):
            wrong.append(entry)
    assert not wrong, wrong
    assert len(QUICK) == len(set(QUICK))
