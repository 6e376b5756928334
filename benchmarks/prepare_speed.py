"""Time `--mode prepare` on a WMT14-sized corpus, then the training input pipeline.

Builds a parallel corpus of ``--pairs`` pairs (default 4.5M, WMT14 En-De's size) from any
parallel text (default: Multi30k train under $KT_DATA_DIR): pair i joins ``--join`` lines
of the input, chosen so that the pairs differ (line a, then a + s, a + 2s ... with a stride s
that changes every pass over the input). Two Multi30k lines a side give ~26 subword tokens a
side, the 236M tokens of WMT14's 4.5M pairs; the real counts are printed.

Then runs ``pipelines/run.py --mode prepare --task text`` on it in a subprocess from a fresh
model dir, measuring wall time, the peak resident memory of the largest process and of all
its processes together (sampled every 0.2 s), and the longest gap between two lines on its
stderr (progress lines are due at least every 30 s). Last it times
``pipelines.data.prepare.training_input`` at the paper's 25,000-token batches: the time to the
first batch (the shuffle buffer filling) and ``--batches`` batches after it.

A table goes to stdout; prepare's own log, time-stamped, and this script's notes to stderr.

    python benchmarks/prepare_speed.py                       # 4.5M pairs: minutes
    python benchmarks/prepare_speed.py --pairs 300000        # a quick run
    python benchmarks/prepare_speed.py --source a.en --target a.de --join 1
"""
from __future__ import annotations

import gzip
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import threading
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

flags.DEFINE_integer("pairs", 4_500_000, "Pairs in the corpus (WMT14 En-De: 4.5M).")
flags.DEFINE_string("source", None, "Source side of the parallel text the corpus is built "
                    "from (.gz allowed; default $KT_DATA_DIR/multi30k/train.en[.gz]).")
flags.DEFINE_string("target", None, "Target side (default $KT_DATA_DIR/multi30k/train.de[.gz]).")
flags.DEFINE_integer("join", 2, "Input lines joined into one side of a pair.")
flags.DEFINE_string("work_dir", "/tmp/kt_prepare_speed", "Where the corpus and the model dir "
                    "go (the corpus is reused while its size and inputs are the same).")
