"""Re-apply issue 17's hand mutations, each on its own scratch copy, and check that the named tests fail.

Usage:
    python scripts/hand_mutations.py            # all of them (3.6 min measured on the shared, loaded 2 cores)
    python scripts/hand_mutations.py front budget

Each mutation is one exact text replacement in one file; a mutation whose text is no longer found is reported as
STALE (the code moved: update the entry). Exit status 1 when a mutation is MISSED (the tests still pass) or stale.
Runs in a temporary copy of the working tree (tracked + untracked, not ignored files); the checkout is never
modified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# label: (file, original text, mutated text, tests that must fail)
MUTATIONS: dict[str, tuple[str, str, str, list[str]]] = {
    "card-drops-recipe-sha256-row": (
        "mathneuro_edit/publish/card_template.md",
        "| recipe sha256 | `{{ recipe_sha256 }}` |\n",
        "",
        ["tests/publish/test_card.py::test_checkpoint_card_metadata_parses_back"],
    ),
    "front": ("mathneuro_edit/runs/sweep/procedure.py", "if not dominated:", "if True:", ["tests/runs/test_sweep.py"]),
    "budget": (
        "mathneuro_edit/runs/sweep/procedure.py",
        "p.general_kl <= kl_budget and ",
        "",
        ["tests/runs/test_sweep.py"],
    ),
    "confirm-either-direction": (
        "mathneuro_edit/runs/sweep/procedure.py",
        "return b, c, p, c > b and p < alpha",
        "return b, c, p, p < alpha",
        ["tests/runs/test_sweep_procedure.py", "tests/runs/test_sweep.py"],
    ),
    "holm-without-running-max": (
        "mathneuro_edit/evaluation/significance.py",
        "running = max(running, min(1.0, (m - rank) * ps[i]))",
        "running = min(1.0, (m - rank) * ps[i])",
        ["tests/runs/test_sweep_procedure.py"],
    ),
    "row-lowest-k": (
        "mathneuro_edit/engine/mask.py",
        "return [top_fraction(scores, k_of",
        "return [top_fraction(-scores, k_of",
        ["tests/engine/test_mask.py"],
    ),
    "wanda-is-l2": (  # every statistic lookup of the selection (math and general sets) asks for l2
        "mathneuro_edit/engine/mask.py",
        "top_ks, granularity, statistic = self.top_ks, self.granularity, self.statistic",
        'top_ks, granularity, statistic = self.top_ks, self.granularity, "l2"',
        ["tests/engine/test_mask.py"],
    ),
    "wanda-stat-is-l2": (
        "mathneuro_edit/engine/stats.py",
        'return self.norm_sum[name] if kind == "l2" else self.sq_sum[name].sqrt()',
        "return self.norm_sum[name]",
        ["tests/engine/test_mask.py"],
    ),
    "jaccard-is-containment": (
        "mathneuro_edit/runs/consistency.py",
        "union += int((x | y).sum())",
        "union += int(x.sum())",
        ["tests/runs/test_consistency.py"],
    ),
    "first-general-only": (
        "mathneuro_edit/engine/mask.py",
        "for gs in self.generals:",
        "for gs in self.generals[:1]:",
        ["tests/engine/test_mask.py"],
    ),
    # issue 28 item 5: mask.reference official (the released script's arithmetic)
    "official-sums-in-float32": (
        "mathneuro_edit/engine/official.py",
        "torch.zeros_like(w, memory_format",
        "torch.zeros_like(w, dtype=torch.float32, memory_format",
        ["tests/engine/test_official.py"],
    ),
    "official-fused-product-and-sum": (
        "mathneuro_edit/engine/official.py",
        "tmp.mul_(self.norms[name].to(w.device))  #",
        "acc.addcmul_(tmp, self.norms[name].to(w.device)); continue  #",
        ["tests/engine/test_official.py"],
    ),
    "official-norm-in-float32": (
        "mathneuro_edit/engine/official.py",
        "x.norm(p=2, dim=1).to(torch.bfloat16)",
        "x.float().norm(p=2, dim=1)",
        ["tests/engine/test_official.py"],
    ),
    "official-longest-first": (
        "mathneuro_edit/engine/official.py",
        "ids, truncated = tokenize_texts(tokenizer, texts, max_length)\n",
        "ids, truncated = tokenize_texts(tokenizer, texts, max_length)\n    ids = sorted(ids, key=len, reverse=True)\n",
        ["tests/engine/test_official.py"],
    ),
    "official-ties-to-higher-index": (
        "mathneuro_edit/engine/official.py",
        "top_fraction_flat(flat, [k_of(k, flat.numel()) for k in top_ks])):",
        "[s.flip(0) for s in top_fraction_flat(flat.flip(0), [k_of(k, flat.numel()) for k in top_ks])]):",
        ["tests/engine/test_official.py"],
    ),
    "official-tied-head-scored": (
        "mathneuro_edit/engine/official.py",
        "find_targets(model, include=include, exclude=exclude).items()",
        "find_targets(model, include=include, exclude=exclude, include_tied_lm_head=True).items()",
        ["tests/engine/test_official.py"],
    ),
    "official-embed-scored": (
        "mathneuro_edit/engine/official.py",
        ' and "embed" not in name\n',
        "\n",
        ["tests/engine/test_official.py"],
    ),
    "run-ignores-official": (
        "mathneuro_edit/runs/steps/mask.py",
        'if m.reference == "official":\n        mask = official_recipe_mask(',
        "if False:\n        mask = official_recipe_mask(",
        ["tests/runs/test_official_recipe.py"],
    ),
    # issue 24: the GGUF of every family (tests that fail without llama.cpp too, so the run needs no build)
    "gguf-experts-stacked-reversed": (
        "mathneuro_edit/weights/gguf_tensors.py",
        "names = tuple(members[i] for i in range(n_experts))",
        "names = tuple(members[i] for i in reversed(range(n_experts)))",
        ["tests/weights/test_gguf_moe.py"],
    ),
    "gguf-longrope-factors-swapped": (
        "mathneuro_edit/weights/gguf_tensors.py",
        'return long if name.startswith("rope_factors_long") else short',
        'return short if name.startswith("rope_factors_long") else long',
        ["tests/weights/test_gguf_rope.py"],
    ),
    "gguf-gpt2-c-proj-not-transposed": (
        "mathneuro_edit/weights/gguf_arch/dense.py",
        '".c_attn.weight", ".c_proj.weight", ".c_fc.weight"',
        '".c_attn.weight", ".c_fc.weight"',
        ["tests/weights/test_gguf_gpt2.py"],
    ),
    "gguf-gemma-norms-not-shifted": (  # Gemma 2 and 3 (the families whose norm_shift is 1) written unshifted
        "mathneuro_edit/weights/gguf_arch/family.py",
        'return self.norm_shift if hf_name.endswith("norm.weight") else 0.0',
        "return 0.0",
        ["tests/runs/test_families.py::test_family_row_is_run_and_matches_the_doc"],
    ),
    "gguf-spm-scores-flat": (
        "mathneuro_edit/weights/gguf_vocab.py",
        "kind, score = gguf.TokenType.NORMAL, -float(ranks[t]) if t in ranks else 0.0",
        "kind, score = gguf.TokenType.NORMAL, -1000.0",
        ["tests/weights/test_gguf_vocab.py"],
    ),
    "gguf-moe-norm-topk-not-refused": (
        "mathneuro_edit/weights/gguf_arch/moe.py",
        'if renormalizes is not None and bool(cfg.get("norm_topk_prob", False))',
        'if False and bool(cfg.get("norm_topk_prob", False))',
        ["tests/weights/test_gguf_moe.py"],
    ),
    # issue 31: the publishing and safety layers (docs/testing.md)
    "verify-accepts-extra-files": (
        "mathneuro_edit/publish/integrity.py",
        '    states.update({p: "extra" for p in present if p not in recorded})\n',
        "",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_verify_and_reproduce_refuse_a_file_the_lock_does_not_list"
        ],
    ),
    "lock-outputs-dotdot-compared": (
        "mathneuro_edit/publish/lock_policy.py",
        '                or ".." in Path(rel).parts\n',
        "",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_a_lock_whose_outputs_name_a_path_out_of_the_run_is_malformed"
        ],
    ),
    "push-trusts-the-folder": (
        "mathneuro_edit/publish/hub.py",
        "    check_artifact_against_lock(out, kind, lock, files)",
        "    pass",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_push_refuses_a_shard_changed_after_the_run"
        ],
    ),
    "hub-timeout-zero-accepted": (
        "mathneuro_edit/publish/hub_requests.py",
        "if not (value > 0 and math.isfinite(value)):",
        "if not (value > -1e9):",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_a_hub_timeout_that_is_not_a_positive_finite_number_is_refused"
        ],
    ),
    "branch-unchecked": (
        "mathneuro_edit/publish/hub.py",
        "if not is_branch_name(branch):",
        "if False:",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_a_branch_name_the_hub_would_misread_is_refused"
        ],
    ),
    "from-sweep-overlap-accepted": (
        "mathneuro_edit/runs/sweep/evidence.py",
        " and set(problems).isdisjoint(selection)",
        "",
        [
            "tests/runs/test_a_shared_sweep_file_is_data.py::test_run_from_sweep_refuses_confirmation_problems_that_overlap_the_selection"
        ],
    ),
    "from-sweep-another-base-accepted": (
        "mathneuro_edit/runs/sweep/evidence.py",
        "    if dict(mine) == dict(theirs):",
        "    if True:",
        ["tests/runs/test_a_claim_is_bound_to_its_base.py"],
    ),
    "from-sweep-calibration-not-compared": (
        "mathneuro_edit/recipe/schema.py",
        '    "calibration": "same",',
        '    "calibration": "free",',
        [
            "tests/runs/test_a_claim_is_bound_to_its_base.py::test_changing_any_key_that_decides_the_weights_is_refused_naming_it",
            "tests/runs/test_a_claim_is_bound_to_its_base.py::test_a_release_with_a_deciding_key_changed_is_refused_naming_it",
        ],
    ),
    "sweep-alpha-unchecked": (
        "mathneuro_edit/runs/sweep/evidence.py",
        'alpha = _fraction(c.get("alpha"), f"{where}.alpha", low_open=True, high_open=True)',
        'alpha = float(c.get("alpha"))',
        ["tests/runs/test_a_shared_sweep_file_is_data.py"],
    ),
    "base-card-datasets-split": (
        "mathneuro_edit/outputs/common.py",
        'if key in ("language", "datasets")',
        'if key in ("language",)',
        ["tests/publish/test_base_card_fields_carry_over.py"],
    ),
    "out-may-contain-input": (
        "mathneuro_edit/util/outdir.py",
        "if resolved == r or r in resolved.parents or resolved in r.parents:",
        "if resolved == r or r in resolved.parents:",
        [
            "tests/test_bad_input_is_one_line.py::test_an_output_folder_may_not_contain_an_input_however_many_files_it_holds"
        ],
    ),
    "merge-drops-token-counts": (
        "mathneuro_edit/engine/stats.py",
        "token_count={n: self.token_count[n] + other.token_count[n] for n in self.token_count},",
        "token_count=dict(self.token_count),",
        ["tests/engine/test_merged_statistics.py"],
    ),
    "gguf-name-misses-phi-3": (
        "mathneuro_edit/weights/gguf_vocab.py",
        'for k in ("phi-3", "phi3")):',
        'for k in ("phi3",)):',
        ["tests/weights/test_gguf_phi3_name_check.py"],
    ),
    # issue 31, round 3: the publishing and safety layers (publish/, util/outdir.py, runs/reproduce.py) and the
    # classes fixed in this round
    "shard-metadata-unchecked": (
        "mathneuro_edit/weights/checkpoint.py",
        'meta = _string_metadata(path, header.pop("__metadata__", None), fix)',
        'meta = header.pop("__metadata__", None) or {}',
        ["tests/weights/test_shard_metadata_is_checked.py"],
    ),
    "card-shows-bidi-raw": (
        "mathneuro_edit/publish/card.py",
        "card = ModelCard(document_safe(page.content))",
        "card = ModelCard(page.content)",
        ["tests/publish/test_card_shows_file_names_escaped.py"],
    ),
    "push-waits-for-stalled-upload": (
        "mathneuro_edit/publish/hub.py",
        "= interruptible(_commit,",
        "= (lambda f, *a: f(*a))(_commit,",
        ["tests/publish/test_push_faults.py::test_sigterm_during_a_stalled_upload_exits_143_at_once"],
    ),
    "push-bars-in-a-log": (
        "mathneuro_edit/publish/hub.py",
        "with progress_bars_on_a_terminal_only():",
        "if True:",
        ["tests/publish/test_push_faults.py::test_push_to_a_failing_hub_prints_no_progress_bars_and_the_error_last"],
    ),
    "full-disk-gguf-size-not-counted": (
        "mathneuro_edit/util/outdir.py",
        'written = _tree_size(tmp) + (getattr(e, "needed", None) or 0)',  # the failed GGUF's own bytes dropped
        "written = _tree_size(tmp)",
        ["tests/weights/test_gguf_write_on_a_full_disk.py"],
    ),
    "full-disk-run-takes-the-plan-alone": (  # the plan's size leaves out the GGUF: a failed GGUF write adds it
        "mathneuro_edit/util/outdir.py",
        "err = as_space_error(e, out, max(needed or 0, written))",
        "err = as_space_error(e, out, needed if needed is not None else written)",
        ["tests/test_a_full_disk_during_a_run.py::test_a_run_whose_gguf_file_fills_the_disk_counts_the_gguf_too"],
    ),
    "full-disk-gguf-partial-kept": (
        "mathneuro_edit/util/files.py",  # atomic_writer, which writes the GGUF, removes its partial file
        "        Path(tmp).unlink(missing_ok=True)\n        raise\n",
        "        pass\n        raise\n",
        ["tests/weights/test_gguf_write_on_a_full_disk.py"],
    ),
    "hub-5xx-called-offline": (
        "mathneuro_edit/publish/hub_requests.py",
        "and (status >= 500 or status == 429):",
        "and status == 429:",
        ["tests/runs/test_reproduce_of_a_failing_hub.py"],
    ),
    "bare-redirect-internal-error": (
        "mathneuro_edit/publish/hub_requests.py",
        'fault = hub_fault(repo_id, caught, "pushing", token)',
        "fault = None",
        ["tests/runs/test_reproduce_of_a_failing_hub.py"],
    ),
    "reproduce-json-prints-text": (
        "mathneuro_edit/cli/publish.py",
        "    if as_json:\n        emit_json(report.to_dict())",
        "    if False:\n        emit_json(report.to_dict())",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_reproduce_json_of_an_edited_folder_prints_its_report_as_json_on_stdout"
        ],
    ),
    "card-lock-sha-unchecked": (
        "mathneuro_edit/runs/reproduce.py",
        "if sha256_file(lock) != named.group(1):",
        "if False:",
        [
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_reproduce_of_a_card_refuses_a_lock_beside_it_that_is_not_the_one_it_names"
        ],
    ),
    "verify-accepts-missing-files": (
        "mathneuro_edit/publish/integrity.py",
        'p: ("missing" if p not in present else',
        'p: ("match" if p not in present else',
        ["tests/runs/test_reproduce_files.py"],
    ),
    "out-hard-link-accepted": (
        "mathneuro_edit/util/outdir.py",
        "return {(st.st_dev, st.st_ino) for st in",
        "return set() if True else {(st.st_dev, st.st_ino) for st in",
        ["tests/test_bad_input_is_one_line.py::test_an_output_folder_holding_a_hard_link_of_an_input_is_refused"],
    ),
    # issue 39 item 6: release behaviours no test saw before (tests/publish/test_release_behaviours.py)
    "mathneuro-adapter-not-an-adapter": (
        "mathneuro_edit/outputs/adapter.py",
        'markers=("adapter_config.json", MATHNEURO_CONFIG),',
        'markers=("adapter_config.json",),',
        ["tests/publish/test_release_behaviours.py::test_a_mathneuro_format_adapter_folder_is_an_adapter"],
    ),
    "mathneuro-adapter-files-checked-as-checkpoint": (
        "mathneuro_edit/outputs/registry.py",
        "return any((Path(folder) / m).is_file() for m in self.markers)",
        "return any((Path(folder) / m).is_file() for m in self.markers[:1])",
        ["tests/publish/test_release_behaviours.py::test_a_mathneuro_format_adapter_folder_is_an_adapter"],
    ),
    "cards-without-base-model-tag": (
        "mathneuro_edit/publish/card.py",
        'tags += [f"base_model:{out.relation}:{relation_base}"]',
        "pass",
        [
            "tests/publish/test_cards_the_hub_reads_right.py::"
            "test_each_repo_s_card_describes_its_own_files_and_has_its_own_tags"
        ],
    ),
    "gguf-card-lists-results": (
        "mathneuro_edit/outputs/gguf.py",
        "evaluated=False,",
        "evaluated=True,",
        ["tests/publish/test_cards_the_hub_reads_right.py::test_model_index_holds_this_model_s_results_only"],
    ),
    "model-index-lists-the-base": (
        "mathneuro_edit/publish/model_index.py",
        'values = parts.get("edited")',
        'values = parts.get("base") or parts.get("edited")',
        ["tests/publish/test_cards_the_hub_reads_right.py::test_model_index_holds_this_model_s_results_only"],
    ),
    "sweep-release-model-index-keeps-its-own-math": (
        "mathneuro_edit/publish/model_index.py",
        'if confirmed and key == "math_accuracy":',
        "if False:",
        [
            "tests/publish/test_model_index.py::test_a_release_from_a_sweep_lists_the_confirmation_not_its_own_math_accuracy",
            "tests/publish/test_model_index.py::test_model_card_load_of_a_release_from_the_smollm2_search_gives_the_confirmed_figures",
        ],
    ),
    "sweep-release-base-result-merged-into-this-model-s": (
        "mathneuro_edit/publish/model_index.py",
        '"base model" if base else ""',
        '""',
        [
            "tests/publish/test_model_index.py::test_the_confirmation_is_two_results_per_format_the_base_under_its_own_config"
        ],
    ),
    "selection-problems-called-significant": (
        "mathneuro_edit/publish/card.py",
        "untested = tuple(source.eval_results) if reused else ()",
        "untested = ()",
        [
            "tests/publish/test_model_index.py::test_model_card_load_of_a_release_from_the_smollm2_search_gives_the_confirmed_figures"
        ],
    ),
    "snippet-loads-in-the-stored-dtype": (
        "mathneuro_edit/outputs/common.py",
        "dtype = view.load_dtype if view.load_dtype in FLOAT_DTYPE_NAMES else None",
        "dtype = None",
        [
            "tests/publish/test_cards_the_hub_reads_right.py::test_the_card_s_figures_come_back_from_its_files_loaded_as_its_snippet_loads_them",
            "tests/publish/test_model_index.py::test_model_card_load_of_a_release_from_the_smollm2_search_gives_the_confirmed_figures",
        ],
    ),
    "gguf-push-drops-the-caller-s-base-repo": (
        "mathneuro_edit/publish/hub.py",
        "if derived_from is not None and base_repo is None:",
        "if derived_from is not None:",
        ["tests/publish/test_release_behaviours.py::test_a_gguf_push_keeps_the_caller_s_base_repo"],
    ),
    "push-public-ignored": (
        "mathneuro_edit/publish/hub.py",
        'if private is None and hub.get("private"):',
        'if hub.get("private"):',
        ["tests/publish/test_release_behaviours.py::test_push_public_asks_for_a_public_repo_over_the_recipe_s_private"],
    ),
    "reproduce-fails-on-an-extra-file": (
        "mathneuro_edit/runs/verdict.py",
        'return self.mask_match and all(v in ("match", "extra") for v in self.files.values())',
        'return self.mask_match and all(v == "match" for v in self.files.values())',
        ["tests/publish/test_release_behaviours.py::test_a_re_run_file_the_lock_does_not_record_still_reproduces"],
    ),
    "from-sweep-lock-keeps-a-variant-s-path": (
        "mathneuro_edit/runs/sweep/evidence.py",
        '"variant_set": [public_override(o) for o in self.confirmation.get("variant_set") or []],',
        '"variant_set": list(self.confirmation.get("variant_set") or []),',
        [
            "tests/runs/test_a_released_variant_publishes_no_local_path.py::"
            "test_a_release_s_lock_entry_never_holds_the_variant_s_local_path"
        ],
    ),
    "lm-eval-entries-replace-each-other": (
        "mathneuro_edit/evaluation/results.py",
        "doc.setdefault(key, {}).update(value)",
        "doc[key] = value",
        ["tests/publish/test_release_behaviours.py::test_two_lm_eval_entries_of_one_model_both_reach_its_results_file"],
    ),
    # issue 41 item 4, round 4: hand mutations of the newest modules (runs/sweep, runs/plan*, publish, weights/edit_plan,
    # weights/gguf_*), chosen before reading their tests (docs/testing.md, "Round 4")
    "r4-sweep-cache-key-unchecked": (
        "mathneuro_edit/runs/sweep/cache.py",
        '                and _canonical(entry.get("key")) == _canonical(key)\n',
        "",
        [
            "tests/runs/test_sweep_resume.py::test_a_tampered_cache_entry_is_refused",
            "tests/runs/test_sweep_boundaries.py",
        ],
    ),
    "r4-sweep-calib-set-ignores-seed": (
        "mathneuro_edit/runs/sweep/calibration.py",
        "recipe.data.samples, recipe.data.seed]",
        "recipe.data.samples]",
        [
            "tests/runs/test_sweep_sets_and_problems.py::test_two_variants_that_differ_only_in_the_data_seed_calibrate_their_own_sets",
            "tests/runs/test_sweep_resume.py",
            "tests/runs/test_sweep.py",
        ],
    ),
    "r4-sweep-point-base-count-all": (
        "mathneuro_edit/runs/sweep/grid.py",
        "base_correct=sum(base_correct[:n]),",
        "base_correct=sum(base_correct),",
        [
            "tests/runs/test_sweep_sets_and_problems.py::test_a_point_s_base_count_is_the_base_s_on_the_same_problems",
            "tests/runs/test_sweep.py",
            "tests/runs/test_sweep_resume.py",
        ],
    ),
    "r4-sweep-confirmation-repeats-shots": (
        "mathneuro_edit/runs/sweep/problems.py",
        "seen = {problem_sha256(p) for p in shots + selection}",
        "seen = {problem_sha256(p) for p in selection}",
        [
            "tests/runs/test_sweep_sets_and_problems.py::test_no_worked_example_is_also_a_confirmation_problem",
            "tests/runs/test_sweep.py::test_selection_and_confirmation_problems_are_disjoint_by_construction",
            "tests/runs/test_sweep.py::test_a_file_with_repeated_questions_still_gives_disjoint_sets",
        ],
    ),
    "r4-sweep-halving-floor": (
        "mathneuro_edit/runs/sweep/procedure.py",
        "points, end = -(-points // eta), end * eta",
        "points, end = points // eta, end * eta",
        [
            "tests/runs/test_sweep_procedure.py::test_halving_schedule_and_promotion_by_hand",
            "mathneuro_edit/runs/sweep/procedure.py",
        ],
    ),
    "r4-sweep-promote-budget-strict": (
        "mathneuro_edit/runs/sweep/procedure.py",
        "if kl_of(i) <= kl_budget), keep))",
        "if kl_of(i) < kl_budget), keep))",
        [
            "tests/runs/test_sweep_boundaries.py",
            "tests/runs/test_sweep_procedure.py::test_halving_schedule_and_promotion_by_hand",
        ],
    ),
    "r4-sweep-answered-either": (
        "mathneuro_edit/runs/sweep/procedure.py",
        'before.forms[i] == "answer" and after.forms[i] == "answer"',
        'before.forms[i] == "answer" or after.forms[i] == "answer"',
        [
            "tests/runs/test_sweep_confirmation.py::test_the_format_verdict_by_hand",
            "tests/runs/test_sweep_procedure.py::test_a_format_only_effect_is_never_a_math_boost",
            "mathneuro_edit/runs/sweep/procedure.py",
        ],
    ),
    "r4-sweep-candidate-from-any-round": (
        "mathneuro_edit/runs/sweep/search.py",
        "if arms[i].round == len(schedule)]",
        "if arms[i].round >= 1]",
        ["tests/runs/test_sweep_resume.py", "tests/runs/test_sweep.py"],
    ),
    "r4-evidence-exact-p-one-sided": (
        "mathneuro_edit/evaluation/significance.py",
        "return min(1.0, 2 * tail / 2**n)",
        "return min(1.0, tail / 2**n)",
        [
            "tests/runs/test_sweep_sets_and_problems.py::test_the_sweep_file_s_p_value_is_the_two_sided_exact_mcnemar",
            "tests/runs/test_sweep_sets_and_problems.py::test_a_sweep_file_whose_counts_are_significant_only_one_sided_is_refused",
            "tests/runs/test_a_shared_sweep_file_is_data.py",
            "tests/runs/test_sweep_boundaries.py",
        ],
    ),
    "r4-plan-mask-bits-floor": (
        "mathneuro_edit/runs/plan_memory.py",
        "bits = (numel + 7) // 8",
        "bits = numel // 8",
        [
            "tests/runs/test_plan_sizes.py::test_the_plan_s_mask_bytes_are_what_a_mask_stores",
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
            "mathneuro_edit/runs/plan_memory.py",
        ],
    ),
    "r4-plan-shira-r-floor": (
        "mathneuro_edit/runs/plan_memory.py",
        "math.ceil(selected / (rows + cols))",
        "selected // (rows + cols)",
        [
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
            "mathneuro_edit/runs/plan_memory.py",
        ],
    ),
    "r4-plan-export-one-copy": (
        "mathneuro_edit/runs/plan_memory.py",
        "self.largest * (2 * self.nbytes + 1)",
        "self.largest * (self.nbytes + 1)",
        [
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
        ],
    ),
    "r4-plan-placement-ignored": (
        "mathneuro_edit/runs/plan_memory.py",
        'resident = placement.get("cpu", 0) if placement else z.weights',
        "resident = z.weights",
        [
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
        ],
    ),
    "r4-plan-checkpoint-in-load-dtype": (
        "mathneuro_edit/runs/plan.py",
        "checkpoint_bytes=n_params * _BYTES[output_dtype],",
        "checkpoint_bytes=n_params * _BYTES[dtype],",
        [
            "tests/runs/test_plan_sizes.py::test_the_planned_checkpoint_is_stored_in_outputs_dtype",
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
        ],
    ),
    "r4-plan-stats-no-math-set": (
        "mathneuro_edit/runs/plan.py",
        "stats=(1 + s.general_sets) * t.stats,",
        "stats=s.general_sets * t.stats,",
        [
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
        ],
    ),
    "r4-plan-fits-no-headroom": (
        "mathneuro_edit/runs/plan.py",
        "need <= size * 0.92), None)",
        "need <= size), None)",
        [
            "tests/runs/test_plan_sizes.py::test_where_calibration_fits_leaves_8_percent_of_each_device_free",
            "tests/runs/test_plan_figures.py",
            "tests/runs/test_plan_covers_evaluation.py",
            "tests/runs/test_scaling.py::test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes",
            "tests/runs/test_scaling.py::test_plan_llama3_8b_like_config",
        ],
    ),
    "r4-filecheck-ok-with-extra": (
        "mathneuro_edit/publish/integrity.py",
        'return all(v in ("match", "unchecked") for v in self.states.values())',
        'return all(v in ("match", "unchecked", "extra") for v in self.states.values())',
        [
            "tests/publish/test_what_a_release_publishes.py::test_a_file_check_with_an_extra_file_is_not_ok",
            "tests/runs/test_reproduce_files.py::test_missing_and_extra_files_are_named",
            "tests/runs/test_reproduce_files.py::test_verify_shares_the_file_check",
        ],
    ),
    "r4-hub-check-wants-gguf-in-checkpoint-repo": (
        "mathneuro_edit/outputs/registry.py",
        'path.endswith(".gguf") == self.gguf_files',
        'path.endswith(".gguf") >= self.gguf_files',
        ["tests/publish/test_hub_roundtrip.py", "tests/weights/test_gguf.py::test_card_lock_and_push_carry_the_gguf"],
    ),
    "r4-model-index-keeps-nan": (
        "mathneuro_edit/publish/model_index.py",
        " or not math.isfinite(value):",
        ":",
        [
            "tests/publish/test_what_a_release_publishes.py::test_the_model_index_leaves_out_a_value_that_is_not_a_number",
            "tests/publish/test_cards_the_hub_reads_right.py::test_model_index_holds_this_model_s_results_only",
            "tests/publish/test_base_identity.py::test_model_index_names_hub_datasets_and_the_hub_reads_it_back",
        ],
    ),
    "r4-model-index-file-name-raw": (
        "mathneuro_edit/publish/model_index.py",
        'name = document_safe(path.rsplit("/", 1)[-1])',
        'name = path.rsplit("/", 1)[-1]',
        [
            "tests/publish/test_what_a_release_publishes.py::test_the_model_index_dataset_name_of_a_local_file_is_escaped",
            "tests/publish/test_card_shows_file_names_escaped.py",
        ],
    ),
    "r4-card-dtype-note-on-auto": (
        "mathneuro_edit/publish/card_weights.py",
        'dtype in (None, "auto")',
        "dtype is None",
        [
            "tests/publish/test_what_a_release_publishes.py::test_the_card_s_dtype_sentence_is_only_for_a_cast_checkpoint",
            "tests/publish/test_base_identity.py::test_outputs_dtype_casts_after_the_edit_and_verify_checks_it",
            "tests/publish/test_card.py",
        ],
    ),
    "r4-lock-kernels-accepted": (
        "mathneuro_edit/publish/lock_policy.py",
        'if base.get("use_kernels") not in (None, False) and not _given(',
        "if False and not _given(",
        ["tests/weights/test_hub_kernels_are_never_fetched_unasked.py::test_a_lock_may_not_turn_hub_kernels_on"],
    ),
    "r4-lock-backslash-output-accepted": (
        "mathneuro_edit/publish/lock_policy.py",
        'or rel.startswith(("/", "\\\\"))',
        'or rel.startswith("/")',
        [
            "tests/publish/test_what_a_release_publishes.py::test_a_lock_output_path_that_is_absolute_on_any_system_is_malformed",
            "tests/publish/test_push_checks_the_folder_against_its_lock.py::test_a_lock_whose_outputs_name_a_path_out_of_the_run_is_malformed",
        ],
    ),
    "r4-lock-files-name-unchecked": (
        "mathneuro_edit/publish/lock_policy.py",
        "if key not in keys or keys[key] != f\"{LOCAL}/{rec.get('name')}\":",
        "if key not in keys:",
        ["tests/test_untrusted_inputs.py::test_an_edited_lock_that_kept_its_hash_is_exit_1_naming_the_field"],
    ),
    "r4-push-hidden-folder-published": (
        "mathneuro_edit/publish/hub_files.py",
        'if any(part.startswith(".") for part in rel.parts):',
        'if rel.name.startswith("."):',
        [
            "tests/publish/test_what_a_release_publishes.py::test_files_in_hidden_folders_are_never_published",
            "tests/publish/test_hub.py",
        ],
    ),
    "r4-push-adapter-private-base-accepted": (
        "mathneuro_edit/publish/hub_files.py",
        "(is_local_path(value) or is_private_path(value))",
        "is_local_path(value)",
        [
            "tests/publish/test_what_a_release_publishes.py::test_an_adapter_config_naming_a_windows_path_is_not_published",
            "tests/publish/test_hub.py::test_a_config_naming_a_local_path_is_not_published",
        ],
    ),
    "r4-hub-retry-after-ignored": (
        "mathneuro_edit/publish/hub_requests.py",
        "wait if wait is not None else 2.0**attempt",
        "2.0**attempt",
        ["tests/publish/test_hub.py::test_push_retries_429_honouring_retry_after_then_5xx_with_backoff"],
    ),
    "r4-lock-gguf-base-sha-unchecked": (
        "mathneuro_edit/publish/lock.py",
        'if not gguf or sha != gguf.get("sha256"):',
        "if not gguf:",
        [
            "tests/publish/test_lock.py::test_gguf_base_is_checked_by_the_file_it_pinned",
            "tests/weights/test_gguf_base.py::test_check_base_weights_pins_the_gguf_file",
        ],
    ),
    "r4-lock-data-file-sha-unchecked": (
        "mathneuro_edit/publish/lock.py",
        'if got != want["sha256"]:',
        "if False:",
        ["tests/publish/test_lock.py::test_only_recorded_local_files_are_checked_and_every_one_is"],
    ),
    "r4-edit-plan-untied-by-default": (
        "mathneuro_edit/weights/edit_plan.py",
        '.get("tie_word_embeddings", True)',
        '.get("tie_word_embeddings", False)',
        [
            "tests/weights/test_edit_plan_ties_and_conversions.py::test_a_config_without_tie_word_embeddings_ties_as_transformers_does",
            "tests/weights/test_export.py::test_mask_on_a_tied_lm_head_edits_the_stored_embedding",
            "tests/weights/test_export.py",
        ],
    ),
    "r4-edit-plan-permutation-as-rename": (
        "mathneuro_edit/weights/edit_plan.py",
        "return tuple(out.shape) == shape and torch.equal(out, ids)",
        "return tuple(out.shape) == shape",
        [
            "tests/weights/test_edit_plan_ties_and_conversions.py::test_a_conversion_that_moves_entries_within_one_shape_is_not_a_rename",
            "tests/weights/test_export.py",
        ],
    ),
    "r4-row-blocks-zero-step": (
        "mathneuro_edit/weights/edit_plan.py",
        "step = max(1, block_bytes // max(1, item_bytes * math.prod(shape[1:])))",
        "step = block_bytes // max(1, item_bytes * math.prod(shape[1:]))",
        ["tests/weights/test_export.py", "tests/weights/test_adapter.py", "mathneuro_edit/weights/edit_plan.py"],
    ),
    "r4-gguf-lowbit-output-quantized": (
        "mathneuro_edit/weights/gguf_tensors.py",
        'name.split(".")[0] in ("token_embd", "output")',
        'name.split(".")[0] in ("token_embd",)',
        [
            "tests/weights/test_gguf.py::test_quantized_types_are_the_quantization_of_the_edited_weights",
            "tests/weights/test_gguf.py::test_metadata_follows_llama_cpp",
        ],
    ),
    "r4-gguf-1d-quantized": (
        "mathneuro_edit/weights/gguf_tensors.py",
        "        len(shape) < 2\n",
        "        len(shape) < 1\n",
        [
            "tests/weights/test_gguf.py::test_quantized_types_are_the_quantization_of_the_edited_weights",
            "tests/weights/test_gguf.py::test_metadata_follows_llama_cpp",
        ],
    ),
    "r4-gguf-tied-head-written": (
        "mathneuro_edit/weights/gguf_tensors.py",
        '(tied and hf == "lm_head.weight")',
        '(False and hf == "lm_head.weight")',
        [
            "tests/weights/test_gguf_writer_and_header_checks.py::test_a_tied_checkpoint_that_also_stores_its_head_gets_no_output_tensor",
            "tests/weights/test_gguf.py::test_transformers_reads_back_the_edited_weights_exactly",
            "tests/weights/test_gguf.py::test_metadata_follows_llama_cpp",
        ],
    ),
    "r4-gguf-output-rows-unchecked": (
        "mathneuro_edit/weights/gguf_tensors.py",
        "if why is None and output is not None and output[0] != vocab:",
        "if False:",
        [
            "tests/weights/test_gguf_writer_and_header_checks.py::test_an_output_layer_of_another_vocabulary_than_the_config_s_is_refused",
            "tests/weights/test_gguf_config_agrees_with_the_weights.py",
        ],
    ),
    "r4-gguf-k-permuted-with-q-heads": (
        "mathneuro_edit/weights/gguf_tensors.py",
        '"attn_k": int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),',
        '"attn_k": int(cfg["num_attention_heads"]),',
        ["tests/weights/test_gguf.py::test_transformers_reads_back_the_edited_weights_exactly"],
    ),
    "r4-gguf-head-count-kv-is-heads": (
        "mathneuro_edit/weights/gguf_keys.py",
        '1 if family.mla else int(cfg.get("num_key_value_heads") or n_head)',
        "1 if family.mla else n_head",
        [
            "tests/weights/test_gguf.py::test_metadata_follows_llama_cpp",
            "tests/weights/test_gguf.py::test_transformers_reads_back_the_edited_weights_exactly",
        ],
    ),
    "r4-gguf-key-length-dropped": (
        "mathneuro_edit/weights/gguf_keys.py",
        'if head != int(cfg["hidden_size"]) // n_head and not family.mla:',
        "if False:",
        ["tests/weights/test_gguf_head_dim_and_sliding.py"],
    ),
    "r4-gguf-header-truncated-data": (
        "mathneuro_edit/weights/gguf_header.py",
        "if offset % align or start + offset + n_bytes > size:",
        "if offset % align or start + offset > size:",
        [
            "tests/weights/test_gguf_writer_and_header_checks.py::test_a_gguf_whose_last_tensor_is_cut_short_is_refused_by_its_header",
            "tests/weights/test_verify_of_a_damaged_gguf.py",
        ],
    ),
    "r4-gguf-header-duplicate-tensor": (
        "mathneuro_edit/weights/gguf_header.py",
        "        if name in names:\n",
        "        if False:\n",
        [
            "tests/weights/test_gguf_writer_and_header_checks.py::test_a_gguf_that_lists_one_tensor_twice_is_refused_by_its_header",
            "tests/weights/test_verify_of_a_damaged_gguf.py",
        ],
    ),
    "r4-gguf-pre-override-ignored": (
        "mathneuro_edit/weights/gguf_vocab.py",
        "pre = pre or pre_name(",
        "pre = pre_name(",
        [
            "tests/weights/test_gguf_base.py::test_outputs_gguf_base_is_the_base_s_own_type_and_pre_tokenizer",
            "tests/weights/test_gguf_base.py::test_run_on_a_gguf_base_end_to_end_then_reproduce",
        ],
    ),
    "r4-gguf-identity-keeps-paths": (
        "mathneuro_edit/weights/gguf_reader.py",
        '_ID_VALUE = re.compile(r"^[\\w .+-]{1,80}$")',
        '_ID_VALUE = re.compile(r"^[\\w ./+-]{1,80}$")',
        [
            "tests/weights/test_gguf_writer_and_header_checks.py::test_a_gguf_s_identity_never_takes_a_value_holding_a_path",
            "tests/publish/test_cards_the_hub_reads_right.py::test_language_comes_from_a_gguf_base_s_own_metadata_on_every_card",
            "tests/weights/test_gguf_base.py",
        ],
    ),
    "r4-gguf-explicit-type-drops-pre": (
        "mathneuro_edit/weights/gguf_reader.py",
        '    if requested != "base":\n        return requested, pre\n',
        '    if requested != "base":\n        return requested, None\n',
        ["tests/weights/test_gguf_base.py::test_outputs_gguf_base_is_the_base_s_own_type_and_pre_tokenizer"],
    ),
    # issue 42's last moves (2026-12-05): the CLI's RecipeJob, the lm-eval task from the recipe's section, an
    # output's default folder, push_to_hub on a run folder
    "cli-job-claim-without-the-recipe": (
        "mathneuro_edit/cli/options.py",
        "return check_out(out, recipe, self.path, kind, **more)",
        "return check_out(out, recipe, None, kind, **more)",
        ["tests/cli/test_commands_speak_and_obey.py::test_no_recipe_command_writes_over_its_recipe_file"],
    ),
    "cli-job-drops-the-sets": (
        "mathneuro_edit/cli/options.py",
        "return read_recipe(self.path, (*self.sets, *more))",
        "return read_recipe(self.path, more)",
        ["tests/cli/test_cli.py::test_bad_input_exits_2_with_one_line_and_no_output"],
    ),
    "lm-eval-key-left-out": (
        "mathneuro_edit/runs/steps/evaluate.py",
        'LmEvalTask("lm_eval", **ev.lm_eval.model_dump())',
        'LmEvalTask("lm_eval", **ev.lm_eval.model_dump(exclude={"num_fewshot"}))',
        ["tests/evaluation/test_lm_eval.py::test_every_lm_eval_key_of_a_recipe_reaches_the_harness_task"],
    ),
    "output-folder-not-its-name": (
        "mathneuro_edit/outputs/registry.py",
        'object.__setattr__(self, "folder", self.name)',
        'object.__setattr__(self, "folder", "outputs")',
        ["tests/outputs/test_a_fourth_output_is_one_module.py"],
    ),
    "push-to-hub-skips-the-recipe-repo": (
        "mathneuro_edit/publish/hub.py",
        'if not repo_id and hub.get("repo_id"):',
        "if False:",
        ["tests/publish/test_release_behaviours.py::test_a_mathneuro_format_adapter_folder_is_an_adapter"],
    ),
    # issue 46 item 2: reproduce and verify check every file the lock records
    "reproduce-ignores-the-run-s-files": (
        "mathneuro_edit/publish/integrity.py",
        "    wanted = _run_file_records(lock, present, [p for p, _ in prefixes], run_folder)\n",
        "    wanted, present = {}, {}\n",
        ["tests/runs/test_reproduce_checks_every_file.py"],
    ),
    "same-device-statistics-called-rounding": (
        "mathneuro_edit/runs/verdict.py",
        "        if across is False:\n",
        "        if False:\n",
        ["tests/runs/test_reproduce_verdict.py"],
    ),
    # issue 50: edits with structure and the Optuna search
    "edit-map-least-specific-key-wins": (
        "mathneuro_edit/engine/edit_map.py",
        "and (best is None or k.rank > best[0])",
        "and (best is None or k.rank < best[0])",
        ["tests/engine/test_edit_map.py"],
    ),
    "scale-map-one-value-for-every-matrix": (
        "mathneuro_edit/engine/apply.py",
        "    return value_for(scale, name)\n",
        '    return value_for(scale, "x")\n',
        ["tests/runs/test_structured_edit.py::test_the_checkpoint_holds_the_independent_edit"],
    ),
    "optuna-pruner-never-prunes": (
        "mathneuro_edit/runs/sweep/optuna_search.py",
        "        return not promoted(trial.intermediate_values[step], others, self.eta)\n",
        "        return False\n",
        ["tests/runs/test_optuna_search.py::test_the_candidate_goes_through_the_grid_s_confirmation"],
    ),
    "optuna-sampler-not-reseeded-per-trial": (
        "mathneuro_edit/runs/sweep/optuna_search.py",
        "            study.sampler = _sampler(seed, finished)\n",
        "            pass\n",
        ["tests/runs/test_optuna_search.py::test_more_trials_extends_a_finished_search_to_the_trials_of_a_longer_one"],
    ),
}
# Equivalent, so not in MUTATIONS (docs/testing.md, "Round 4"): r4-sweep-eliminated-arm-promoted, in
# runs/sweep/search.py::_rounds, `sum(arms[i].correct) if i in active else None for i` -> `sum(arms[i].correct) for i`:
# an arm left out in an earlier round ranks behind every arm kept then, whose counts only grow, and each round keeps
# fewer, so promotion picks the same arms (and asks no new KL).


def _copy_tree(dest: Path) -> None:
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def main(labels: list[str]) -> int:
    unknown = [x for x in labels if x not in MUTATIONS]
    if unknown:
        print(f"unknown mutation(s) {unknown}; choose from: {', '.join(MUTATIONS)}", file=sys.stderr)
        return 2
    bad = 0
    for label in labels or list(MUTATIONS):
        rel, old, new, tests = MUTATIONS[label]
        with tempfile.TemporaryDirectory(prefix="mathneuro-hand-mutation-") as tmp:
            dest = Path(tmp)
            _copy_tree(dest)
            path = dest / rel
            text = path.read_text()
            if old not in text:
                print(f"{label}: STALE (text not found in {rel})")
                bad += 1
                continue
            path.write_text(text.replace(old, new))
            env = {**os.environ, "PYTHONPATH": str(dest), "OMP_NUM_THREADS": "1"}
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                cwd=dest,
                env=env,
                capture_output=True,
                text=True,
            )
            failed = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
            if proc.returncode == 0:
                print(f"{label}: MISSED ({' '.join(tests)} still pass)")
                bad += 1
            elif proc.returncode != 1:  # 2-5: interrupted, internal or usage error, nothing collected: no test ran
                last = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{label}: ERROR (pytest exit {proc.returncode}, no test failed: {last[:200]})")
                bad += 1
            else:
                print(
                    f"{label}: caught by {failed[0].split(' ')[1] if failed else 'pytest exit ' + str(proc.returncode)}"
                )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
