"""What ``push`` prints reads as what happened: after a push to a repo that did not exist, it says the repo was
created (it said "does not exist yet" after creating it); the card's metadata is YAML, one key per line, as the
card's own header reads (it was one long line of Python reprs)."""

from __future__ import annotations

import yaml

from mathneuro_edit.publish.hub import PushResult

METADATA = {
    "library_name": "transformers",
    "tags": ["mathneuro", "pruning"],
    "model-index": [{"name": "x", "results": [{"metrics": [{"type": "accuracy", "value": 0.0}]}]}],
}


def _result(dry_run: bool, remote: str = "new") -> PushResult:
    return PushResult(
        repo_id="me/x",
        revision="main",
        private=None,
        files=[("README.md", 10)],
        commit_message="Upload",
        card_metadata=METADATA,
        dry_run=dry_run,
        remote=remote,
    )


def test_a_push_to_a_new_repo_says_it_was_created_and_a_dry_run_that_it_will_be() -> None:
    done, planned = _result(dry_run=False).describe(), _result(dry_run=True).describe()
    assert "the repo did not exist: it was created with these files" in done and "does not exist yet" not in done
    assert "the repo does not exist yet: it is created with these files" in planned


def test_card_metadata_prints_as_yaml_one_key_per_line() -> None:
    lines = _result(dry_run=True).describe().splitlines()
    start = lines.index("card metadata:")
    block = [line for line in lines[start + 1 :] if line.startswith("  ")]
    assert yaml.safe_load("\n".join(line[2:] for line in block)) == METADATA
    assert block[0] == "  library_name: transformers" and max(map(len, block)) < 100
