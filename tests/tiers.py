"""The test tiers and how the whole suite is spread over pytest-xdist's workers.

`pytest -m quick` runs the tests marked `quick` on the test itself (`@pytest.mark.quick`, a
quick `pytest.param`, or a module's `pytestmark`): at least one of every test module (and so
of every part: the library, decoding, data, settings, the CLI's errors, the export contract),
chosen to answer in about two minutes. `tests/test_tiers.py` fails when a test module marks
none, so a new module comes with one of its fastest tests marked.

Under xdist (`-n auto --dist loadgroup`, pytest.ini), the tests of a module that share a
module-scoped fixture (a model trained once, a reference run) go to one worker as one group,
so the fixture is built once, and so do all the export tests (`SHARED_GROUPS`: their session
fixtures train and export a model); the other tests are handed out one by one. Modules known
to be slow are handed out first (`SLOW_FIRST`), so that no worker starts one at the end.
"""
from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

SHARED_GROUPS = ("tests/export/", "tests/pipelines/test_multi_worker.py")
"""Folders and modules whose tests run on one worker, one after another: tests/export/'s
share session fixtures worth building once (tests/export/conftest.py trains a model and
exports it); test_multi_worker's each take two free ports (bound, then released for the
cluster's workers: two such tests at once could take each other's)."""

SLOW_FIRST = [
    "tests/test_doc_commands.py",
    "tests/pipelines/test_user_paths.py",
    "tests/pipelines/test_kill_consistency.py",
    "tests/test_backends.py",
    "tests/test_first_hour.py",
    "tests/pipelines/test_backend_training.py",
    "tests/export/",
    "tests/pipelines/test_multi_worker.py",
    "tests/pipelines/parsing/test_run_parsing.py",
    "tests/pipelines/test_cli_errors.py",
    "tests/pipelines/test_run.py",
    "tests/pipelines/test_init_from.py",
    "tests/test_readme.py",
    "tests/pipelines/test_packing.py",
    "tests/pipelines/test_lock.py",
    "tests/test_model.py",
    "tests/test_distribute.py",
]
"""Modules (or folders) whose tests take longest, slowest first (`--durations` on the
2-core machine): handed out before the rest, so that no worker starts one at the end."""


def _rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(SLOW_FIRST) if nodeid.startswith(prefix)),
                len(SLOW_FIRST))


def _module_scoped(item) -> bool:
    """Whether `item` uses a fixture of module (or class) scope (`item.fixturenames` holds
    every fixture it needs): the tests that share it must run on one worker, or each worker
    builds it."""
    return bool(set(item.fixturenames) & _shared_fixtures(pathlib.Path(item.path)))


@functools.cache
def _shared_fixtures(test_file: pathlib.Path) -> frozenset[str]:
    """The module- and class-scoped fixtures that `test_file` can use: its own and its
    folders' conftest.py's, read from their source."""
    files = [test_file, *(folder / "conftest.py" for folder in test_file.parents
                          if folder == ROOT / "tests" or ROOT / "tests" in folder.parents)]
    names = set()
    for path in (f for f in files if f.is_file()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and any(
                        k.arg == "scope" and getattr(k.value, "value", None) in ("module", "class")
                        for k in d.keywords) for d in node.decorator_list):
                names.add(node.name)
    return frozenset(names)


def group_and_order(config, items) -> None:
    """Under `--dist loadgroup`: puts the tests that share a module fixture into one xdist
    group (their module's path) and the slow modules first. Runs before xdist reads the
    groups (on each worker; the order is the same on all of them)."""
    # xdist's workers (whose collections it schedules) see `loadgroup`, its controller `dist`.
    if not (getattr(config.option, "loadgroup", False)
            or getattr(config.option, "dist", "no") == "loadgroup"):
        return
    for item in items:
        if any(item.iter_markers("xdist_group")):
            continue
        shared = [folder for folder in SHARED_GROUPS if item.nodeid.startswith(folder)]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0].rstrip("/")))
        elif _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=lambda item: _rank(item.nodeid))
