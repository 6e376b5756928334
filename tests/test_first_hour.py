"""A new user's first hour: help at once, a missing backend named with its install command,
no TensorFlow C++ log lines unless asked, a readable options line, a distribution name of
our own; files others can read, logs without redraws, reruns that redo nothing, long lines
reported, the fine-tuning command of README.md and docs/training.md, Ctrl-C in one line
(issue: the first hour)."""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from keras_transformer.native_logs import LIBRARY_LINE
from tests.pipelines.run_helpers import (ROOT, RUN, TINY_MODEL, options_block, run_command,
                                         run_stages)

pytestmark = pytest.mark.xdist_group("test_first_hour")  # its module fixtures: one worker

EXPORT = ROOT / "export" / "run.py"
CPP_LOG_LINE = re.compile(r"^([IWEF]\d{4} |WARNING: All log messages before absl)", re.M)
"""A line TensorFlow's C++ logging writes (glog/absl format)."""


def run(args, script=RUN, shim=None, **env):
    """A CLI in a subprocess, as a user runs it: TF_CPP_MIN_LOG_LEVEL not set. `shim`: a
    directory put first on PYTHONPATH (modules that fail to import)."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment.update(env)
    if shim is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(shim)] + [p for p in [environment.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=environment, cwd=ROOT, timeout=600)


def failing_imports(tmp_path, *names):
    """A directory of packages that raise ImportError when imported."""
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    return tmp_path


@pytest.mark.parametrize("script", [RUN, EXPORT], ids=["pipelines", "export"])
@pytest.mark.parametrize("flag", [pytest.param("--help", marks=pytest.mark.quick), "--helpfull"])
def test_help_exits_0_before_tensorflow_is_imported(tmp_path, script, flag):
    """With TensorFlow unimportable, help still prints: it never imports TensorFlow."""
    result = run([flag], script=script, shim=failing_imports(tmp_path, "tensorflow"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "  --model_dir: " in result.stdout and "  --[no]verbose: " in result.stdout
    assert ("--verbosity: " in result.stdout) == (flag == "--helpfull")  # absl's own flags


@pytest.mark.quick
def test_a_missing_backend_is_one_line_naming_its_extra(tmp_path):
    result = run(["--backend", "jax", "--model_dir", str(tmp_path / "m")],
                 shim=failing_imports(tmp_path, "jax"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f'{RUN}: error: --backend jax needs jax, which is not installed: '
        f'pip install -e ".[jax]"']
    assert not (tmp_path / "m").exists()  # before any work


def test_no_cpp_log_lines_unless_verbose(tmp_path, shared_data):
    """A one-line error stays the last line, after the options block (within 100 columns)
    and the stage; with --verbose TensorFlow's lines and every option with its origin are
    shown."""
    args = ["--mode", "evaluate", "--model_dir", str(tmp_path / "none")]
    quiet = run(args, KT_DATA_DIR=str(shared_data))
    assert quiet.returncode == 2
    assert not CPP_LOG_LINE.search(quiet.stderr), quiet.stderr
    lines = quiet.stderr.strip().splitlines()
    options = options_block(quiet.stderr).splitlines()
    assert lines == options + [lines[-2], lines[-1]], lines
    assert lines[-2].startswith("== evaluate ")
    assert lines[-1].startswith("error: ") and "config.json" in lines[-1]
    assert all(len(line) <= 100 for line in options), options
    assert "train_steps=1000" in options_block(quiet.stderr)
    assert "keep_checkpoints" not in options_block(quiet.stderr)  # a default
    verbose = run(args + ["--verbose"], KT_DATA_DIR=str(shared_data))
    assert verbose.returncode == 2
    assert CPP_LOG_LINE.search(verbose.stderr)
    assert "keep_checkpoints 20 (default)" in verbose.stderr
    # The user's own TF_CPP_MIN_LOG_LEVEL wins.
    chosen = run(args, KT_DATA_DIR=str(shared_data), TF_CPP_MIN_LOG_LEVEL="0")
    assert CPP_LOG_LINE.search(chosen.stderr)


@pytest.mark.quick
def test_the_distribution_has_a_name_of_its_own():
    """`keras-transformer` on the package index is another project: ours installs as
    `keras-transformer-nmt` (import name `keras_transformer`), as the README says."""
    name = subprocess.run([sys.executable, "setup.py", "--name"], capture_output=True,
                          text=True, cwd=ROOT, check=True).stdout.strip().splitlines()[-1]
    assert name == "keras-transformer-nmt"
    assert f"`{name}`" in (ROOT / "README.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------- a job run as a user runs it
TINY_JOB = [*TINY_MODEL, "--train_steps=20", "--checkpoint_every=10", "--average_last=2",
            "--extra_length=8", "--eval_sentences=20"]


def as_user(umask=0o022):
    """The child as a shell starts it: this umask, and Ctrl-C's default action (a process
    started in the background of a non-interactive shell ignores SIGINT)."""
    def setup():
        os.umask(umask)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return setup


def job(args, data_dir, wait=True):
    """`pipelines/run.py` as a user starts it: a fresh interpreter, no TF C++ log level,
    umask 022, Ctrl-C's default action."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["KT_DATA_DIR"] = str(data_dir)
    command = [sys.executable, str(RUN), *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=as_user())
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=900, preexec_fn=as_user())


