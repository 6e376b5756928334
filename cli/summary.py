"""The few lines a run ends with on stderr, so that its result does not scroll away."""
import os
import pathlib
import time

MAX_LINES = 8


def cpu_seconds() -> float:
    """User and system CPU time of this process and of its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def score_line(split: str, scores: dict, metric: str | None) -> str:
    """`test: sacrebleu 31.11 (nrefs:1|...), tokenized_bleu 31.50 (20 sentences)`, metric first."""
    names = [k for k, v in scores.items() if isinstance(v, (int, float)) and not
             isinstance(v, bool) and k not in ("sentences", "decode_seconds")]
    names.sort(key=lambda k: (k != metric, "lowercase" in k, k))
    parts = [f"{k} {scores[k]:.2f}" + (f" ({scores[k + '_signature']})"
                                       if f"{k}_signature" in scores else "")
             for k in names[:2]]
    count = f" ({scores['sentences']:,} sentences)" if "sentences" in scores else ""
    return f"{split}: {', '.join(parts)}{count}"


def lines(started: float, model_dir, results: dict, metric: str | None = None,
          split: str = "test", output=None) -> list[str]:
    """The summary of a run whose stages returned `results`; `output`: translate's file."""
    wall = time.monotonic() - started
    out = [f"== done in {wall:,.1f} s ({cpu_seconds():,.1f} s CPU): {', '.join(results)}"]
    if model_dir:
        from pipelines.model_dir import layout as md  # loaded by then: the run read the dir

        out.append(f"model dir: {model_dir}")
        weights = md.final_weights(model_dir)
        if weights.is_file():
            out.append(f"final weights: {weights}")
    if isinstance(results.get("evaluate"), dict):
        out.append(score_line(split, results["evaluate"], metric))
    if results.get("export"):
        path = pathlib.Path(results["export"])
        version = f" (version {path.name})" if path.name.isdigit() else ""
        out.append(f"export: {path}{version}")
    for stage in ("translate", "score"):
        if isinstance(results.get(stage), int):
            out.append(f"{stage}: {results[stage]:,} lines" + (f" -> {output}" if output else ""))
    return out[:MAX_LINES]
