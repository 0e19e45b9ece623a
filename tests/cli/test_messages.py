"""Messages that suggest the fix: each bad input, through the CLI, is exit 2 and one line saying what to do.

Also inputs that must work: an explicit ``--set edit.prune=true`` over a recipe's scale, and
``organism`` wherever a base is accepted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _one_line_error(code: int, text: str, *expected: str) -> None:
    assert code == 2, text
    # stage lines ("[1/3] load ...") announce what was being done; apart from them the failure is one line
    lines = [line for line in text.strip().splitlines() if not re.match(r"\[\d+/\d+\] ", line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    for part in expected:
        assert part in lines[0], (part, lines[0])


@pytest.fixture()
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Hub lookup fails the test (a path must never be tried as a Hub id)."""
    import huggingface_hub
    import transformers

    def refuse(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError(f"Hub lookup of {a[:1]}")

    def local_only(real):  # noqa: ANN001, ANN202 - loading an existing local folder is fine
        def load(ref, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            if not Path(str(ref)).is_dir():
                raise AssertionError(f"Hub lookup of {ref!r}")
            return real(ref, *a, **k)

        return load

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", local_only(cls.from_pretrained))


# ---------------------------------------------------------------------------------------------- top_k as a percent


def test_top_k_given_as_a_percent_suggests_the_fraction(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({**quickstart_recipe().resolved_dict(), "mask": {"top_k": 5}}))
    _one_line_error(
        *_run("run", recipe, "--out", tmp_path / "o"), "mask.top_k: must be in (0, 1] (got 5.0)", "did you mean 0.05?"
    )
    _one_line_error(*_run("plan", "--set", "mask.top_k=10"), "did you mean 0.1?")
    _one_line_error(
        *_run("sweep", "--out", tmp_path / "s", "--top-k", "0.01,5"),
        "--top-k: 5 is not in (0, 1]",
        "did you mean 0.05?",
    )
    assert not (tmp_path / "o").exists() and not (tmp_path / "s").exists()
    code, text = _run("plan", "--set", "mask.top_k=0")  # not a percent: no guess
    _one_line_error(code, text, "mask.top_k: must be in (0, 1] (got 0.0)")
    assert "did you mean" not in text


# ---------------------------------------------------------------------------------------------- prune over a scale


def test_explicit_prune_override_replaces_the_recipes_scale(tmp_path: Path) -> None:
    """Chosen rule: the override is explicit, so it wins (the scale is cleared); both in the overrides conflict."""
    boost = ROOT / "recipes" / "smollm2-arithmetic-boost.yaml"
    assert yaml.safe_load(boost.read_text())["edit"] == {"scale": 1.1}
    pruned = recipe_from_dict(yaml.safe_load(boost.read_text()), ["edit.prune=true"])
    assert pruned.edit.prune is True and pruned.edit.scale is None and pruned.edit.effective_scale == 0.0
    boosted = quickstart_recipe(["edit.scale=1.2"])  # the quickstart prunes: an explicit scale replaces the prune
    assert boosted.edit.prune is False and boosted.edit.scale == 1.2
    assert quickstart_recipe(["edit.prune=true"]).edit == quickstart_recipe().edit
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(quickstart_recipe(["edit.scale=1.1"]).resolved_dict()))
    code, text = _run("plan", recipe, "--set", "edit.prune=true")  # used to be "got both"
    assert code == 0 and "mask <=" in text, text
    _one_line_error(
        *_run("plan", recipe, "--set", "edit.prune=true", "--set", "edit.scale=1.2"),
        "overrides edit.scale=1.2 and edit.prune=true conflict",
        "drop one",
    )
    # in the recipe file itself both stay an error: only an override is an explicit request for this run
    recipe.write_text(yaml.safe_dump({**quickstart_recipe().resolved_dict(), "edit": {"scale": 1.1, "prune": True}}))
    _one_line_error(*_run("plan", recipe), "edit: set exactly one of scale", "(got both)")


# ---------------------------------------------------------------------------------------------- a missing local folder


@pytest.mark.parametrize("command", ["run", "plan", "calibrate"])
def test_missing_local_folder_is_not_looked_up_on_the_hub(
    command: str, tmp_path: Path, no_hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = ["--out", str(tmp_path / "o")] if command != "plan" else []
    _one_line_error(
        *_run(command, *out, "--set", "base.model=./models/llama"),
        "base.model: no such local folder './models/llama'",
        "check the path",
    )
    (tmp_path / "models").mkdir()  # a name whose first folder exists here is a path too
    _one_line_error(
        *_run(command, *out, "--set", "base.model=models/llama"),
        "base.model: no such local folder 'models/llama' (read as a path because models/ exists here)",
    )
    assert not (tmp_path / "o").exists()


def test_missing_local_base_in_verify_and_the_api(tmp_path: Path, no_hub: None) -> None:
    from mathneuro_edit.weights.checkpoint_writer import export_checkpoint

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    from mathneuro_edit.engine.mask import Mask

    mask = Mask({"w": torch.zeros(2, 2, dtype=torch.bool)}).save(tmp_path / "m.safetensors")
    code, text = _run("verify", folder, "--base", "./nowhere", "--mask", mask, "--scale", "0")
    # verify announces its audit ("[1/1] audit export/ ...") before it opens the base: that stage line aside,
    # the failure is one line
    text = "\n".join(line for line in text.splitlines() if not line.startswith("[1/1] audit "))
    _one_line_error(code, text, "base: no such local folder './nowhere'")
    with pytest.raises(InputError, match=r"no such local folder '~/surely-not-here-mn'"):
        export_checkpoint("~/surely-not-here-mn", {}, 0.0, tmp_path / "x")


# ---------------------------------------------------------------------------------------------- organism as a base


@pytest.fixture(scope="module")
def organism_mask(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mathneuro_edit import calibrate, find_math_params, load_model
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.organism.data import general_texts, math_texts

    if not (organism_path() / "model.safetensors").is_file():
        pytest.skip("organism model not built")
    model, tok = load_model("organism", dtype="float32", device="cpu")
    math = calibrate(model, tok, math_texts(4, seed=0, split="train"), progress=False)
    general = calibrate(model, tok, general_texts(4, seed=0, split="train"), progress=False)
    path = tmp_path_factory.mktemp("organism") / "mask.safetensors"
    find_math_params(model, math, general, top_k=0.05).save(path)
    return path


def test_organism_works_wherever_a_base_is_accepted(organism_mask: Path, tmp_path: Path, no_hub: None) -> None:
    from safetensors.torch import load_file

    from mathneuro_edit import export_adapter, export_checkpoint
    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.organism import organism_path

    ckpt = export_checkpoint("organism", organism_mask, 0.0, tmp_path / "ckpt")  # used to try the Hub
    export_adapter("organism", organism_mask, 0.0, tmp_path / "adapter")
    base = load_file(organism_path() / "model.safetensors")
    edited = load_file(ckpt / "model.safetensors")
    mask = Mask.load(organism_mask)
    name = next(n for n in sorted(mask) if mask[n].any())
    expected = torch.where(mask[name], torch.zeros_like(base[name]), base[name])  # pruned: exactly 0
    assert torch.equal(edited[name], expected)
    for folder in ("ckpt", "adapter"):
        code, text = _run("verify", tmp_path / folder, "--base", "organism", "--mask", organism_mask, "--scale", "0")
        assert code == 0, text


# ---------------------------------------------------------------------------------------------- inspect --plot


def test_inspect_plot_of_a_stats_file_fails_before_the_table(tmp_path: Path) -> None:
    from mathneuro_edit.engine.stats import ActivationStats
    from mathneuro_edit.engine.targets import Target

    target = Target("w", "linear", "m", (2, 3))
    stats = ActivationStats({"w": torch.ones(1, 3)}, {"w": torch.ones(1, 3)}, {"w": torch.tensor([1])}, {"w": target})
    path = stats.save(tmp_path / "math.stats.safetensors")
    code, text = _run("inspect", path)
    assert code == 0 and "w" in text  # the table alone works
    _one_line_error(
        *_run("inspect", path, "--plot", tmp_path / "x.png"), "--plot needs a mask file", "drop --plot or pass a mask"
    )
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------------------------------------- the house


def test_recipe_does_not_import_recipe_io() -> None:
    """The dependency is one way: recipe/io.py reads recipes into the type defined by recipe/schema.py."""
    tree = ast.parse((ROOT / "mathneuro_edit" / "recipe" / "schema.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "io" not in imported and "mathneuro_edit.recipe.io" not in imported
    io_tree = ast.parse((ROOT / "mathneuro_edit" / "recipe" / "io.py").read_text())
    assert "schema" in {n.module for n in ast.walk(io_tree) if isinstance(n, ast.ImportFrom)}


def test_inspect_of_a_gguf_or_a_broken_file_says_what_it_reads(tmp_path: Path) -> None:
    """A GGUF model given to inspect by mistake is named as one (it was called "corrupt"); any other unreadable
    file says what inspect reads."""
    gguf, junk = tmp_path / "model-Q8_0.gguf", tmp_path / "mask.safetensors"
    gguf.write_bytes(b"GGUF" + bytes(60))
    junk.write_bytes(b"garbage")
    fix = "inspect reads a mask (mask.safetensors) or a statistics file"
    _one_line_error(*_run("inspect", gguf), "model-Q8_0.gguf: a GGUF model file;", fix)
    _one_line_error(*_run("inspect", junk), "mask.safetensors: not a readable safetensors file (", fix)
