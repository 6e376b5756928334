"""Checks that a SavedModel uses only ops stock TensorFlow Serving registers.

Serving links core TensorFlow's and tensorflow-text's ops only. Each op type of saved_model.pb
(nodes of every meta graph and library function; function calls are listed apart) is, as a fresh
Python process finds it (so that nothing this one imported can register an op):
* ``core``: registered after ``import tensorflow`` alone;
* ``tensorflow_text``: registered only after also importing it, by one of its op libraries;
* a failure otherwise, and always for the Python-callback ops (`PyFunc`, `PyFuncStateless`,
  `EagerPyFunc`, `NumpyFunction`), which need a Python interpreter that no server has.

    python export/op_check.py EXPORT_DIR/1        # prints the ops; exit status 1 on failure
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from keras_transformer import native_logs, tf_internals

FORBIDDEN_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "NumpyFunction"})

CORE = "core"
TENSORFLOW_TEXT = "tensorflow_text"

@dataclasses.dataclass
class OpReport:
    """What `check_ops` found: `ops` maps each op type to "core", "tensorflow_text" or why it
    fails; `libraries` each tensorflow_text op to its op library (.so); `function_calls` are node
    types naming library functions; `versions` the probing process's TF and tensorflow-text."""

    saved_model_dir: str
    ops: dict[str, str]
    libraries: dict[str, str]
    function_calls: list[str]
    versions: dict[str, str]

    @property
    def problems(self) -> dict[str, str]:
        return {op: where for op, where in self.ops.items() if where not in (CORE, TENSORFLOW_TEXT)}

    @property
    def ok(self) -> bool:
        return not self.problems

    def _versions(self) -> str:
        return (f"TensorFlow {self.versions.get('tensorflow')}, tensorflow-text "
                f"{self.versions.get('tensorflow_text')}")

    def summary(self) -> str:
        """The verdict in one line (a run prints this unless --verbose asks for the table)."""
        verdict = self.format().splitlines()[-1]
        if not self.ok:
            return verdict
        text = sum(where == TENSORFLOW_TEXT for where in self.ops.values())
        return (f"{self.saved_model_dir}: {len(self.ops)} op types, {text} of them "
                f"tensorflow-text's ({self._versions()}). {verdict}")

    def format(self) -> str:
        """A table of the ops, then the verdict."""
        lines = [f"{self.saved_model_dir}: {len(self.ops)} op types ({self._versions()})"]
        width = max((len(op) for op in self.ops), default=0)
        for op in sorted(self.ops):
            where = self.ops[op]
            if where == TENSORFLOW_TEXT:
                where = f"{where} ({self.libraries.get(op)})"
            elif where != CORE:
                where = f"FAIL: {where}"
            lines.append(f"  {op:<{width}}  {where}")
        if self.function_calls:
            lines.append(f"  + {len(self.function_calls)} direct calls of library functions")
        lines.append("OK: every op is registered by core TensorFlow or tensorflow-text."
                     if self.ok else f"FAILED: {len(self.problems)} op type(s) stock TensorFlow "
                     f"Serving cannot run: {', '.join(sorted(self.problems))}")
        return "\n".join(lines)


def _saved_model_path(saved_model_dir) -> pathlib.Path:
    path = pathlib.Path(saved_model_dir)
    pb = path / "saved_model.pb"
    if not pb.is_file():
        versions = (sorted(p.name for p in path.iterdir() if p.name.isdigit())
                    if path.is_dir() else [])
        hint = (f" It holds versions {', '.join(versions)}: pass {path / versions[-1]}."
                if versions else "")
        raise FileNotFoundError(f"{pb}: no SavedModel here.{hint}")
    return pb


def graph_op_types(saved_model_dir) -> tuple[set[str], set[str]]:
    """(op types, called library functions' names) of a SavedModel's graphs and functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(_saved_model_path(saved_model_dir).read_bytes())
    node_types, function_names = set(), set()
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        node_types.update(node.op for node in graph.node)
        for function in graph.library.function:
            function_names.add(function.signature.name)
            node_types.update(node.op for node in function.node_def)
    calls = node_types & function_names
    return node_types - calls, calls


def probe_registry(op_names, python=None, timeout=300) -> dict:
    """Asks a fresh Python process where each op is registered (see the module docstring)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="op_check_") as cwd:
        result = subprocess.run([python or sys.executable, "-c", tf_internals.OP_REGISTRY_PROBE],
                                input=json.dumps(sorted(op_names)), capture_output=True,
                                text=True, cwd=cwd, env=env, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"the op registry probe failed (exit {result.returncode}); is "
                           f"tensorflow-text installed for {python or sys.executable}?\n"
                           f"{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def check_ops(saved_model_dir, python=None) -> OpReport:
    """Classifies every op type of a SavedModel (one version, e.g. ``export/1``); `report.ok`
    says whether it can be served. `python`: the interpreter to probe (default: this one)."""
    ops, calls = graph_op_types(saved_model_dir)
    probe = probe_registry(ops, python=python)
    tf_internals.warn_unless_checked("tensorflow", probe["tensorflow"])
    core, after_text = set(probe["core"]), set(probe["after_text"])
    libraries = {op: lib for op, lib in probe["text_library"].items() if lib}
    verdict = {}
    for op in ops:
        if op in FORBIDDEN_OPS:
            verdict[op] = "Python callback op: needs a Python interpreter in the server"
        elif op in core:
            verdict[op] = CORE
        elif op in after_text and op in libraries:
            verdict[op] = TENSORFLOW_TEXT
        elif op in after_text:
            verdict[op] = ("registered after importing tensorflow_text but by none of its "
                           "op libraries")
        else:
            verdict[op] = "not registered by TensorFlow or tensorflow-text (custom op?)"
    versions = {"tensorflow": probe["tensorflow"], "tensorflow_text": probe["tensorflow_text"]}
    return OpReport(saved_model_dir=str(saved_model_dir), ops=verdict, libraries=libraries,
                    function_calls=sorted(calls), versions=versions)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(f"usage: python export/op_check.py SAVED_MODEL_DIR\n\n{__doc__}", file=sys.stderr)
        return 2
    try:
        with native_logs.quiet():  # TensorFlow's start-up lines
            report = check_ops(argv[0])
    except (FileNotFoundError, RuntimeError) as e:
        print(f"op_check: {e}", file=sys.stderr)
        return 2
    print(report.format())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
