#!/usr/bin/env bash
# Mutation testing (mutmut) of the modules that decide results, each against the fast tests that cover it.
#
#   scripts/mutation.sh                 # every module below, one after the other (~60 min on 2 cores: a full
#                                       # calibration run is ~40 of them; the others 2-6 min each, docs/testing.md)
#   scripts/mutation.sh mask sweep      # some of them
#   scripts/mutation.sh decisions       # the modules that decide a verdict or what is published, against their
#                                       # millisecond tests (issue 48; ~55 min on 2 shared cores, 30 of them evidence)
#   MUTATION_JOBS=1 scripts/mutation.sh consistency
#   MUTATION_SAMPLE='*[05]' scripts/mutation.sh calibration   # a deterministic 1-in-5 sample (mutant numbers
#                                                              # ending in 0 or 5), for the modules with slow tests
#                                                              # (~8 min for calibration)
#
# Runs in a scratch copy of the working tree (tracked + untracked, not ignored files) under
# ${MUTATION_DIR:-${TMPDIR:-/tmp}/mathneuro-mutation}/<module>, never in the checkout itself, at the lowest CPU
# priority (nice -n 19). Only the lines the selected tests execute are mutated (mutate_only_covered_lines):
# code those fast tests never run is out of scope here (it is covered by the slow CLI tests). Prints the score
# per module and lists the survivors; `cd <scratch>/<module> && mutmut show <name>` shows one.
# CI runs a sample (.ci/run: the five fastest decision modules, ~1 min on a quiet machine, MUTATION_MIN=90); the
# rest: run it before closing an issue that touches one of these modules (docs/testing.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${MUTATION_DIR:-${TMPDIR:-/tmp}/mathneuro-mutation}"
JOBS="${MUTATION_JOBS:-2}"
SAMPLE="${MUTATION_SAMPLE:-}"  # an fnmatch pattern on the mutant's name; empty = every mutant
MIN="${MUTATION_MIN:-}"  # a score in percent below which the script fails (CI's sample: 90); empty = report only

# module -> "files to mutate|fast tests that cover them"
declare -A SCOPE=(
  [mask]="mathneuro_edit/engine/mask.py mathneuro_edit/engine/topk.py|tests/engine/test_mask.py tests/engine/test_core.py::test_ties_break_to_lower_index tests/engine/test_core.py::test_radix_select_equals_kthvalue_select_with_many_ties"
  [sweep]="mathneuro_edit/runs/sweep/search.py mathneuro_edit/runs/sweep/grid.py mathneuro_edit/runs/sweep/problems.py mathneuro_edit/runs/sweep/calibration.py mathneuro_edit/runs/sweep/confirmation.py mathneuro_edit/runs/sweep/result.py mathneuro_edit/runs/sweep/procedure.py mathneuro_edit/runs/sweep/evidence.py|tests/runs/test_sweep.py tests/evaluation/test_eval_stats.py"
  [consistency]="mathneuro_edit/runs/consistency.py|tests/runs/test_consistency.py"
  [calibration]="mathneuro_edit/engine/calibration.py mathneuro_edit/engine/recorder.py mathneuro_edit/engine/stats.py|tests/engine/test_core.py tests/engine/test_mask.py tests/engine/test_calibration.py tests/engine/test_calibration_speed.py"
  [evaluation]="mathneuro_edit/evaluation/results.py mathneuro_edit/evaluation/significance.py|tests/evaluation/test_evaluate.py tests/evaluation/test_eval_stats.py tests/evaluation/test_results.py"
  [verdict]="mathneuro_edit/runs/verdict.py|tests/runs/test_reproduce_verdict.py"
  [scrub]="mathneuro_edit/util/scrub.py|tests/publish/test_every_local_path_spelling_is_redacted.py tests/publish/test_scrub_decisions.py"
  [model-index]="mathneuro_edit/publish/model_index.py|tests/publish/test_model_index.py tests/publish/test_model_index_decisions.py"
  [prompts]="mathneuro_edit/evaluation/prompts.py|tests/evaluation/test_answer_forms.py tests/evaluation/test_eval_prompts.py"
  [rules]="mathneuro_edit/engine/top_k_rule.py mathneuro_edit/util/patterns.py|tests/engine/test_top_k_rule_and_patterns.py"
  [push-routing]="mathneuro_edit/publish/hub.py|tests/publish/test_push_routing.py"
  [procedure]="mathneuro_edit/runs/sweep/procedure.py mathneuro_edit/runs/sweep/problems.py mathneuro_edit/runs/sweep/confirmation.py|tests/runs/test_sweep_procedure.py tests/runs/test_sweep_decisions.py tests/runs/test_sweep_sets_and_problems.py tests/runs/test_sweep.py"
  [evidence]="mathneuro_edit/runs/sweep/evidence.py|tests/runs/test_sweep_evidence_decisions.py tests/runs/test_sweep_decisions.py tests/runs/test_sweep_boundaries.py tests/runs/test_a_shared_sweep_file_is_data.py tests/runs/test_sweep_sets_and_problems.py"
  [verify-verdict]="mathneuro_edit/publish/integrity.py mathneuro_edit/runs/release.py|tests/runs/test_verify_verdict.py"
  [card-sets]="mathneuro_edit/runs/card_sets.py|tests/runs/test_card_set_decisions.py"
  [card]="mathneuro_edit/publish/card.py mathneuro_edit/publish/model_index.py mathneuro_edit/publish/card_weights.py mathneuro_edit/publish/base_card.py mathneuro_edit/outputs/gguf.py mathneuro_edit/outputs/checkpoint.py mathneuro_edit/outputs/adapter.py mathneuro_edit/outputs/common.py mathneuro_edit/publish/lock.py mathneuro_edit/publish/lock_policy.py|tests/publish/test_card.py tests/publish/test_lock.py tests/recipe/test_recipe.py"
)
ORDER=(mask sweep consistency calibration evaluation card verdict scrub model-index prompts rules push-routing procedure evidence card-sets verify-verdict)
# issue 48's decisions, in one command: scripts/mutation.sh decisions
DECISIONS=(verdict scrub model-index prompts rules push-routing card-sets verify-verdict procedure evidence)