def rerun(args, data_dir, stdin=""):
    """A later command on the job's model dir, where what is checked is what the run does and
    prints, not its process: with the user's environment (no TF C++ log level)."""
    return run_command(args, data_dir, timeout=900, stdin=stdin, user_env=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, shared_data):
    """The default stages (prepare ... export) of a tiny job under umask 022, to a pipe."""
    model_dir = tmp_path_factory.mktemp("job") / "model"
    result = job([f"--model_dir={model_dir}", *TINY_JOB], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir, result


def test_files_are_readable_by_others_and_logs_hold_no_redraws(finished):
    model_dir, result = finished
    unreadable = [str(p.relative_to(model_dir)) for p in model_dir.rglob("*")
                  if p.is_file() and p.stat().st_mode & 0o044 != 0o044]
    assert not unreadable
    for name in ("config.json", "settings.json", "spm.model", "final.weights.h5",
                 "eval/test.first20.hyp", "eval/test.first20.json", "export/1/saved_model.pb"):
        assert (model_dir / name).stat().st_mode & 0o777 == 0o644, name
    for stream in (result.stdout, result.stderr):
        assert "\r" not in stream and "\x1b" not in stream
    # A plain line per checkpoint interval, saying what it counts.
    assert "Epoch" not in result.stderr
    heads = [line for line in result.stderr.splitlines() if line.startswith("train: steps ")]
    assert [line.split(" (")[0] for line in heads] == ["train: steps 0 to 10 of 20",
                                                       "train: steps 10 to 20 of 20"], heads
    assert heads[0].endswith(" (0.0 passes over the data so far)")
    # Each split, the vocabulary and each token cache is reported once: never "reusing" what
    # this run just made.
    made = [line for line in result.stderr.splitlines()
            if line.startswith(("clean: ", "vocab: ", "cache: "))]
    assert [line for line in made if line.startswith("clean: ")], made
    assert not [line for line in made if "reusing" in line], made


def test_tensorboard_plots_against_the_training_step(finished):
    import tensorflow as tf

    model_dir, _ = finished
    steps = {}
    for events in (model_dir / "logs").rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                steps.setdefault((events.parent.name, value.tag), []).append(event.step)
    assert steps[("train", "epoch_loss")] == [10, 20]
    assert steps[("validation", "epoch_loss")] == [10, 20]


def test_a_rerun_of_a_finished_job_does_no_work_again(finished, shared_data):
    model_dir, first = finished
    again = rerun([f"--model_dir={model_dir}", *TINY_JOB], shared_data)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in (model_dir / "export").iterdir()) == ["1"]
    for said in ("train: already at step 20", "average: ", "evaluate: ", "export: "):
        assert any(line.startswith(said) and ("nothing to do" in line or "up to date" in line)
                   for line in again.stderr.splitlines()), (said, again.stderr[-2000:])
    assert again.stdout == first.stdout  # the same scores, printed again
    # Printed once a run: the tables by the first run, a reused input by its first reader.
    assert "train buckets" not in again.stderr and "corpus (" not in again.stderr
    assert "prepare: the corpus and bucket tables are the ones the model's first run " \
           "printed (" in again.stderr
    reused = [line for line in again.stderr.splitlines() if ": reusing " in line]
    assert reused and len(reused) == len(set(reused)), reused
    run_stages("export", shared_data, model_dir=str(model_dir), export_version=2)
    assert sorted(p.name for p in (model_dir / "export").iterdir()) == ["1", "2"]


