"""The family matrix (docs/families.md): each family's row is run here, cell by cell, and must be what the doc says.

Every cell is a passing check or a refusal: :func:`tests._families.run_family` runs the recipe on a
tiny model of the family's real config shape and checks each output with plain transformers / PEFT (see its
docstring); a refused output must be refused by the run with exactly the line the plan gave from config.json.
Here, besides: the doc is the generated one, the refusal's own recipe line gives a run that works, the refusal
comes before any weight is read, ``plan`` lists the outputs from a folder holding config.json only, and Llama 4's
fused experts are scored like an independent per-token implementation.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
import yaml

import tests._families as fam
from mathneuro_edit import InputError
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.layout import MASK_NAME
from mathneuro_edit.outputs.adapter import ADAPTER
from mathneuro_edit.outputs.checkpoint import CHECKPOINT
from mathneuro_edit.runs.pipeline import run_recipe
from mathneuro_edit.weights.gguf_arch import GGUF_WRITTEN
from tests._family_shapes import FAMILY_SHAPES, family_shape
from tests._llama_cpp import logit_gap
from tests.weights.test_gguf import _cpp_greedy, _greedy, _llama

DOC = Path(__file__).resolve().parents[2] / "docs" / "families.md"


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one thread is several times faster on a shared CPU (no spinning workers)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _doc() -> tuple[dict[str, list[str]], dict[int, str]]:
    """docs/families.md as ``{family: [cell per CELLS]}`` and ``{refusal number: line}``."""
    text = DOC.read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) == 2 + len(fam.CELLS) and parts[1].startswith("`"):
            rows[parts[0]] = parts[2:]
    notes = {int(n): t for n, t in re.findall(r'<a id="refusal-\d+"></a>(\d+)\. (.*)', text)}
    return rows, notes


@pytest.mark.parametrize("name", [s.name for s in FAMILY_SHAPES])
def test_family_row_is_run_and_matches_the_doc(name, tmp_path) -> None:
    row = fam.run_family(family_shape(name), tmp_path)  # raises on any failed check
    assert set(row.cells) == set(fam.CELLS)
    doc_rows, notes = _doc()
    assert name in doc_rows, f"docs/families.md has no row for {name}: run python scripts/families.py"
    for cell, shown in zip(fam.CELLS, doc_rows[name]):
        got = row.cells[cell]
        if got == fam.WORKS:
            assert shown == "works (tested)", (name, cell, shown)
        else:
            n = int(re.fullmatch(r"refused \[(\d+)\]\(#refusal-\d+\)", shown).group(1))
            assert notes[n] == got.removeprefix("refused: "), (name, cell)
            assert "\n" not in got and ("set `outputs.adapter: false`" in got or "set outputs.gguf: null" in got)
    # checkpoint, mask, calibrate, verify and reproduce work for every family; refusals are the plan's
    assert all(row.cells[c] == fam.WORKS for c in ("calibrate", "mask", "checkpoint", "verify", "reproduce"))
    for output in ("adapter", "gguf"):
        assert (row.cells[output] == fam.WORKS) == (row.planned[output] is None)


def test_doc_lists_every_family_once() -> None:
    rows, _ = _doc()
    assert list(rows) == [s.name for s in FAMILY_SHAPES]


@pytest.mark.parametrize("name", ["Qwen2-MoE", "Llama 4 (text)"])
def test_the_refusal_s_recipe_line_gives_an_adapter_that_plain_peft_loads(name, tmp_path) -> None:
    """The MoE refusal offers `targets.exclude: [...]`: with exactly that line the run writes a PEFT adapter."""
    base = fam.save_family_base(tmp_path / "base", family_shape(name))
    with pytest.raises(InputError) as err:
        run_recipe(fam.family_recipe(base, adapter=True, gguf=None), tmp_path / "refused", progress=False)
    exclude = yaml.safe_load(re.search(r"`targets\.exclude: (\[.*?\])`", str(err.value)).group(1))
    assert exclude and all(isinstance(p, str) for p in exclude)
    out = tmp_path / "run"
    run_recipe(fam.family_recipe(base, adapter=True, gguf=None, exclude=exclude), out, progress=False)
    mask = Mask.load(out / MASK_NAME)
    assert not any(re.search(p, n) for p in exclude for n in mask)  # experts and routers were not scored
    baked = fam.check_checkpoint(base, out / CHECKPOINT.folder, mask)
    fam.check_adapter(base, out / ADAPTER.folder, baked)


def test_adapter_refusal_comes_before_any_weight_is_read(tmp_path, monkeypatch) -> None:
    import mathneuro_edit.runs.pipeline as pipeline

    base = fam.save_family_base(tmp_path / "base", family_shape("Qwen3-MoE"))
    (base / "model.safetensors").write_bytes(b"not weights: the refusal must not read this file")
    monkeypatch.setattr(pipeline, "load_step", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(
        InputError,
        match=r"^outputs\.adapter: qwen3_moe gets a checkpoint only: .*"
        r"set `outputs\.adapter: false` in the recipe",
    ):
        pipeline.run_recipe(fam.family_recipe(base, adapter=True, gguf=None), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_plan_lists_the_outputs_from_config_json_alone(tmp_path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    for name, adapter, gguf in (
        ("DeepSeek-V3", "no (outputs.adapter: deepseek_v3 gets a checkpoint only", "yes"),
        ("JetMoE", "no (outputs.adapter: jetmoe gets a checkpoint only", "no ("),
        ("Qwen3-MoE", "no (outputs.adapter: qwen3_moe gets a checkpoint only", "yes"),
        ("Llama 3.x", "yes", "yes"),
    ):
        folder = tmp_path / name.split()[0]
        folder.mkdir()
        family_shape(name).config().save_pretrained(folder)  # config.json only: no weights to read
        recipe = tmp_path / f"{folder.name}.yaml"
        recipe.write_text(
            yaml.safe_dump(
                {
                    "base": {"model": str(folder), "dtype": "float32"},
                    "data": {"math": "organism:math", "general": ["organism:general"]},
                    "edit": {"scale": 1.1},
                    "outputs": {"adapter": True, "gguf": "Q8_0"},
                }
            )
        )
        res = CliRunner().invoke(main, ["plan", str(recipe)])
        assert res.exit_code == 0, res.output
        assert "outputs this family" in res.output and "  checkpoint: yes" in res.output
        assert f"  adapter: {adapter}" in res.output and f"  gguf: {gguf}" in res.output


def test_llama4_experts_are_scored_per_expert_on_the_tokens_routed_to_them() -> None:
    """Llama 4 feeds every token to every expert times its router score (0 if not routed): each expert's statistic
    is the per-sample L2 norm over its routed tokens of what it multiplies, here recomputed with plain torch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit import calibrate
    from mathneuro_edit.organism import organism_path

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(family_shape("Llama 4 (text)").config()).eval()
    tok = AutoTokenizer.from_pretrained(organism_path())
    texts = ["Question: 12 * 3?\nAnswer: 36", "2 + 2 = 4", "The quiet river wound through the valley."]
    stats = calibrate(model, tok, texts, max_length=32, batch_size=2, progress=False)
    experts = {n: m for n, m in model.named_modules() if type(m).__name__ == "Llama4TextExperts"}
    assert {f"{n}.{p}" for n in experts for p in ("gate_up_proj", "down_proj")} <= set(stats.targets)
    ref = {n: [torch.zeros(4, 64, dtype=torch.float64) for _ in range(2)] + [torch.zeros(4)] for n in experts}

    def hook(name):
        def f(module, args):
            x = args[0].reshape(module.num_experts, -1, args[0].shape[-1])
            for e in range(module.num_experts):
                xe = x[e][(x[e] != 0).any(-1)].double()
                gate, up = (xe @ module.gate_up_proj[e].double()).chunk(2, dim=-1)
                ref[name][0][e] += xe.pow(2).sum(0).sqrt()
                ref[name][1][e] += (up * torch.nn.functional.silu(gate)).pow(2).sum(0).sqrt()
                ref[name][2][e] += len(xe)

        return f

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in experts.items()]
    with torch.no_grad():
        for text in texts:
            model(torch.tensor([tok(text).input_ids]))
    for h in handles:
        h.remove()
    for n in experts:
        torch.testing.assert_close(stats.norm_sum[f"{n}.gate_up_proj"].double(), ref[n][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(stats.norm_sum[f"{n}.down_proj"].double(), ref[n][1], rtol=1e-4, atol=1e-5)
        assert stats.token_count[f"{n}.gate_up_proj"].tolist() == ref[n][2].long().tolist()
        assert 0 < int(ref[n][2].sum()) < 4 * sum(len(tok(t).input_ids) for t in texts)  # top-1: not all experts


def test_run_dry_run_refuses_an_output_the_family_does_not_get(tmp_path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    folder = tmp_path / "mixtral"
    family_shape("Mixtral").config().save_pretrained(folder)  # config.json only
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "base": {"model": str(folder), "dtype": "float32"},
                "data": {"math": "organism:math", "general": ["organism:general"]},
                "edit": {"scale": 1.1},
                "outputs": {"adapter": True},
            }
        )
    )
    res = CliRunner().invoke(main, ["run", str(recipe), "--out", str(tmp_path / "out"), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert "outputs.adapter: mixtral gets a checkpoint only" in res.output and "`outputs.adapter: false`" in res.output
    ok = CliRunner().invoke(
        main, ["run", str(recipe), "--out", str(tmp_path / "out"), "--dry-run", "--set", "outputs.adapter=false"]
    )
    assert ok.exit_code == 0, ok.output
    assert not (tmp_path / "out").exists()


def test_jetmoe_parallel_experts_are_scored_on_the_rows_routed_to_each_expert() -> None:
    """JetMoE's ParallelExperts get their routed rows sorted by expert (``expert_size`` each), in its MLP and in its
    mixture of attention heads; each expert's statistic is recomputed here text by text with plain torch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit import calibrate
    from mathneuro_edit.organism import organism_path

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(family_shape("JetMoE").config()).eval()
    tok = AutoTokenizer.from_pretrained(organism_path())
    texts = ["Question: 12 * 3?\nAnswer: 36", "2 + 2 = 4", "The quiet river wound through the valley."]
    stats = calibrate(model, tok, texts, max_length=32, batch_size=2, progress=False)  # padded batches
    ref: dict[str, torch.Tensor] = {}
    counts: dict[str, torch.Tensor] = {}

    def pre(name):
        def f(module, args):
            x, sizes = args
            start = 0
            for e, n in enumerate(sizes):
                ref.setdefault(name, torch.zeros(module.num_experts, x.shape[1], dtype=torch.float64))
                counts.setdefault(name, torch.zeros(module.num_experts, dtype=torch.long))
                ref[name][e] += x[start : start + n].double().pow(2).sum(0).sqrt()
                counts[name][e] += n
                start += n

        return f

    handles = [
        m.register_forward_pre_hook(pre(f"{n}.weight"))
        for n, m in model.named_modules()
        if type(m).__name__ == "JetMoeParallelExperts"
    ]
    with torch.no_grad():
        for text in texts:
            model(torch.tensor([tok(text).input_ids]))
    for h in handles:
        h.remove()
    assert len(ref) == 8  # 2 layers x (MLP, attention) x (input, output)
    for name, want in ref.items():
        assert stats.targets[name].kind == "experts"
        torch.testing.assert_close(stats.norm_sum[name].double(), want, rtol=1e-4, atol=1e-5)
        assert stats.token_count[name].tolist() == counts[name].tolist()


def test_gguf_tokenizer_rows_are_run_and_checked_by_llama_cpp(tmp_path) -> None:
    """The GGUF tokenizer table of docs/families.md: each SentencePiece row marked works is a whole run whose GGUF
    llama.cpp itself loads, tokenizes like transformers (spaces, digits, a leading space, unicode needing byte
    fallback, newlines) and runs with transformers' logits and greedy continuation on the baked checkpoint; each
    refused row is the run's own one-line refusal, raised before any forward pass."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cells = fam.tokenizer_rows(tmp_path)
    text = DOC.read_text(encoding="utf-8")
    _, notes = _doc()
    assert set(cells) == {next(iter(cells)), *fam.SPM_WORKS.values(), *fam.SPM_REFUSED.values()}
    for kind, got in cells.items():
        shown = re.search(rf"^\| {re.escape(kind)} \| (.*) \|$", text, re.MULTILINE).group(1)
        if got == fam.WORKS:
            assert shown == "works (tested)"
        else:
            n = int(re.fullmatch(r"refused \[(\d+)\]\(#refusal-\d+\)", shown).group(1))
            assert notes[n] == got.removeprefix("refused: ")
            assert "SentencePiece-style" in got and got.endswith("set outputs.gguf: null") and "\n" not in got
    assert all(cells[kind] == fam.WORKS for kind in fam.SPM_WORKS.values())
    prompts = [
        "Question: Tom has 3 apples and buys 4 more.",
        " a leading space",
        "two  spaces and 12345",
        "na\u00efve caf\u00e9 \u65e5\u672c \U0001f642",
        "line one\nline two\n\nend",
    ]
    for style in fam.SPM_WORKS:
        ckpt = fam.sentencepiece_checkpoint(tmp_path, style)
        if importlib.util.find_spec("llama_cpp") is None:
            _llama(ckpt / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
        llm = _llama(ckpt / "model-F32.gguf")
        ref = AutoModelForCausalLM.from_pretrained(ckpt).eval()
        tok = AutoTokenizer.from_pretrained(ckpt)
        for prompt in prompts:
            ids = tok(prompt).input_ids
            assert llm.tokenize(prompt.encode(), add_bos=True, special=False) == ids, (style, prompt)
            assert logit_gap(llm, ref, ids) < 1e-3, (style, prompt)
            assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8), (style, prompt)


@pytest.mark.parametrize("name", [s.name for s in FAMILY_SHAPES if s.config().model_type in GGUF_WRITTEN])
def test_llama_cpp_runs_the_gguf_of_every_family_marked_works(name, tmp_path) -> None:
    """Every family whose GGUF cell is "works" is read by llama.cpp itself: it tokenizes
    like transformers, and its logits and greedy continuation match transformers' on the baked checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    base = fam.save_family_base(tmp_path / "base", family_shape(name))
    out = tmp_path / "run"
    fam.run_recipe(fam.family_recipe(base, adapter=False, gguf="F32"), out, progress=False)
    ckpt = out / "checkpoint"
    llm = _llama(ckpt / "model-F32.gguf")
    ref = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    for prompt in ["Question: Tom has 3 apples and buys 4 more.", "The quiet river"]:
        ids = tok(prompt).input_ids
        assert llm.tokenize(prompt.encode(), add_bos=True, special=False) == ids
        assert logit_gap(llm, ref, ids) < 1e-3, prompt
        assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8), prompt
