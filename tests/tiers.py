"""The test tiers and how the whole suite is spread over pytest-xdist's workers.

`pytest -m quick` runs the tests named in `QUICK`: at least one of every test module (and so
of every part: the library, decoding, data, settings, the CLI's errors, the export contract),
chosen to answer in about two minutes. `tests/test_tiers.py` fails when a test module has no
quick test or an entry names no test, so a new module is added here with one of its tests.

Under xdist (`-n auto --dist loadgroup`, pytest.ini), the tests of a module that share a
module-scoped fixture (a model trained once, a reference run) go to one worker as one group,
so the fixture is built once; the other tests are handed out one by one. Groups known to be
slow are handed out first (`SLOW_FIRST`), so that no worker starts a long module at the end.
"""
from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

QUICK = [
    # An entry is a test ("path::name", every parametrisation) or one parametrisation
    # ("path::name[id]").
]


def _matches(nodeid: str, entry: str) -> bool:
    return nodeid == entry or ("[" not in entry and nodeid.split("[", 1)[0] == entry)


def mark_quick(items) -> None:
    """Adds the `quick` mark to the items that `QUICK` names."""
    by_name: dict[str, list] = {}
    for item in items:
        by_name.setdefault(item.nodeid.split("[", 1)[0], []).append(item)
    for entry in QUICK:
        for item in by_name.get(entry.split("[", 1)[0], []):
            if _matches(item.nodeid, entry):
                item.add_marker(pytest.mark.quick)


# Modules whose groups take longest (module fixtures that train or run many subprocesses),
# slowest first: scheduled before everything else. Measured on the 2-core machine.
SLOW_FIRST: list[str] = []


def _module_scoped(item) -> bool:
    """Whether `item` uses a fixture of module (or class) scope: the tests that share it
    must run on one worker, or each worker builds it."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(fixturedef.scope in ("module", "class")
               for name in info.names_closure
               for fixturedef in info.name2fixturedefs.get(name, ()))


def group_and_order(config, items) -> None:
    """Under `--dist loadgroup`: puts the tests that share a module fixture into one xdist
    group (their module's path) and the slow modules first. Runs before xdist reads the
    groups (on each worker; the order is the same on all of them)."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    for item in items:
        if _module_scoped(item) and not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