def test_a_line_longer_than_the_model_reads_is_reported(finished, shared_data):
    model_dir, _ = finished
    lines = ["A dog runs.", " ".join(["A man rides a bicycle."] * 100), "Two cats sleep."]
    result = rerun([f"--model_dir={model_dir}", "--mode=translate"], shared_data,
                   stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.stdout.splitlines()) == 3
    warnings = [line for line in result.stderr.splitlines() if "the model reads" in line]
    assert len(warnings) == 1 and warnings[0].startswith("translate: line 2: ")
    assert any(line.startswith("translate: 3 lines; 1 cut to the first")
               for line in result.stderr.splitlines()), result.stderr[-2000:]


def fine_tuning_command(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    match = re.search(r"```bash\n(python pipelines/run.py --init_from .*?)\n```", text, re.S)
    assert match, f"{doc} lost its fine-tuning command"
    return match.group(1).replace("\\\n", " ")


def test_the_readme_fine_tuning_command_runs(finished, shared_data, tmp_path):
    """As printed in docs/training.md (and, the same, in README.md), with the source and files
    replaced and fewer steps; the text task has no test data, so the default stages skip
    evaluate and say so."""
    command = fine_tuning_command("docs/training.md")
    assert fine_tuning_command("README.md") == command
    model_dir, _ = finished
    for side in ("en", "de"):
        lines = (shared_data / "multi30k" / f"val.{side}").read_text().splitlines()[:200]
        (tmp_path / f"in_domain.{side}").write_text("\n".join(lines) + "\n")
    replaced = {"runs/multi30k_ende": str(model_dir), "runs/tuned": str(tmp_path / "tuned"),
                "in_domain.en": str(tmp_path / "in_domain.en"),
                "in_domain.de": str(tmp_path / "in_domain.de"),
                "--train_steps 100": "--train_steps 4"}
    for old, new in replaced.items():
        assert old in command, old
        command = command.replace(old, new)
    result = rerun(command.split()[2:], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "== evaluate: skipped, task text has no test data" in result.stderr
    assert (tmp_path / "tuned" / "export" / "1" / "saved_model.pb").is_file()


def test_ctrl_c_stops_training_in_one_line_and_the_rerun_resumes(prepared, shared_data,
                                                                tmp_path):
    """The same command's prepare stage finds the vocabulary and token caches of the
    session's prepared copy up to date (preparing is tested above, in the finished job)."""
    shutil.copytree(prepared, tmp_path / "model")
    # 120 steps: Ctrl-C comes within 0.5 s of ckpt-20, 100 steps before the end.
    args = [f"--model_dir={tmp_path / 'model'}", *TINY_MODEL, "--train_steps=120",
            "--checkpoint_every=10", "--mode=prepare,train"]
    process = job(args, shared_data, wait=False)
    checkpoint = tmp_path / "model" / "checkpoints" / "ckpt-20.index"
    for _ in range(600):
        if checkpoint.exists() or process.poll() is not None:
            break
        time.sleep(0.5)
    assert checkpoint.exists(), process.communicate()[1][-3000:]
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"interrupted at step [\d,]+; checkpoint ckpt-\d+ kept; run the same "
                        r"command to resume", last), stderr[-3000:]
    assert "Traceback" not in stderr
    resumed = rerun(args, shared_data)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "train: resumed from" in resumed.stderr
    assert (tmp_path / "model" / "checkpoints" / "ckpt-120.index").exists()


# ------------------------------------------------ quiet, with its result at the end (issue 43)
def test_a_job_prints_no_library_log_line_and_ends_with_its_result(finished):
    """TF_CPP_MIN_LOG_LEVEL unset: prepare, train, average, evaluate and export (op check
    subprocess included) print only the project's lines; the last 8 lines name the test
    score with its signature and the export's path and version."""
    model_dir, result = finished
    noise = [line for line in result.stderr.splitlines() if LIBRARY_LINE.match(line.encode())]
    assert not noise, noise[:5]
    assert "normalizer.cc" not in result.stderr
    last = result.stderr.strip().splitlines()[-8:]
    summary = last[[line.startswith("== done in ") for line in last].index(True):]
    assert "CPU" in summary[0], summary
    text = "\n".join(summary)
    assert re.search(r"^test: sacrebleu \d+\.\d\d \(nrefs:1\|case:mixed\|", text, re.M), text
    assert f"export: {model_dir / 'export' / '1'} (version 1)" in text, text
    assert f"final weights: {model_dir / 'final.weights.h5'}" in text
    # The op check is one line; its table of ops only with --verbose.
    assert "AddV2" not in result.stderr
    assert sum("OK: every op is registered" in line for line in result.stderr.splitlines()) == 1


ERROR_LINE = "kt-test: an error line TensorFlow wrote"
SITECUSTOMIZE = f"""
import importlib.abc, importlib.util, sys


class AfterEvaluate(importlib.abc.MetaPathFinder):
    \"\"\"After the evaluate stage, TensorFlow's C++ logging writes an error line (tf.print's
    kernel, LOG(ERROR)).\"\"\"

    def find_spec(self, name, path, target=None):
        if name != "pipelines.stages.evaluate":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            evaluate = module.run_evaluate

            def run_evaluate(*args, **kwargs):
                result = evaluate(*args, **kwargs)
                import tensorflow as tf
                tf.print({ERROR_LINE!r}, output_stream=tf.compat.v1.logging.error)
                return result
            module.run_evaluate = run_evaluate
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, AfterEvaluate())
"""


def test_an_error_line_tensorflow_writes_during_a_run_reaches_the_user(finished, shared_data,
                                                                      tmp_path):
    """TF_CPP_MIN_LOG_LEVEL unset: the run leaves TensorFlow's C++ log level alone, so an
    error line TensorFlow writes during `--mode evaluate` (`SITECUSTOMIZE`) reaches stderr;
    its start-up lines still do not."""
    model_dir = shutil.copytree(finished[0], tmp_path / "model")
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    result = run_command([f"--model_dir={model_dir}", "--mode=evaluate"], shared_data,
                         timeout=900, user_env=True, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if ERROR_LINE in line]
    assert len(errors) == 1 and re.match(r"E\d{4} ", errors[0]), result.stderr[-2000:]
    noise = [line for line in result.stderr.splitlines() if LIBRARY_LINE.match(line.encode())]
    assert not noise, noise[:5]


def test_a_copied_model_dir_rerun_writes_no_second_version(finished, shared_data, tmp_path):
    """Judged by the content of the weights and the settings, not by paths: a `cp -r` copy
    (new paths, new modification times) rerun with the same command re-averages, re-evaluates
    and re-exports nothing; an export elsewhere leaves the model dir's export/ up to date. An
    export made with other library versions is redone."""
    model_dir, _ = finished
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(model_dir), str(copy)], check=True)
    versions = sorted(p.name for p in (copy / "export").iterdir())
    again = rerun([f"--model_dir={copy}", *TINY_JOB], shared_data)
    assert again.returncode == 0, again.stderr[-3000:]
    for stage in ("average", "evaluate", "export"):
        assert any(line.startswith(f"{stage}: ") and ("nothing to do" in line or "up to date"
                                                       in line)
                   for line in again.stderr.splitlines()), (stage, again.stderr[-2000:])
    assert sorted(p.name for p in (copy / "export").iterdir()) == versions
    record = (copy / "made_from" / "export.json").read_text()
    assert str(model_dir) not in record and str(copy) not in record  # relative paths
    elsewhere = tmp_path / "served"
    export = run(["--model_dir", str(copy), "--export_dir", str(elsewhere)], script=EXPORT,
                 KT_DATA_DIR=str(shared_data))
    assert export.returncode == 0, export.stderr[-3000:]
    assert export.stdout.strip().splitlines() == [str(elsewhere / "1")]
    assert not [line for line in export.stderr.splitlines()
                if LIBRARY_LINE.match(line.encode())], export.stderr[-2000:]
    assert export.stderr.strip().splitlines()[-1] == f"export: {elsewhere / '1'} (version 1)"
    run_stages("export", shared_data, model_dir=str(copy))
    assert sorted(p.name for p in (copy / "export").iterdir()) == versions
    # Made with another TensorFlow (an upgrade since): exported again, as a new version.
    made = json.loads((copy / "made_from" / "export.json").read_text())
    made["inputs"]["versions"]["tensorflow"] = "2.0.0"
    (copy / "made_from" / "export.json").write_text(json.dumps(made))
    run_stages("export", shared_data, model_dir=str(copy))
    assert len(list((copy / "export").iterdir())) == len(versions) + 1


