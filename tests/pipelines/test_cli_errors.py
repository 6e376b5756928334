"""Every user mistake through both CLIs: one line on stderr naming what to fix, exit 2, no
traceback, and nothing already written changed."""
import gzip
import itertools
import shutil

import pytest

from tests.pipelines.run_helpers import ROOT, run_command

pytestmark = pytest.mark.xdist_group("test_cli_errors")  # its module fixtures: one worker

TINY = {"num_layers": 1, "d_model": 32, "d_ff": 64, "num_heads": 2}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, shared_data):
    """A model dir as training leaves it (untrained tiny weights: decoding is not the point)."""
    from pipelines.settings import options, resolver
    from pipelines.data import vocab
    from pipelines.model_dir import layout as md

    path = tmp_path_factory.mktemp("cli") / "model"
    files = []
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            files.append(path.parent / f"train.{lang}")
            files[-1].write_text("".join(itertools.islice(f, 2000)), encoding="utf-8")
    vocab.build_vocab(files, path, 600, log=lambda _: None)
    run = resolver.resolve({"model_dir": str(path), "vocab_size": 600, "config_override": TINY,
                           "extra_length": 5})
    config = options.config_for(run, 600)
    md.save_config(path, config)
    md.build_model(config).save_weights(md.final_weights(path))
    settings = run.settings(trained=True)
    settings["spm_sha256"] = vocab.model_digest((path / "spm.model").read_bytes())
    md.save_settings(path, settings)
    return path


def _snapshot(directory):
    return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def refused(args, message, shared_data, watch, script="pipelines/run.py"):
    """Runs the CLI; asserts exit 2, `message` in its one error line, and `watch` unchanged."""
    before = _snapshot(watch)
    result = run_command(args, shared_data, timeout=300, script=ROOT / script)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "error: " in last and message in last, last
    assert _snapshot(watch) == before
    return last


# The resolver's refusals are tested in-process (tests/pipelines/test_options.py); these
# show that each kind reaches the user as one line and exit status 2.
@pytest.mark.parametrize("args, message", [
    pytest.param(["--mode=translate,bogus"], "--mode bogus: choose from prepare, train",
                 marks=pytest.mark.quick),
    (["--beam_size=abc"], "flag --beam_size=abc"),
    (["--mode=evaluate", "--beam_size=0"], "--beam_size 0: must be >= 1"),
    (["--mode=evaluate", "--quantize=int8"], "--quantize: only --mode export and translate"),
    (["--mode=train", "--keep_checkpoints=2", "--average_last=5"],
     "--keep_checkpoints 2 is below --average_last 5"),
    (["--mode=train", "--keep_best_by=dev_metric"],
     "--keep_best_by dev_metric needs --dev_metric_every N"),
    (["--mode=average", "--early_stop_patience=3"],
     "--early_stop_patience 3 needs --dev_metric_every N"),
    (["--mode=evaluate", "--test_trees=my.mrg"],
     "task multi30k_ende takes no --test_trees; its data flags are --data_dir"),
    (["--mode=evaluate", "--test_src=my.en"], "--test_src and --test_tgt go together"),
    (["--mode=train", "--config=big"], "--config 'big' differs from 'multi30k_small'"),
    (["--mode=translate", "--input=/nonexistent/input.en"], "/nonexistent/input.en: cannot open"),
    (["--mode=score", "--input=/nonexistent/input.en"], "--mode score needs --input SOURCES and --target"),
    (["--mode=evaluate", "--terms=/dev/null"], "--terms: only --mode translate takes"),
    (["--mode=translate", "--terms=/dev/null", "--sampling_topk=5"],
     "--terms: beam search only; drop --sampling_topk"),
    (["--backend=torch"], "flag --backend=torch: value should be one of <tensorflow|jax>"),
    (["--backend=jax", "--mode=translate"], "--mode translate: runs TensorFlow's serving graph"),
])
def test_flag_mistakes(model_dir, shared_data, args, message):
    refused([f"--model_dir={model_dir}", *args], message, shared_data, model_dir)


def test_new_model_dir_mistakes(tmp_path, shared_data):
    new = tmp_path / "new"
    refused([f"--model_dir={new}", "--config=nope"], "--config: Unknown preset 'nope'",
            shared_data, tmp_path)
    refused([f"--model_dir={new}", "--config_override=dmodel=64"],
            "--config_override: dmodel is not a TransformerConfig field", shared_data, tmp_path)
    refused([f"--model_dir={new}", "--task=wmt15"], "unknown task 'wmt15'", shared_data,
            tmp_path)
    refused([f"--model_dir={new}", "--batch_tokens=100"],  # before the vocabulary is built
            "a batch of 100 tokens cannot hold 1 sentence(s) of 128 tokens (bucket 128). "
            "Raise batch_tokens to at least 128", shared_data, tmp_path)
    assert not new.exists()


