"""The prepare stage (clean data, vocabulary, bucket tables), and the settings.json record."""
from pipelines import Log
from pipelines.data import prepare, vocab as vocab_lib
from pipelines.settings import describe, init_from as init_lib
from pipelines.model_dir import layout as md
from pipelines.settings.options import Recipe


def record_settings(options: Recipe, *, trained: bool) -> None:
    """Writes what this run decided, and spm.model's digest (checked later), to settings.json."""
    settings = md.load_settings(options.model_dir)
    kept = settings.get("decoding")  # a trained model's defaults; a flag decodes its run only
    settings.update(options.settings(trained=trained))
    if kept and "decoding" in settings:
        settings["decoding"] = {**settings["decoding"], **kept}
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    settings["spm_sha256"] = vocab_lib.model_digest(proto)
    md.save_settings(options.model_dir, settings)


def run_prepare(options: Recipe, log: Log = print) -> dict:
    task = options.task
    log(describe.describe_task(options, task))
    if options.init is not None:  # fine-tuning: the source's vocabulary, never a new one
        init_lib.copy_vocabulary(options.init, options.model_dir, log)
    # Bound once trained: a resumed run's tables are the ones its first run printed.
    resumed = md.has_weights(options.model_dir)
    if resumed:
        prepare.check_training_text(task, options.model_dir, log=log)
    report = prepare.prepare(task, options.model_dir, vocab_size=options.data.vocab_size,
                             batch_tokens=options.training.batch_tokens, tables=not resumed,
                             log=log)
    if resumed:
        log(f"prepare: the corpus and bucket tables are the ones the model's first run "
            f"printed ({report['batches_per_epoch']:,} batches per pass over the data)")
    if options.init is not None:
        clean = prepare.clean_split(task, "train", options.model_dir, log=log)
        init_lib.report_coverage(options.init, prepare.vocab_path(options.model_dir).read_bytes(),
                                 [clean.source_path, clean.target_path], log)
    record_settings(options, trained=resumed)
    return report