def test_evaluate_never_replaces_a_recorded_result(finished, shared_data, tmp_path):
    """Other sentences, another checkpoint, other decoding settings, and the user's own test
    files (for the multi30k_ende task, which has its own): each writes a result named by what
    differs and listed in eval/index.json, with no --override_saved, and leaves the recorded
    one (eval/test.first20.*) byte-identical; the plain rerun still finds it. The score of
    the given files is sacreBLEU's on the .hyp written for them."""
    import sacrebleu

    model_dir, _ = finished
    eval_dir = model_dir / "eval"
    recorded = {name: (eval_dir / name).read_bytes()
                for name in ("test.first20.json", "test.first20.hyp")}
    own = {side: tmp_path / f"own.{side}" for side in ("en", "de")}
    for side, path in own.items():
        lines = (shared_data / "multi30k" / f"val.{side}").read_text(encoding="utf-8")
        path.write_text("".join(lines.splitlines(keepends=True)[:12]), encoding="utf-8")
    digest = hashlib.sha256(own["en"].read_bytes() + b"\0" + own["de"].read_bytes() + b"\0"
                            ).hexdigest()[:8]
    for given, name in (({"eval_sentences": 10}, "test.first10"),
                        ({"eval_sentences": 20, "checkpoint": "ckpt-10"},
                         "test.ckpt-10.first20"),
                        ({"eval_sentences": 20, "beam_size": 2}, "test.beam_size2.first20"),
                        ({"test_src": str(own["en"]), "test_tgt": str(own["de"])},
                         f"test.files-{digest}")):
        ran = run_stages("evaluate", shared_data, model_dir=str(model_dir), **given)
        assert f"{eval_dir / name}.json and .hyp" in ran.log
        for file, data in recorded.items():
            assert (eval_dir / file).read_bytes() == data, (given, file)
        index = json.loads((eval_dir / "index.json").read_text())
        assert index[name]["file"] == f"{name}.json"
    # The last run scored the user's own files: printed under their reference file's name.
    assert ran.out.splitlines()[0].startswith(f"{own['de']} sacrebleu: ")
    scores = json.loads((eval_dir / f"test.files-{digest}.json").read_text())
    hypotheses = (eval_dir / f"test.files-{digest}.hyp").read_text(encoding="utf-8")
    references = own["de"].read_text(encoding="utf-8").splitlines()
    assert scores["sentences"] == 12 and scores["decoding"]["beam_size"] == 4
    assert scores["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(
        hypotheses.splitlines(), [references]).score, abs=1e-9)
    assert index["test.beam_size2.first20"]["decoding"]["beam_size"] == 2
    assert json.loads((model_dir / "settings.json").read_text())["decoding"]["beam_size"] == 4
    again = run_stages("evaluate", shared_data, model_dir=str(model_dir), eval_sentences=20)
    assert "is up to date" in again.log, again.log[-2000:]  # the recorded one


