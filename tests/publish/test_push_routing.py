"""Push routing, decided without the Hub (issue 48 item 2; milliseconds): which folder a push publishes
(``publish/hub.py: artifact_folder``: a run folder's sub-folder, or the output's own folder given directly, as
``push run/adapter --adapter``) and which repo, visibility and branch it commits to (``hub_target``: a flag always
wins over the recipe's ``hub`` section, whose branch is checked as ``--branch`` is)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.outputs.registry import output
from mathneuro_edit.publish.hub import artifact_folder, hub_target

HUB = {"repo_id": "me/organism", "private": True, "revision": "v1"}


def test_a_flag_wins_over_the_recipe_s_hub_section() -> None:
    assert hub_target(HUB, "checkpoint", "", "you/other", False, "v2", False) == ("you/other", False, "v2")
    assert hub_target(HUB, "checkpoint", "", None, None, "main", False) == ("me/organism", True, "main")


def test_the_recipe_fills_what_the_flags_leave_out_one_repo_per_output() -> None:
    assert hub_target(HUB, "checkpoint", "", None, None, None, False) == ("me/organism", True, "v1")
    assert hub_target(HUB, "adapter", "-adapter", None, None, None, False) == ("me/organism-adapter", True, "v1")
    assert hub_target(HUB, "gguf", "-GGUF", None, None, None, False) == ("me/organism-GGUF", True, "v1")
    assert hub_target({"repo_id": "me/x", "private": False}, "checkpoint", "", None, None, None, False) == (
        "me/x",
        None,  # not private unless asked: the Hub's default
        None,  # no branch: main, decided when the push commits
    )
    assert hub_target({}, "checkpoint", "", "you/x", None, None, False) == ("you/x", None, None)


def test_no_repo_is_refused_unless_it_is_a_dry_run() -> None:
    assert hub_target({}, "adapter", "-adapter", None, None, None, True) == (None, None, None)
    assert hub_target({"repo_id": ""}, "adapter", "-adapter", None, None, None, True) == (None, None, None)
    with pytest.raises(InputError) as e:
        hub_target({}, "adapter", "-adapter", None, None, None, False)
    assert str(e.value) == (
        "no target repo: pass --repo-id you/name or set hub.repo_id in the recipe (the adapter goes to <id>-adapter)"
    )


def test_the_recipe_s_branch_is_checked_as_branch_is_and_named_by_where_it_came_from() -> None:
    for bad in ("refs/pr/1", "a..b", "", "x y"):
        with pytest.raises(InputError, match=r"^run/lock.yaml: recipe hub.revision: "):
            hub_target(
                {"revision": bad}, "checkpoint", "", "me/x", None, None, False, "run/lock.yaml: recipe hub.revision"
            )
    # a --branch given is not replaced by the recipe's, so the recipe's is not read at all
    assert hub_target({"revision": "refs/pr/1"}, "checkpoint", "", "me/x", None, "v3", False) == ("me/x", None, "v3")
    assert hub_target({"revision": 7}, "checkpoint", "", "me/x", None, None, False) == ("me/x", None, "7")


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_config.json").write_text("{}")
    return run


def test_a_run_folder_publishes_each_output_s_own_sub_folder(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    assert artifact_folder(run, None) == run / "checkpoint"
    assert artifact_folder(run, output("checkpoint")) == run / "checkpoint"
    assert artifact_folder(run, output("adapter")) == run / "adapter"
    assert artifact_folder(run, output("gguf")) == run / "checkpoint"  # the GGUF files lie beside the checkpoint


def test_an_output_s_own_folder_given_directly_is_published_as_it_is(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    assert artifact_folder(run / "adapter", output("adapter")) == run / "adapter"  # push run/adapter --adapter
    assert artifact_folder(run / "adapter", None) == run / "adapter"
    assert artifact_folder(run / "checkpoint", output("checkpoint")) == run / "checkpoint"
    assert artifact_folder(run / "checkpoint", output("gguf")) == run / "checkpoint"


def test_an_output_a_folder_does_not_hold_is_refused_in_one_line(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    with pytest.raises(InputError) as e:
        artifact_folder(run / "checkpoint", output("adapter"))
    assert str(e.value) == (
        f"{run / 'checkpoint'}: no adapter/ folder; run with outputs.adapter: true or push the folder itself"
    )
    (run / "adapter" / "adapter_config.json").unlink()  # a folder named adapter/ is a run's sub-folder all the same
    assert artifact_folder(run, output("adapter")) == run / "adapter"


def test_a_branch_refused_in_words_its_name_shown_escaped_and_cut() -> None:
    from mathneuro_edit.publish.hub import check_branch

    assert check_branch("exp/boost-1.1") == "exp/boost-1.1"
    with pytest.raises(InputError) as e:
        check_branch("refs/pr/1")
    assert str(e.value) == (
        "--branch: 'refs/pr/1' is a Hub ref (a pull request's), not a branch: a push never commits into an existing "
        "pull request, which may be someone else's; pass --create-pr to open one, or a branch name such as "
        "exp/boost-1.1"
    )
    with pytest.raises(InputError) as e:
        check_branch("caf\u00e9 x" + "y" * 100)
    shown = ("'caf\u00e9 x" + "y" * 100)[:80].replace("\u00e9", "\\xe9")
    assert str(e.value) == (
        f"--branch: {shown} is not a branch name the Hub takes as written (letters, digits, '.', '_', '-' and '/' "
        "between parts that do not start with '.' or '-'; no '..'); use e.g. main or exp/boost-1.1"
    )
    with pytest.raises(InputError, match=r"^recipe hub\.revision: 'x y' is not a branch name"):
        hub_target({"revision": "x y"}, "checkpoint", "", "me/x", None, None, False)
