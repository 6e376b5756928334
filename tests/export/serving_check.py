"""Loads an exported SavedModel the ways a server does and runs both signatures.

Standalone on purpose: it imports only TensorFlow and tensorflow-text (never this project),
as a serving process would. `tests/export/test_saved_model.py` runs it with `sys.executable`
in a directory outside the repository and compares its output with in-process results.

    python serving_check.py SAVED_MODEL_DIR REQUEST_JSON RESULT_JSON

REQUEST_JSON: {"sources": [str, ...], "source_ids": [[int, ...], ...] (0-padded),
"calls": [{"id": str, "signature": str, "inputs": {name: {"dtype": str, "value": ...}}}, ...]
(optional)}. Calls run in order, in both loaders and in the same loaded model, so a call
after one that failed shows the model still answers; a failing call records the error's
class name and message instead of outputs.
RESULT_JSON gets, for each loader ("tf2": `tf.saved_model.load`; "tf1": the TF1 session
loader TensorFlow Serving's C++ loader mirrors), the outputs of `serving_default` on the
sources, on an empty batch, and of `translate_ids` on the ids; translations as hex of their
UTF-8 bytes so they compare byte for byte. Also the signature defs as the TF1 loader sees
them and which non-TensorFlow modules got imported.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the SentencePiece ops)

SERVING = "serving_default"
IDS = "translate_ids"


def _plain(outputs):
    """Signature outputs -> JSON-able values (strings as hex, exact)."""
    plain = {}
    for name, value in outputs.items():
        value = np.asarray(value)
        if value.dtype == object:
            plain[name] = {"dtype": "string", "shape": list(value.shape),
                           "values": [bytes(v).hex() for v in value.reshape(-1)]}
        else:
            plain[name] = {"dtype": str(value.dtype), "shape": list(value.shape),
                           "values": value.tolist()}
    return plain


def _array(spec):
    """{"dtype", "value"} -> numpy array (strings as UTF-8 bytes objects)."""
    if spec["dtype"] == "string":
        value = np.array(spec["value"], dtype=object)
        flat = [v.encode("utf-8") for v in value.reshape(-1)]
        return np.array(flat, dtype=object).reshape(value.shape)
    return np.array(spec["value"], dtype=spec["dtype"])


def _run_calls(calls, run_one):
    """Runs every call; errors (e.g. InvalidArgument from bad options) are recorded."""
    results = {}
    for call in calls:
        inputs = {name: _array(spec) for name, spec in call["inputs"].items()}
        try:
            results[call["id"]] = {"outputs": run_one(call["signature"], inputs)}
        except tf.errors.OpError as e:
            results[call["id"]] = {"error": type(e).__name__, "message": e.message[:2000]}
    return results


def run_tf2(saved_model_dir, sources, source_ids, calls=()):
    loaded = tf.saved_model.load(saved_model_dir)
    serve, ids_fn = loaded.signatures[SERVING], loaded.signatures[IDS]

    def run_one(signature, inputs):
        function = loaded.signatures[signature]
        return _plain(function(**{name: tf.constant(value) for name, value in inputs.items()}))

    return {
        "sources": _plain(serve(source=tf.constant(sources, tf.string))),
        "empty": _plain(serve(source=tf.constant([], tf.string))),
        "ids": _plain(ids_fn(source_ids=tf.constant(source_ids, tf.int32))),
        "calls": _run_calls(calls, run_one),
    }


def run_tf1(saved_model_dir, sources, source_ids, calls=()):
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(
            session, [tf.saved_model.SERVING], saved_model_dir)
        signatures = meta_graph.signature_def

        def run(signature_name, input_name, value):
            signature = signatures[signature_name]
            feeds = {signature.inputs[input_name].name: value}
            fetches = {name: info.name for name, info in signature.outputs.items()}
            return _plain(session.run(fetches, feeds))

        empty = np.zeros([0], dtype=object)
        result = {
            "sources": run(SERVING, "source", np.array([s.encode("utf-8") for s in sources],
                                                       dtype=object)),
            "empty": run(SERVING, "source", empty),
            "ids": run(IDS, "source_ids", np.array(source_ids, dtype=np.int32)),
        }

        def run_one(signature_name, inputs):
            signature = signatures[signature_name]
            feeds = {signature.inputs[name].name: value for name, value in inputs.items()}
            fetches = {name: info.name for name, info in signature.outputs.items()}
            return _plain(session.run(fetches, feeds))

        result["calls"] = _run_calls(calls, run_one)
        result["signature_defs"] = {
            name: {"method_name": sig.method_name,
                   "inputs": {k: [tf.dtypes.as_dtype(v.dtype).name,
                                  [d.size for d in v.tensor_shape.dim]]
                              for k, v in sig.inputs.items()},
                   "outputs": {k: [tf.dtypes.as_dtype(v.dtype).name,
                                   [d.size for d in v.tensor_shape.dim]]
                               for k, v in sig.outputs.items()}}
            for name, sig in signatures.items() if not name.startswith("__")}
    return result


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    saved_model_dir, request_path, result_path = argv[1:]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    result = {
        "tf2": run_tf2(saved_model_dir, request["sources"], request["source_ids"],
                       request.get("calls", [])),
        "tf1": run_tf1(saved_model_dir, request["sources"], request["source_ids"],
                       request.get("calls", [])),
        "versions": {"tensorflow": tf.__version__,
                     "tensorflow_text": tensorflow_text.__version__},
        # Anything from the project here would mean the SavedModel is not standalone.
        "project_modules": sorted(
            name for name in sys.modules
            if name.split(".")[0] in ("keras_transformer", "pipelines", "export")),
    }
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