def test_chosen_checkpoints_average_into_a_file_of_their_own(finished, shared_data):
    """--average_checkpoints writes average.<names>.weights.h5 and leaves final.weights.h5
    as it is; --checkpoint decodes that file, under a result named by it, as it decodes the
    checkpoint itself; a rerun is up to date; an unknown name is one line."""
    model_dir, _ = finished
    final = (model_dir / "final.weights.h5").read_bytes()
    average = {"model_dir": str(model_dir), "average_checkpoints": ["ckpt-10"]}
    made = run_stages("average", shared_data, **average)
    named = model_dir / "average.ckpt-10.weights.h5"
    assert f"average: 1 checkpoint(s) (ckpt-10) -> {named}" in made.log
    assert (model_dir / "final.weights.h5").read_bytes() == final
    assert "is up to date" in run_stages("average", shared_data, **average).log
    hypotheses = []
    for checkpoint, name in (("ckpt-10", "test.ckpt-10.first20"),
                             (named.name, "test.average.ckpt-10.first20")):
        run_stages("evaluate", shared_data, model_dir=str(model_dir), eval_sentences=20,
                   checkpoint=checkpoint)
        hypotheses.append((model_dir / "eval" / f"{name}.hyp").read_text(encoding="utf-8"))
    assert hypotheses[0] == hypotheses[1] and hypotheses[0].count("\n") == 20
    missing = rerun([f"--model_dir={model_dir}", "--mode=average",
                     "--average_checkpoints=ckpt-10,ckpt-99"], shared_data)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].endswith(
        "no checkpoint ckpt-99 (have: ckpt-10, ckpt-20); --average_checkpoints takes these "
        "names")