def test_undecodable_input_keeps_an_existing_output(model_dir, tmp_path, shared_data):
    source = tmp_path / "input.en"
    source.write_bytes(b"A dog runs.\nCaf\xe9 au lait.\n")  # latin-1 on line 2
    output = tmp_path / "out.de"
    output.write_text("an earlier translation\n")
    refused([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
             f"--output={output}"], f"{source}:2: invalid UTF-8", shared_data, tmp_path)


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "settings.json").write_text("{not json"), "settings.json: unreadable"),
    (lambda d: (d / "config.json").write_text('{"d_model": -1}'), "not a valid TransformerConfig"),
    (lambda d: (d / "final.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64)),
     "final.weights.h5: cannot load"),
    (lambda d: (d / "spm.model").write_bytes(b"not a model"),
     "is not the vocabulary this model was prepared with"),
])
def test_damaged_model_dir(model_dir, tmp_path, shared_data, damage, message):
    damaged = shutil.copytree(model_dir, tmp_path / "damaged")
    damage(damaged)
    refused([f"--model_dir={damaged}", "--mode=translate", "--input=/dev/null"], message,
            shared_data, damaged)


def test_export_mistakes(model_dir, tmp_path, shared_data):
    export_dir = tmp_path / "export"
    (export_dir / "1").mkdir(parents=True)
    (export_dir / "1" / "saved_model.pb").write_bytes(b"an earlier version")
    refused([f"--model_dir={model_dir}", "--mode=export", f"--export_dir={export_dir}",
             "--export_version=1"], "already exists: pass --overwrite_export", shared_data,
            tmp_path)
    # One flag vocabulary for both CLIs (pipelines/settings/table.py); export/run.py keeps its
    # earlier names as aliases, except --jit_compile, which is training XLA in run.py.
    for version in ("--export_version=1", "--version=1"):
        refused([f"--model_dir={model_dir}", f"--export_dir={export_dir}", version],
                "already exists: pass --overwrite_export to replace it", shared_data,
                tmp_path, script="export/run.py")
    refused([f"--model_dir={model_dir}", "--beam_size=0", "--override_saved"],
            "--beam_size 0: must be >= 1", shared_data, tmp_path, script="export/run.py")
    refused([f"--model_dir={model_dir}", "--version=-1"], "--export_version -1: must be >= 0",
            shared_data, tmp_path, script="export/run.py")
    refused([f"--model_dir={model_dir}", "--jit_compile"],
            "Unknown command line flag 'jit_compile'", shared_data, tmp_path,
            script="export/run.py")


def test_translate_writes_one_line_per_input_line_on_stdout(model_dir, tmp_path, shared_data):
    source = tmp_path / "input.en"
    # U+2028 and a vertical tab split a line for str.splitlines(), not for us.
    source.write_text("A dog\u2028runs.\nTwo men\x0bwork.\n\nA cat.\n", encoding="utf-8")
    result = run_command([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}"],
                         shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("\n") == 4
    assert result.stdout.split("\n")[2] == ""  # empty in, empty out
    assert "translate: 4 lines" in result.stderr


def test_translate_n_best_scores_alignment_and_prefix_as_json_lines(model_dir, tmp_path,
                                                                     shared_data):
    import json

    source = tmp_path / "input.en"
    source.write_text("A dog runs.\nTwo men work on a roof.\n", encoding="utf-8")
    prefixes = tmp_path / "prefix.de"
    prefixes.write_text("Ein Hund\n\n", encoding="utf-8")
    result = run_command([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
                          "--n_best=3", "--with_scores", "--with_alignment",
                          f"--prefix_file={prefixes}"], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    from pipelines.data import vocab

    tokenizer = vocab.load_tokenizer(model_dir / "spm.model")
    source_lengths = [len(p) + 1 for p in tokenizer.tokenize(  # + EOS
        ["A dog runs.", "Two men work on a roof."]).to_list()]
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 2
    for record, source_length in zip(records, source_lengths):
        assert len(record["translations"]) == len(record["scores"]) == 3
        assert record["scores"] == sorted(record["scores"], reverse=True)
        for tokens, log_probs, alignment in zip(record["tokens"], record["token_log_probs"],
                                                record["alignment"]):
            assert len(tokens) == len(log_probs) == len(alignment) >= 1
            assert all(lp <= 0 for lp in log_probs)
            assert all(0 <= a < source_length for a in alignment)  # a piece of the source
    assert all(t.startswith("Ein Hund") for t in records[0]["translations"])
    assert len({tuple(tokens) for tokens in records[1]["tokens"]}) == 3  # distinct hypotheses
    refused([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
             "--n_best=17"], "--n_best 17: at most 16", shared_data, model_dir)


def test_translate_with_terms_puts_each_phrase_in_its_line(model_dir, tmp_path, shared_data):
    """The untrained model would never write these words; the search must."""
    source = tmp_path / "input.en"
    source.write_text("A dog runs.\nTwo men work on a roof.\nA cat.\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("Hund\tSchnee\n\nKatze\n", encoding="utf-8")
    result = run_command([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
                          f"--terms={terms}"], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert "Hund" in lines[0] and "Schnee" in lines[0] and "Katze" in lines[2], lines
    plain = run_command([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}"],
                        shared_data)
    assert plain.stdout.splitlines()[1] == lines[1]  # no terms: the plain search's answer
    terms.write_text("Hund\n", encoding="utf-8")
    refused([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}",
             f"--terms={terms}"], f"{terms} has fewer lines than the input", shared_data,
            tmp_path)