flags.DEFINE_integer("vocab_size", None, "Vocabulary size (default: task text's, 32,000).")
flags.DEFINE_integer("batch_tokens", 25_000, "Training batch budget in tokens per side.")
flags.DEFINE_integer("batches", 200, "Training batches timed after the first.")
FLAGS = flags.FLAGS


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_text(path: pathlib.Path) -> list[str]:
    """The lines of a (gzipped) UTF-8 text file."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8").splitlines()


def default_input(lang: str) -> pathlib.Path:
    data_dir = pathlib.Path(os.environ.get("KT_DATA_DIR", ROOT.parent / "shared" / "data"))
    plain = data_dir / "multi30k" / f"train.{lang}"
    return plain if plain.is_file() else plain.with_suffix(f".{lang}.gz")


def build_corpus(source: pathlib.Path, target: pathlib.Path, pairs: int, join: int,
                 out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """``pairs`` pairs of ``join`` joined input lines a side (see the module docstring)."""
    stamp = out / "stamp"
    want = f"{source.resolve()} {target.resolve()} {pairs} {join}\n"
    src_out, tgt_out = out / "train.src", out / "train.tgt"
    if stamp.is_file() and stamp.read_text() == want:
        log(f"corpus: reusing {out}")
        return src_out, tgt_out
    src_lines, tgt_lines = read_text(source), read_text(target)
    if len(src_lines) != len(tgt_lines) or not src_lines:
        raise app.UsageError(f"{source} and {target}: {len(src_lines):,} and "
                             f"{len(tgt_lines):,} lines; give two aligned, non-empty files")
    n = len(src_lines)
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    start = time.monotonic()
    with open(src_out, "w", encoding="utf-8") as fs, open(tgt_out, "w", encoding="utf-8") as ft:
        for i in range(pairs):
            first, stride = i % n, 1 + (i // n) * 7919
            rows = [(first + k * stride) % n for k in range(join)]
            fs.write(" ".join(src_lines[r] for r in rows) + "\n")
            ft.write(" ".join(tgt_lines[r] for r in rows) + "\n")
    stamp.write_text(want)
    log(f"corpus: wrote {pairs:,} pairs to {out} in {time.monotonic() - start:.0f} s")
    return src_out, tgt_out


def tree_rss(root: int) -> tuple[int, int]:
    """Resident bytes of the largest process among ``root`` and its descendants, and of all
    of them together (Linux /proc; processes that end meanwhile are skipped)."""
    parent, rss = {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{name}/stat").read_text()
            statm = pathlib.Path(f"/proc/{name}/statm").read_text()
        except OSError:
            continue
        parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[int(name)] = int(statm.split()[1]) * page
    tree, frontier = set(), {root}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - tree
    sizes = [rss[pid] for pid in tree if pid in rss]
    return max(sizes, default=0), sum(sizes)


class TreeMemory:
    """Samples ``tree_rss`` of a process every ``period`` seconds; keeps the peaks."""

    def __init__(self, pid: int, period: float = 0.2):
        self.pid, self.period = pid, period
        self.largest = self.total = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            largest, total = tree_rss(self.pid)
            self.largest, self.total = max(self.largest, largest), max(self.total, total)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def run_prepare(src: pathlib.Path, tgt: pathlib.Path, model_dir: pathlib.Path) -> dict:
    """Run prepare in a subprocess; return wall time, memory, stderr gaps and its log."""
    command = [sys.executable, str(ROOT / "pipelines" / "run.py"), "--mode=prepare",
               "--task=text", f"--train_src={src}", f"--train_tgt={tgt}",
               f"--model_dir={model_dir}"]
    if FLAGS.vocab_size:
        command.append(f"--vocab_size={FLAGS.vocab_size}")
    log("prepare: " + " ".join(command))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    memory = TreeMemory(process.pid)
    lines, last, gap = [], start, 0.0
    for line in process.stderr:
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        lines.append((now - start, line.rstrip("\n")))
        log(f"{now - start:7.1f} s | {line.rstrip()}")
    process.wait()
    end = time.monotonic()
    memory.close()
    if process.returncode != 0:
        raise SystemExit(f"prepare failed with exit status {process.returncode}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": end - start, "gap": max(gap, end - last), "lines": lines,
            "largest": max(memory.largest, children.ru_maxrss * 1024), "total": memory.total}


def phases(lines: list[tuple[float, str]], wall: float) -> list[tuple[str, float]]:
    """Seconds of each phase, from when the log lines that end them appeared."""
    marks = [("start-up", "== prepare"), ("clean", "clean: train"),
             ("vocab sample", "vocab: read"), ("vocab BPE", "vocab: wrote"),
             ("tokenize", "cache: wrote"), ("stats and buckets", "  total ")]
    out, previous = [], 0.0
    for name, prefix in marks:
        at = next((t for t, line in lines if line.startswith(prefix)), None)
        if at is not None:
            out.append((name, at - previous))
            previous = at
    out.append(("exit", wall - previous))
    return out


def time_input(src: pathlib.Path, tgt: pathlib.Path, model_dir: pathlib.Path) -> dict:
    """Time ``training_input``: to the first batch, then ``--batches`` batches."""
    import numpy as np

    from pipelines.data import prepare
    from pipelines.tasks import get_task

    task = get_task("text", train_src=str(src), train_tgt=str(tgt))
    start = time.monotonic()
    data = prepare.training_input(task, model_dir, batch_tokens=FLAGS.batch_tokens,
                                  log=lambda m: None)
    batches = iter(data.dataset)
    next(batches)
    first = time.monotonic() - start
    real = padded = 0
    start = time.monotonic()
    for _ in range(FLAGS.batches):
        (source, target_in), _ = next(batches)
        source, target_in = source.numpy(), target_in.numpy()
        real += int(np.count_nonzero(source) + np.count_nonzero(target_in))
        padded += source.size + target_in.size
    seconds = time.monotonic() - start
    return {"first": first, "seconds": seconds, "real": real, "padded": padded}


def gb(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main(argv):
    del argv
    import numpy as np

    work = pathlib.Path(FLAGS.work_dir)
    source = pathlib.Path(FLAGS.source) if FLAGS.source else default_input("en")
    target = pathlib.Path(FLAGS.target) if FLAGS.target else default_input("de")
    src, tgt = build_corpus(source, target, FLAGS.pairs, FLAGS.join, work / "corpus")
    model_dir = work / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    cpus = len(os.sched_getaffinity(0))
    result = run_prepare(src, tgt, model_dir)
    lengths = np.load(next((model_dir / "cache").glob("text-train-*/lengths.npy")))
    tokens = lengths.astype(np.int64).sum(axis=0)
    timing = time_input(src, tgt, model_dir)
    size = src.stat().st_size + tgt.stat().st_size
    rows = [
        ("corpus", f"{len(lengths):,} pairs, {int(tokens.sum()):,} subword tokens (source "
                   f"{int(tokens[0]):,}, target {int(tokens[1]):,}), {size / 1e9:.2f} GB, "
                   f"from {source.name} / {target.name} x{FLAGS.join}"),
        ("prepare wall", f"{result['wall']:.1f} s ({result['wall'] / 60:.2f} min) on {cpus} "
                         f"CPU{'s' if cpus > 1 else ''}"),
        ("phases", ", ".join(f"{name} {s:.1f} s" for name, s in phases(result["lines"],
                                                                        result["wall"]))),
        ("peak RSS", f"{gb(result['largest'])} largest process (getrusage), "
                     f"{gb(result['total'])} all processes together (sampled every 0.2 s)"),
        ("progress", f"longest gap between stderr lines {result['gap']:.1f} s"),
        ("input pipeline", f"first batch after {timing['first']:.1f} s; {FLAGS.batches} "
                           f"batches of {FLAGS.batch_tokens:,} tokens in "
                           f"{timing['seconds']:.1f} s: {FLAGS.batches / timing['seconds']:.1f} "
                           f"batches/s, {timing['real'] / timing['seconds']:,.0f} tokens/s "
                           f"(both sides, padding {1 - timing['real'] / timing['padded']:.1%} "
                           "not counted)"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    app.run(main)
