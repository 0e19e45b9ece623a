"""Adapters that cannot silently do nothing.

- The adapter card's loading code (``PeftModel.from_pretrained``) is run exactly as the card prints it, and gives
  the edited checkpoint's logits.
- transformers' own ``model.load_adapter(ADAPTER)`` on our SHiRA adapter does not raise: it reports every
  ``shira_indices`` key as unexpected, leaves the weights unedited, and the next forward pass fails with
  ``KeyError: 'default'`` (transformers 5.24, PEFT 0.21). This test pins that symptom, so a transformers release
  that changes it (loads the edit, or raises at load) fails here and the card's and docs' warning is revisited.
- The card and the docs name the trap with its symptom, and the ``AutoPeftModelForCausalLM`` caveat of a local base.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from mathneuro_edit.organism import organism_path
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.pipeline import run_recipe

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[1, 40, 41, 42, 43, 44, 45]])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trap") / "run"
    run_recipe(quickstart_recipe(["data.samples=4", "evaluation=null"]), out, progress=False)
    return out


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_the_adapter_card_s_own_code_loads_the_edit(run: Path) -> None:
    from transformers import AutoModelForCausalLM

    card = (run / "adapter" / "README.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", card, re.DOTALL) if "PeftModel" in c]
    assert "PeftModel.from_pretrained(" in code and "load_adapter" not in code
    here = Path.cwd()
    os.chdir(run / "adapter")  # the card's code runs in the adapter's folder (`PeftModel.from_pretrained(base, ".")`)
    try:
        namespace: dict = {}
        exec(compile(code, "adapter/README.md", "exec"), namespace)  # noqa: S102 - the card's code is the test
    finally:
        os.chdir(here)
    checkpoint = AutoModelForCausalLM.from_pretrained(run / "checkpoint")
    assert torch.equal(_logits(namespace["model"]), _logits(checkpoint))


def test_transformers_load_adapter_leaves_the_model_unedited_and_says_so_only_in_unexpected_keys(run: Path) -> None:
    from transformers import AutoModelForCausalLM

    base = _logits(AutoModelForCausalLM.from_pretrained(organism_path()))
    edited = _logits(AutoModelForCausalLM.from_pretrained(run / "checkpoint"))
    assert not torch.equal(base, edited)  # the edit changes the outputs: the comparison below can tell

    model = AutoModelForCausalLM.from_pretrained(organism_path())
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    info = model.load_adapter(str(run / "adapter"))  # no exception: the trap
    unexpected = set(getattr(info, "unexpected_keys", None) or ())
    assert unexpected and all(".shira_indices." in k for k in unexpected), sorted(unexpected)[:3]
    assert len(unexpected) == 28  # every edited matrix of the organism: its indices are dropped
    for name, value in model.state_dict().items():  # the base weights as they were: nothing of the edit applied
        if name in weights:
            assert torch.equal(value, weights[name]), name
    try:
        logits = _logits(model)
    except KeyError as e:  # the symptom the card and the docs state
        assert e.args == ("default",), e
    else:  # transformers changed: whatever it does now, the card's and the docs' warning must be revisited
        state = "the edit" if torch.equal(logits, edited) else "the base" if torch.equal(logits, base) else "neither"
        pytest.fail(
            f"transformers' load_adapter now runs and gives {state}'s logits: revisit the adapter card's "
            "and docs/publishing.md's warning"
        )


def test_the_card_and_the_docs_name_the_trap_and_the_auto_peft_caveat(run: Path) -> None:
    card = " ".join((run / "adapter" / "README.md").read_text().split())
    for text in (card, " ".join((ROOT / "docs" / "publishing.md").read_text().split())):
        assert "`shira_indices` key as UNEXPECTED" in text and "unedited" in text and "KeyError: 'default'" in text
        assert "asks the Hub for `None`" in text
    releasing = " ".join((ROOT / "docs" / "releasing.md").read_text().split())
    assert "`shira_indices` key as UNEXPECTED and leaves the weights unedited" in releasing
