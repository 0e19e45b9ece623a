"""Release behaviours no test saw before (issue 39 item 6: an audit of hand-made mutations of the publishing layer
caught 3 of 8). Each test below was seen failing with its behaviour broken on purpose; the mutation is in its
docstring and in docs/testing.md ("Mutations the suite must catch").

Two more of the list are tested in tests/publish/test_cards_the_hub_reads_right.py (the ``base_model:*`` tags of
the checkpoint and GGUF cards; the GGUF card lists no evaluation results as its own), and one in
tests/runs/test_a_released_variant_publishes_no_local_path.py (the lock of a ``--from-sweep`` release holds a
variant's data file by its name only).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from huggingface_hub import ModelCard

from mathneuro_edit.cli.main import main
from mathneuro_edit.evaluation.lm_eval_task import LmEvalResult
from mathneuro_edit.evaluation.results import EvalResults
from mathneuro_edit.layout import LM_EVAL_RESULTS, LOCK_NAME, MASK_NAME, MATHNEURO_CONFIG
from mathneuro_edit.outputs.adapter import ADAPTER
from mathneuro_edit.outputs.registry import output_of_folder
from mathneuro_edit.publish.card import card_for_folder
from mathneuro_edit.publish.hub import push_to_hub
from mathneuro_edit.publish.lock import output_hashes, read_lock, write_lock
from mathneuro_edit.runs.release import verify_run
from mathneuro_edit.runs.reproduce import ReproduceReport
from mathneuro_edit.weights.adapter import export_adapter
from tests._fakehub import TOKEN, FakeHub

REPO = "me/organism-boost"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The organism's run with a checkpoint, an adapter and an F32 GGUF, whose recipe asks for a private repo."""
    out = tmp_path_factory.mktemp("release") / "run"
    sets = [
        "data.samples=4",
        "evaluation.samples=2",
        "evaluation.max_new_tokens=4",
        "outputs.gguf=F32",
        f"hub={{repo_id: {REPO}, private: true}}",
    ]
    made = CliRunner().invoke(main, ["run", "--out", str(out), "-q", *[a for s in sets for a in ("--set", s)]])
    assert made.exit_code == 0, made.output
    return out


def test_a_mathneuro_format_adapter_folder_is_an_adapter(run_dir: Path, tmp_path: Path) -> None:
    """``export_adapter(format="mathneuro")`` writes no ``adapter_config.json``: its folder is still an adapter to
    the card (library and relation), the push (its kind, hence its ``-adapter`` repo) and ``verify``.

    Mutation: ``ADAPTER``'s markers without ``MATHNEURO_CONFIG`` (outputs/adapter.py)."""
    folder = tmp_path / "adapter"
    lock = read_lock(run_dir)
    export_adapter("organism", run_dir / MASK_NAME, lock["recipe"]["edit"]["scale"] or 0.0, folder, format="mathneuro")
    assert (folder / MATHNEURO_CONFIG).is_file() and not (folder / "adapter_config.json").exists()
    assert output_of_folder(folder) is ADAPTER
    # the export's own lock, as a run's records an adapter's files (under adapter/); not the run's own run_files
    # (its adapter/ card and eval.json are not this folder's)
    mine = {k: v for k, v in lock.items() if k != "run_files"}
    write_lock(folder, {**mine, "outputs": {f"adapter/{k}": v for k, v in output_hashes(folder).items()}})
    card = card_for_folder(folder)
    assert card.data.library_name == "peft" and "base_model" not in card.data.to_dict()  # the organism: no Hub id
    assert "This PEFT adapter holds a MathNeuro edit" in card.text
    (folder / "README.md").write_text(card.content)
    plan = push_to_hub(folder, dry_run=True)  # the recipe's hub.repo_id, and the adapter's repo beside it
    assert plan.kind == "adapter" and plan.repo_id == f"{REPO}-adapter"
    verified = verify_run(folder, mask_path=str(run_dir / MASK_NAME), progress=False)  # as an `export` folder
    assert verified.ok, verified.failure_line()