def test_one_call_from_python_translates_as_the_translate_stage(finished, shared_data,
                                                                 tmp_path):
    """`keras_transformer.load(model_dir)`: the translate stage's translations of
    test_2016_flickr, line for line; per-call overrides and n-best with scores."""
    from keras_transformer import load

    model_dir, _ = finished
    source = shared_data / "multi30k" / "test_2016_flickr.en"
    stage = run_stages("translate", shared_data, model_dir=str(model_dir), input=str(source))
    lines = source.read_text(encoding="utf-8").splitlines()
    translator = load(model_dir)
    assert translator.translate(lines) == stage.out.splitlines()
    assert translator.search.beam_size == 4  # settings.json's
    best = translator.translate(lines[:3], n_best=2, beam_size=3)
    assert [len(row) for row in best] == [2, 2, 2]
    assert all(first[1] >= second[1] for first, second in best)
    assert translator.translate(["", "  "]) == ["", ""]


def test_translating_a_file_resumes_after_ctrl_c(finished, shared_data, tmp_path):
    """SIGINT while --output is written, then the same command: the file equals an
    uninterrupted run's (sampled, so that the chunks' seeds must line up too)."""
    model_dir, _ = finished
    source = tmp_path / "in.en"
    source.write_text("".join((shared_data / "multi30k" / name).read_text(encoding="utf-8")
                              for name in ("val.en", "test_2016_flickr.en")), encoding="utf-8")
    args = [f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
            "--sampling_temperature=2", "--seed=3"]
    whole = job([*args, f"--output={tmp_path / 'whole.de'}"], shared_data)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert not [line for line in whole.stderr.splitlines()
                if LIBRARY_LINE.match(line.encode())], whole.stderr[-2000:]  # SentencePiece's
    last = whole.stderr.strip().splitlines()[-1]
    assert last == f"translate: 2,014 lines -> {tmp_path / 'whole.de'}", last  # the summary
    output = tmp_path / "out.de"
    record = tmp_path / ".out.de.partial.json"
    process = job([*args, f"--output={output}"], shared_data, wait=False)
    while not record.exists() and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].endswith("run the same command to resume")
    assert not output.exists() and (tmp_path / ".out.de.partial").exists()
    resumed = rerun([*args, f"--output={output}"], shared_data)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(r"translate: resuming .* after its first [\d,]+ lines", resumed.stderr)
    assert output.read_bytes() == (tmp_path / "whole.de").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en", "out.de", "whole.de"]