command -v mutmut >/dev/null || { echo "mutmut not found: pip install -e '.[dev]'" >&2; exit 2; }
modules=()
for m in "$@"; do
  if [ "$m" = decisions ]; then modules+=("${DECISIONS[@]}"); else modules+=("$m"); fi
done
[ ${#modules[@]} -eq 0 ] && modules=("${ORDER[@]}")
for m in "${modules[@]}"; do
  [ -n "${SCOPE[$m]:-}" ] || { echo "unknown module '$m'; choose from: ${ORDER[*]}" >&2; exit 2; }
done

for m in "${modules[@]}"; do
  files="${SCOPE[$m]%%|*}"
  tests="${SCOPE[$m]##*|}"
  dest="$WORK/$m"
  rm -rf "$dest"
  mkdir -p "$dest"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest")
  # this module's scope, appended as the scratch copy's [tool.mutmut] table (the checkout's pyproject has none)
  {
    echo
    echo "[tool.mutmut]"
    echo "source_paths = [\"mathneuro_edit\"]"
    printf 'only_mutate = [%s]\n' "$(printf '"%s", ' $files | sed 's/, $//')"
    printf 'pytest_add_cli_args_test_selection = [%s]\n' "$(printf '"%s", ' $tests | sed 's/, $//')"
    echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]'
    echo "mutate_only_covered_lines = true"
    echo "use_git_change_detection = false"
    echo 'also_copy = ["recipes", "docs", "README.md", "LICENSE", "benchmarks", "scripts"]'  # tests read these
    # docstrings, logging text and type-only lines change no result
    echo 'do_not_mutate_patterns = ["^\\s*(raise |from |import )", "__all__"]'
  } >> "$dest/pyproject.toml"
  echo "== $m: mutating $files against $tests (scratch: $dest)"
  # the scratch copy, not an editable install or PYTHONPATH, must provide mathneuro_edit
  (cd "$dest" && env -u PYTHONPATH OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 19 \
     mutmut run --max-children "$JOBS" ${SAMPLE:+"mathneuro_edit.$SAMPLE"} >"$dest/mutmut-run.log" 2>&1) || {
       echo "mutmut failed for $m; see $dest/mutmut-run.log" >&2; tail -20 "$dest/mutmut-run.log" >&2; exit 1; }
  (cd "$dest" && env -u PYTHONPATH mutmut results --all true >"$dest/results.txt" 2>&1 || true)
  python3 - "$m" "$dest/results.txt" "$MIN" <<'PY'
import collections, sys
module, path, minimum = sys.argv[1], sys.argv[2], sys.argv[3]
status = collections.Counter()
survivors = []
for line in open(path):
    if ":" not in line:
        continue
    if "not checked" in line:  # outside the sample
        continue
    name, _, st = line.strip().rpartition(":")
    st = st.strip()
    status[st] += 1
    if st == "survived":
        survivors.append(name.strip())
killed = status["killed"] + status["timeout"] + status["segfault"]
scored = killed + status["survived"]
score = f"{100 * killed / scored:.1f}%" if scored else "n/a"
print(f"{module}: {killed}/{scored} killed ({score}); " + ", ".join(f"{k} {v}" for k, v in sorted(status.items())))
for s in survivors:
    print(f"  survived: {s}")
if minimum and (not scored or 100 * killed / scored < float(minimum)):
    sys.exit(f"{module}: score {score} is below MUTATION_MIN={minimum}%: kill the survivors above with a test, or "
             "name each equivalent one in docs/testing.md")
PY
done