def test_a_gguf_push_keeps_the_caller_s_base_repo(run_dir: Path, fake_hub: FakeHub) -> None:
    """``push_to_hub(kind="gguf", base_repo=...)`` names the caller's repo as the GGUF's ``base_model``, even when
    the recipe's own checkpoint repo exists on the Hub.

    Mutation: the Hub lookup of the checkpoint's repo made whatever ``base_repo`` says (publish/hub.py:
    ``if derived_from is not None:``)."""
    push_to_hub(run_dir / "checkpoint", REPO, token=TOKEN)  # the default the lookup would find
    push_to_hub(run_dir / "checkpoint", f"{REPO}-GGUF", kind="gguf", base_repo="me/caller", token=TOKEN)
    card = ModelCard(fake_hub.files(f"{REPO}-GGUF")["README.md"].decode())
    assert card.data.base_model == "me/caller" and "base_model:quantized:me/caller" in card.data.tags
    push_to_hub(run_dir / "checkpoint", f"{REPO}-GGUF", kind="gguf", token=TOKEN)  # not given: the lookup's
    assert ModelCard(fake_hub.files(f"{REPO}-GGUF")["README.md"].decode()).data.base_model == REPO


def test_push_public_asks_for_a_public_repo_over_the_recipe_s_private(run_dir: Path, fake_hub: FakeHub) -> None:
    """``push --public`` of a run whose recipe says ``hub.private: true``: the command line wins; without a flag the
    recipe's private applies.

    Mutation: ``push_to_hub`` applies ``hub.private`` whatever the flag (publish/hub.py: ``if hub.get("private"):``)."""
    assert yaml.safe_load((run_dir / LOCK_NAME).read_text())["recipe"]["hub"]["private"] is True
    run = CliRunner(env={"HF_TOKEN": TOKEN}).invoke
    public = run(main, ["push", str(run_dir), "--public", "--repo-id", "me/public"])
    assert public.exit_code == 0, public.output
    assert "visibility public" in public.output and fake_hub.repos["me/public"].private is False
    default = run(main, ["push", str(run_dir), "--repo-id", "me/private"])
    assert default.exit_code == 0 and fake_hub.repos["me/private"].private is True


def test_a_re_run_file_the_lock_does_not_record_still_reproduces() -> None:
    """A file the re-run writes that the lock does not list (the adapter of a run whose lock came from a standalone
    ``export`` of the checkpoint) is listed as ``extra``, not a failure.

    Mutation: ``rerun_ok`` counts only ``match`` (runs/reproduce.py)."""
    report = ReproduceReport(Path("out"), True, {"checkpoint/model.safetensors": "match", "adapter/a.st": "extra"})
    assert report.ok and report.verdict().startswith("yes, bit for bit")
    assert "  extra    adapter/a.st" in report.to_text()
    assert not ReproduceReport(Path("out"), True, {"checkpoint/model.safetensors": "differs"}).ok


def test_two_lm_eval_entries_of_one_model_both_reach_its_results_file() -> None:
    """Two ``evaluation.lm_eval`` entries (two harness runs) of the same model: its lm-eval results file holds both
    tasks, as one ``lm_eval`` call over both would report them.

    Mutation: each entry's report replaces the file's section instead of adding to it (evaluation/results.py:
    ``doc[key] = value``)."""

    def entry(task: str, value: float) -> LmEvalResult:
        results = {task: {"acc,none": value, "acc_stderr,none": 0.1}}
        return LmEvalResult({f"{task}/acc,none": value}, report={"results": results, "n-shot": {task: 0}})

    both = EvalResults(
        {"a": entry("task_a", 0.5), "b": entry("task_b", 0.25)},
        {"a": entry("task_a", 0.75), "b": entry("task_b", 0.5)},
    ).lm_eval_reports()
    assert set(both) == set(LM_EVAL_RESULTS)
    edited = both["lm_eval_results.edited.json"]
    assert edited["results"] == {
        "task_a": {"acc,none": 0.75, "acc_stderr,none": 0.1},
        "task_b": {"acc,none": 0.5, "acc_stderr,none": 0.1},
    }
    assert edited["n-shot"] == {"task_a": 0, "task_b": 0}
    assert both["lm_eval_results.base.json"]["results"]["task_b"]["acc,none"] == 0.25
