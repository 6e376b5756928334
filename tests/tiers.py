"""The test tiers and how the whole suite is spread over pytest-xdist's workers.

`pytest -m quick` runs the tests named in `QUICK`: at least one of every test module (and so
of every part: the library, decoding, data, settings, the CLI's errors, the export contract),
chosen to answer in about two minutes. `tests/test_tiers.py` fails when a test module has no
quick test or an entry names no test, so a new module is added here with one of its tests.

Under xdist (`-n auto --dist loadgroup`, pytest.ini), the tests of a module that share a
module-scoped fixture (a model trained once, a reference run) go to one worker as one group,
so the fixture is built once, and so do all the export tests (`SHARED_GROUPS`: their session
fixtures train and export a model); the other tests are handed out one by one. Modules known
to be slow are handed out first (`SLOW_FIRST`), so that no worker starts one at the end.
"""
from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

QUICK = [
    # An entry is a test ("path::name", every parametrisation) or one parametrisation
    # ("path::name[id]"). By part: the library,
    "tests/test_config.py::test_table3_rows_are_presets_in_paper_order",
    "tests/test_config.py::test_parameter_count_matches_formula[base]",
    "tests/test_config.py::test_preset_rows_change_only_what_the_paper_lists",
    "tests/test_config.py::test_json_round_trip_and_overrides",
    "tests/test_config.py::test_bad_config_is_refused_with_a_clear_message",
    "tests/test_schedules.py",
    "tests/test_losses.py",
    "tests/test_model.py::test_decoder_is_causal",
    "tests/test_model.py::test_source_padding_does_not_change_logits[post]",
    "tests/test_model.py::test_every_layer_config_round_trips",
    "tests/test_model.py::test_a_packed_batch_without_segments_is_refused",
    "tests/layers/test_attention.py::test_self_attention_layer",
    "tests/layers/test_attention.py::test_scores_are_scaled_by_sqrt_d_k",
    "tests/layers/test_attention.py::test_causal_mask_hides_later_positions",
    "tests/layers/test_attention.py::test_fully_padded_sentence_stays_finite",
    "tests/layers/test_decoder.py::test_decoder_layer[post]",
    "tests/layers/test_decoder.py::test_decoder_is_causal_without_being_asked",
    "tests/layers/test_embedding.py",
    "tests/layers/test_encoder.py::test_encoder_layer[pre]",
    "tests/layers/test_encoder.py::test_appended_padding_does_not_change_real_positions",
    "tests/layers/test_feed_forward.py",
    "tests/layers/test_masks.py",
    "tests/layers/test_positional.py",
    "tests/layers/test_residual.py",
    "tests/test_backends.py::test_the_package_imports_without_tensorflow_under_jax",
    "tests/test_distribute.py::test_mirrored_strategy_matches_one_replica",
    # decoding,
    "tests/decoding/test_beam.py::test_beam_one_without_penalty_is_greedy",
    "tests/decoding/test_beam.py::test_returned_score_equals_full_forward_rescoring[4-0.6]",
    "tests/decoding/test_beam.py::test_alignment_layer_is_the_penultimate",
    "tests/decoding/test_beam.py::test_blocked_top_k_equals_tensorflows",
    "tests/decoding/test_beam.py::test_candidates_equal_ranking_the_whole_vocabulary",
    "tests/decoding/test_beam.py::test_the_stop_rules",
    "tests/decoding/test_drivers.py::test_num_results_beyond_the_beam_is_refused",
    "tests/decoding/test_sampling.py::test_truncation_keeps_the_smallest_set_reaching_p_of_the_top_k",
    "tests/decoding/test_sampling.py::test_settings_refuse_values_that_mean_nothing",
    "tests/decoding/test_terms.py::test_phrases_are_met_in_any_order_and_broken_ones_start_again",
    "tests/decoding/test_terms.py::test_next_and_forced_tokens_continue_the_phrase_in_progress",
    "tests/decoding/test_terms.py::test_round_robin_gives_every_bank_a_turn_best_first",
    # data,
    "tests/pipelines/test_dataset.py::test_model_example_adds_eos_and_bos_where_they_belong",
    "tests/pipelines/test_dataset.py::test_default_boundaries_are_fine_when_short_and_geometric_when_long",
    "tests/pipelines/test_dataset.py::test_batch_sizes_follow_the_budget_and_the_replica_multiple",
    "tests/pipelines/test_packing.py::test_rows_hold_the_longest_pair_and_follow_the_sides_totals",
    "tests/pipelines/test_packing.py::test_the_packer_places_every_pair_once_and_never_overfills_a_row",
    "tests/pipelines/test_packing.py::test_a_pair_longer_than_a_row_is_refused",
    "tests/pipelines/test_text_io.py",
    "tests/pipelines/test_token_cache.py::test_shard_offsets_cut_where_lines_end",
    "tests/pipelines/test_token_cache.py::test_progress_lines_give_done_total_rate_and_eta",
    "tests/pipelines/test_vocab.py::test_missing_model_and_empty_corpus_are_clear_errors",
    "tests/pipelines/test_vocab.py::test_a_vocabulary_with_other_special_ids_is_refused",
    "tests/pipelines/test_tasks.py::test_registry_defaults",
    "tests/pipelines/test_tasks.py::test_get_task_overrides_ignores_none_and_rejects_unknown",
    "tests/pipelines/test_tasks.py::test_multi30k_truncated_file_is_reported",
    "tests/pipelines/test_tasks.py::test_text_task_returns_given_files_and_explains_missing_ones",
    "tests/pipelines/test_checkpoints.py::test_no_untrained_checkpoint_under_accumulation",
    "tests/pipelines/test_checkpoints.py::test_best_checkpoints_by_recorded_dev_metric",
    "tests/pipelines/test_checkpoints.py::test_early_stop_after_patience_evaluations_without_improvement",
    "tests/pipelines/test_memory_check.py::test_resident_memory_counts_the_kernel_s_page_size",
    "tests/pipelines/test_attention_plot.py::test_plot_shows_every_heads_attention_rows_summing_to_one",
    "tests/pipelines/parsing/test_evalb.py::test_gold_brackets_of_the_example",
    "tests/pipelines/parsing/test_evalb.py::test_missing_constituent",
    "tests/pipelines/parsing/test_evalb.py::test_wrong_label",
    "tests/pipelines/parsing/test_evalb.py::test_mismatched_inputs_are_errors",
    "tests/pipelines/parsing/test_linearize.py::test_linearize_example_from_vinyals",
    "tests/pipelines/parsing/test_linearize.py::test_delinearize_repairs",
    "tests/pipelines/parsing/test_linearize.py::test_is_well_formed_rejects_bad_trees",
    "tests/pipelines/parsing/test_treebank.py::test_preprocess_rules_on_a_hand_made_tree",
    "tests/pipelines/parsing/test_treebank.py::test_strip_label",
    "tests/pipelines/parsing/test_treebank.py::test_malformed_file_error_names_file_and_place",
    "tests/pipelines/parsing/test_task.py::test_wsj_sections_below_data_dir",
    "tests/pipelines/parsing/test_task.py::test_missing_or_malformed_trees_are_reported",
    "tests/pipelines/parsing/test_constrained_decoding.py::test_in_graph_trees_carry_the_predicted_pos_tags",
    "tests/pipelines/parsing/test_constrained_decoding.py::test_serving_input_squeezes_whitespace",
    "tests/benchmarks/test_parsing_baselines.py::test_right_branching_dev_f1_on_the_wsj_sample",
    "tests/test_published_protocol.py::test_lr_scale_peaks_at_0005_on_step_2000",
    "tests/test_published_protocol.py::test_bad_flag_is_one_line_and_exit_2",
    "tests/test_helpers.py",
    # settings,
    "tests/pipelines/test_options.py::test_a_new_model_dir_takes_task_then_paper_defaults",
    "tests/pipelines/test_options.py::test_a_flag_that_contradicts_the_model_is_refused",
    "tests/pipelines/test_options.py::test_decoding_flags_apply_to_their_run",
    "tests/pipelines/test_options.py::test_corrupt_settings_and_bad_numbers_are_user_errors",
    "tests/pipelines/test_settings_table.py::test_each_default_is_written_once",
    "tests/pipelines/test_recipe.py",
    "tests/pipelines/test_user_paths.py::test_the_check_catches_a_printed_value_the_run_did_not_use",
    "tests/pipelines/test_settings_table.py::test_the_bounds_are_the_table_s",
    "tests/pipelines/test_device_policy.py::test_each_device_s_precision",
    "tests/pipelines/test_device_policy.py::test_cpu_flags_are_read_as_whole_words",
    "tests/pipelines/test_lock.py::test_a_second_writer_is_refused_and_a_released_lock_is_taken",
    "tests/pipelines/test_lock.py::test_which_stages_write",
    # the command line and its errors (one line, exit 2),
    "tests/pipelines/test_cli_errors.py::test_flag_mistakes[args0---mode bogus: choose from prepare, train]",
    "tests/pipelines/test_init_from.py::test_a_refusal_is_one_line_and_exit_2",
    "tests/test_first_hour.py::test_help_exits_0_before_tensorflow_is_imported[--help-pipelines]",
    "tests/test_first_hour.py::test_a_missing_backend_is_one_line_naming_its_extra",
    "tests/test_first_hour.py::test_the_distribution_has_a_name_of_its_own",
    "tests/pipelines/test_run.py::test_xla_with_several_cpu_devices_is_refused_clearly",
    "tests/pipelines/test_backend_training.py::test_jax_with_several_cpu_devices_asks_xla_for_them",
    "tests/pipelines/test_multi_worker.py::test_two_workers_train_to_identical_weights",
    "tests/pipelines/test_kill_consistency.py::test_a_kill_check_sees_torn_lost_and_mixed_files",
    "tests/pipelines/parsing/test_run_parsing.py::test_an_unknown_target_form_is_one_line_naming_the_forms",
    "tests/test_house.py",
    "tests/test_quiet.py",
    "tests/test_startup.py",
    "tests/test_doc_commands.py::test_the_doc_blocks_are_found",
    "tests/pipelines/test_progress_bar.py",
    "tests/test_tiers.py",
    "tests/test_readme.py::test_readme_is_at_most_200_lines",
    "tests/test_readme.py::test_every_relative_link_in_readme_and_docs_points_at_a_file",
    "tests/test_readme.py::test_readme_test_command_is_the_one_ci_runs",
    # and the export contract (the golden signatures, the op check, ids and errors).
    "tests/export/test_serving_contract.py::test_the_golden_file_keeps_every_released_signature_as_released",
    "tests/export/test_serving_contract.py::test_every_signature_equals_the_golden_file",
    "tests/export/test_saved_model.py::test_invalid_decoding_settings_are_refused",
    "tests/export/test_translator.py::test_export_error_is_a_user_error_and_export_imports_no_pipelines",
    "tests/export/test_quantize.py::test_quantize_int8_rounds_each_channel_to_its_own_step",
    "tests/export/test_sampling_export.py::test_chunk_seeds_start_at_the_seed_and_differ_per_chunk",
    "tests/export/test_ctranslate2.py::test_format_mistakes",
    "tests/export/test_ctranslate2_layout.py::test_names_and_shapes",
    "tests/export/test_serve_options.py::test_the_requests_here_send_every_input_of_their_signature",
    "tests/export/test_beam_quality.py::test_beam_four_scores_at_least_greedy_on_most_validation_sentences",
    "tests/export/test_decoding_callers.py::test_the_keras_api",
]


def _matches(nodeid: str, entry: str) -> bool:
    """Whether the test `nodeid` is the one `entry` names (a module: any of its tests)."""
    if "::" not in entry:
        return nodeid.split("::", 1)[0] == entry
    return nodeid == entry or ("[" not in entry and nodeid.split("[", 1)[0] == entry)


def mark_quick(items) -> None:
    """Adds the `quick` mark to the items that `QUICK` names."""
    for item in items:
        if any(_matches(item.nodeid, entry) for entry in QUICK):
            item.add_marker(pytest.mark.quick)


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
