"""Hub kernels (compiled code transformers downloads from the Hub) are never fetched unless the recipe asks (issue 40).

transformers >= 5.2x with the ``kernels`` package reads ``from_pretrained(use_kernels=None)`` as "use Hub kernels":
on CUDA it fetched ``kernels-community/rotary`` and ran it; offline every CUDA load failed, and the error line
blamed config.json. Here, without a GPU:

- what ``from_pretrained`` receives from every loader of the package: ``use_kernels=False``, or ``True`` only with
  ``base.use_kernels: true``; and transformers never kernelizes a model we load;
- a CLI run with ``HF_HUB_OFFLINE=1``, ``kernels`` installed and every Hub kernel fetch failing as it does offline on
  a GPU: it never asks for one and succeeds;
- a failed load names its real cause: the kernels, the config, or neither (then not config.json);
- a lock may not turn kernels on (only the user's ``--set base.use_kernels=true``).

docs/reliability.md lists what each test promises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import transformers

from mathneuro_edit.errors import InputError
from mathneuro_edit.organism import load_organism, organism_path
from mathneuro_edit.publish.lock_policy import refused_lock_settings
from mathneuro_edit.recipe.input_sections import BaseConfig
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.runs.steps.mask import load_recipe_model
from mathneuro_edit.weights.adapter import load_edited
from mathneuro_edit.weights.loading import load_model

# what kernels reports offline on a GPU (issue 40's H200 run); raised here wherever a Hub kernel would be fetched
OFFLINE_KERNEL = (
    "Version 2 of 'kernels-community/rotary' is not available in the local cache and Hugging Face Hub is in "
    "offline mode"
)


class _Stop(Exception):
    """Raised by the spy once the arguments are recorded: nothing of the load needs to happen."""


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``AutoModelForCausalLM.from_pretrained`` call's keyword arguments (the load itself goes on)."""
    calls: list[dict[str, Any]] = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    return calls


@pytest.fixture
def no_kernelize(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' kernelize step fails as it does offline on a GPU (on CPU it would find nothing to fetch)."""
    import transformers.modeling_utils as modeling

    def offline(*args: Any, **kwargs: Any) -> None:
        raise ValueError(OFFLINE_KERNEL)

    monkeypatch.setattr(modeling, "kernelize", offline)


def test_every_loader_tells_transformers_not_to_use_hub_kernels(
    seen: list[dict[str, Any]], no_kernelize: None, tmp_path: Path
) -> None:
    model, _ = load_model("organism", device="cpu")
    assert seen[-1]["use_kernels"] is False and model.use_kernels is False
    model, _ = load_model(BaseConfig(model="organism", device="cpu"))
    assert seen[-1]["use_kernels"] is False
    model, _ = load_recipe_model(quickstart_recipe())  # what run, calibrate, eval, sweep load through
    assert seen[-1]["use_kernels"] is False
    load_organism()
    assert seen[-1]["use_kernels"] is False
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(Exception):  # noqa: B017 - an empty adapter config: only the base load matters here
        load_edited(str(organism_path()), adapter)
    assert seen[-1]["use_kernels"] is False and seen[-1]["trust_remote_code"] is False
    assert len(seen) == 5


def test_the_gguf_dequantization_never_uses_hub_kernels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mathneuro_edit.weights import gguf_reader

    pytest.importorskip("gguf")
    calls: list[dict[str, Any]] = []

    def spy(cls: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise _Stop

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    with pytest.raises(InputError):
        gguf_reader._materialise(tmp_path / "m.gguf", "0" * 64, tmp_path / "out")
    assert [c["use_kernels"] for c in calls] == [False]


def test_base_use_kernels_true_is_the_only_way_to_ask_for_them(seen: list[dict[str, Any]]) -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), ["base.use_kernels=true", "base.device=cpu"])
    assert recipe.base.use_kernels is True
    load_recipe_model(recipe)
    assert seen[-1]["use_kernels"] is True
    load_model(recipe.base)
    assert seen[-1]["use_kernels"] is True
    assert quickstart_recipe().base.use_kernels is False  # the default, written into every lock
    assert quickstart_recipe().public_dict()["base"]["use_kernels"] is False
    with pytest.raises(InputError, match="use_kernels"):  # a boolean, strictly (like trust_remote_code)
        recipe_from_dict(quickstart_recipe().resolved_dict(), ['base.use_kernels="yes"'])


def test_a_kernel_failure_names_the_kernels_not_config_json(no_kernelize: None) -> None:
    with pytest.raises(InputError) as caught:
        load_model(BaseConfig(model="organism", device="cpu", use_kernels=True))
    line = str(caught.value)
    assert "Hub kernels are not available" in line and "kernels-community/rotary" in line, line
    assert "set base.use_kernels: false" in line and "config.json" not in line, line


def test_a_config_transformers_cannot_read_still_names_config_json(tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(organism_path(), base)
    config = json.loads((base / "config.json").read_text())
    config.update(model_type="no-such-family", architectures=["NoSuchFamilyForCausalLM"])
    (base / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"check its config\.json") as caught:
        load_model(str(base), device="cpu")
    assert "kernel" not in str(caught.value)


def test_another_failure_does_not_blame_config_json(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.modeling_utils as modeling

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ValueError("a weight could not be placed")

    monkeypatch.setattr(modeling.PreTrainedModel, "set_use_kernels", broken)  # a failure after the config is read
    with pytest.raises(InputError) as caught:
        load_model("organism", device="cpu")
    line = str(caught.value)
    assert "a weight could not be placed" in line and "config.json reads fine" in line, line
    assert "check its config.json" not in line, line


def test_a_lock_may_not_turn_hub_kernels_on() -> None:
    lock = {"recipe": {"base": {"model": "organism", "use_kernels": True}}}
    refused = refused_lock_settings(lock)
    assert [r.split(" (")[0] for r in refused] == ["base.use_kernels: true"], refused
    assert "--set base.use_kernels=true" in refused[0]
    assert refused_lock_settings(lock, ["base.use_kernels=true"]) == []  # the user's own command line
    assert refused_lock_settings({"recipe": {"base": {"model": "organism", "use_kernels": False}}}) == []


@pytest.mark.slow
def test_an_offline_run_with_kernels_installed_never_asks_for_hub_kernels(tmp_path: Path) -> None:
    """A real process, HF_HUB_OFFLINE=1, ``kernels`` importable, and every route to a Hub kernel failing as it
    does offline on a GPU (kernels' own fetch and kernelize, transformers' wrappers)."""
    pytest.importorskip("kernels")
    script = textwrap.dedent(
        f"""
        import sys
        import kernels
        import transformers.integrations.hub_kernels as hub_kernels
        import transformers.modeling_utils as modeling

        def offline(*args, **kwargs):
            raise ValueError({OFFLINE_KERNEL!r})

        for module, name in [(kernels, "get_kernel"), (kernels, "kernelize"), (hub_kernels, "get_kernel"),
                             (hub_kernels, "_kernels_kernelize"), (hub_kernels, "kernelize"),
                             (hub_kernels, "lazy_load_kernel"), (modeling, "kernelize")]:
            setattr(module, name, offline)
        from mathneuro_edit.cli.main import main
        sys.argv = ["mathneuro-edit", "calibrate", "--out", sys.argv[1], "-q"]
        main()
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("USE_HUB_KERNELS", None)  # transformers' default: kernels on
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "stats")], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kernel" not in proc.stderr.lower(), proc.stderr
    assert (tmp_path / "stats" / "math.stats.safetensors").is_file()
