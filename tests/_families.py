"""The family matrix: every output of a whole run on a tiny model of each family, checked independently.

For each :data:`tests._family_shapes.FAMILY_SHAPES` entry, :func:`run_family` saves a tiny random
model of the family's real config shape (with the organism's byte-level BPE tokenizer), plans it from its
config alone (:func:`~mathneuro_edit.runs.plan.plan_recipe`: which outputs this family gets), runs the recipe
(calibrate -> mask -> checkpoint -> adapter -> GGUF) with every output the plan says it supports, and checks each
output with plain libraries, not with the code that wrote it:

- calibrate / mask: the statistics cover every scored weight with tokens counted; the mask selects weights;
- checkpoint: plain transformers loads it, and every tensor equals the base's with the masked entries times the
  scale (``torch.where``) and the rest unchanged;
- adapter: plain PEFT loads it on the base, and ``merge_and_unload()`` equals the checkpoint tensor for tensor;
- gguf: transformers' own GGUF reader loads the file back to the checkpoint's tensors (where it reads the
  architecture); tests/runs/test_families.py has llama.cpp itself load each one and match transformers' logits;
- verify: :func:`~mathneuro_edit.weights.audit.verify` passes on each output, and fails for the wrong scale;
- reproduce: :func:`~mathneuro_edit.runs.reproduce.reproduce` re-runs the lock bit for bit.

An output the plan refuses is recorded with the plan's exact line, and the run is checked to refuse it with the
same line. ``python scripts/families.py`` writes docs/families.md from the results; tests/runs/test_families.py runs
the same cells.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.engine.stats import ActivationStats
from mathneuro_edit.errors import InputError
from mathneuro_edit.layout import MASK_NAME, MATH_STATS_NAME, STATS_DIR
from mathneuro_edit.organism import organism_path
from mathneuro_edit.outputs.adapter import ADAPTER
from mathneuro_edit.outputs.checkpoint import CHECKPOINT
from mathneuro_edit.recipe.io import recipe_from_dict
from mathneuro_edit.runs.pipeline import run_recipe
from mathneuro_edit.runs.plan import plan_recipe
from mathneuro_edit.runs.reproduce import reproduce
from mathneuro_edit.weights.audit import verify
from mathneuro_edit.weights.gguf_arch import tensor_shift
from mathneuro_edit.weights.gguf_writer import gguf_filename
from tests._family_shapes import FAMILY_SHAPES, VOCAB, FamilyShape, family_shape

__all__ = [
    "CELLS",
    "FamilyResult",
    "run_family",
    "run_all",
    "tokenizer_rows",
    "save_sentencepiece_base",
    "sentencepiece_tokenizer",
    "sentencepiece_checkpoint",
    "SPM_WORKS",
    "SPM_REFUSED",
    "save_family_base",
    "family_recipe",
    "matrix_markdown",
    "check_checkpoint",
    "check_adapter",
    "check_gguf_readback",
]

CELLS = ("calibrate", "mask", "checkpoint", "adapter", "gguf", "verify", "reproduce")
SCALE = 1.1
WORKS = "works (tested)"


@dataclass
class FamilyResult:
    """One row of the matrix: ``cells[name]`` is :data:`WORKS` or ``"refused: <the exact line>"``."""

    shape: FamilyShape
    model_type: str
    cells: dict[str, str] = field(default_factory=dict)
    planned: dict[str, str | None] = field(default_factory=dict)


def save_family_base(folder: str | Path, shape: FamilyShape, seed: int = 0) -> Path:
    """A tiny random model of ``shape`` (1-D weights random around 1) with the organism's tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(shape.config()).eval()
    with torch.no_grad():  # norms away from their init, so that a mixed-up tensor shows
        for _, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(organism_path()).save_pretrained(folder)
    return folder


def family_recipe(base: Path, *, adapter: bool, gguf: str | None, exclude: list[str] | None = None) -> Any:
    """The matrix's recipe: the organism's math/general texts, a few samples, every output asked for."""
    return recipe_from_dict(
        {
            "base": {"model": str(base), "dtype": "float32", "device": "cpu"},
            "data": {"math": "organism:math", "general": ["organism:general"], "samples": 8, "seed": 0},
            "calibration": {"max_length": 48, "batch_size": 4},
            "targets": {"exclude": exclude or []},
            "mask": {"method": "mathneuro", "top_k": 0.1},
            "edit": {"scale": SCALE},
            "outputs": {"checkpoint": True, "adapter": adapter, "gguf": gguf},
        }
    )


def _load(folder: Path, **kwargs: Any) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def check_checkpoint(base: Path, ckpt: Path, mask: Mask) -> dict[str, torch.Tensor]:
    before, after = _load(base), _load(ckpt)
    _expect(set(before) == set(after), "checkpoint: other tensors than the base's")
    for name, w in before.items():
        want = torch.where(mask[name], w * torch.tensor(SCALE, dtype=w.dtype), w) if name in mask else w
        _expect(torch.equal(after[name], want), f"checkpoint: {name} is not the base's with the mask applied")
    return after


def check_adapter(base: Path, adapter: Path, baked: dict[str, torch.Tensor]) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
    got = merged.state_dict()
    _expect(set(got) == set(baked), "adapter: the merged model has other tensors than the checkpoint")
    for name, w in baked.items():
        _expect(torch.equal(got[name], w), f"adapter: merged {name} differs from the checkpoint's")


def check_gguf_readback(ckpt: Path, qtype: str, baked: dict[str, torch.Tensor]) -> None:
    """transformers' GGUF reader gives back the checkpoint's tensors (for the architectures it reads; the others,
    Granite, OLMo 2, Gemma 3 text (transformers reads ``gemma3``, not ``gemma3_text``),
    Mixtral and OLMoE, are read by llama.cpp in tests/runs/test_families.py, and audited by verify).

    Not the Qwen MoEs: transformers' reader maps their ``expert_count`` but not ``expert_feed_forward_length``, so
    it rebuilds the config with its default expert width and cannot load any llama.cpp Qwen MoE GGUF (its
    converter writes the same keys); tests/weights/test_gguf_moe.py reads their stacked experts with gguf's reader.
    Not gpt-oss: transformers' reader takes each ``gpt-oss.rope.scaling.*`` key's first field part (the key's
    length, not its value) and fails converting it, so it loads no llama.cpp gpt-oss GGUF with YaRN (its converter
    writes the same keys); tests/weights/test_gguf_gpt_oss.py reads the split experts with gguf's reader.
    Not GPT-2: transformers' reader maps ``context_length`` to the legacy ``n_ctx``, not ``n_positions``, so it
    rebuilds 1024 learned positions and loads no GPT-2 GGUF of another length;
    tests/weights/test_gguf_gpt2.py reads the transposed weights with gguf's reader.
    """
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    model_type = json.loads((ckpt / "config.json").read_text())["model_type"]
    if model_type not in GGUF_CONFIG_MAPPING or model_type in ("qwen2_moe", "qwen3_moe", "gpt_oss", "gpt2"):
        return
    cfg = json.loads((ckpt / "config.json").read_text())
    got = _load(ckpt, gguf_file=gguf_filename(qtype))
    for name, w in baked.items():
        if name not in got:  # transformers' reader rebuilds rotary buffers from the config
            continue
        if tensor_shift(cfg, name):  # stored w + 1 (Gemma's norms), read back as (w + 1) - 1: one float32 rounding
            same = torch.allclose(got[name], w, rtol=0, atol=float(torch.finfo(torch.float32).eps) * 4)
        else:
            same = torch.equal(got[name], w)
        _expect(same, f"gguf: {name} read back differs from the checkpoint's")
    missing = [n for n in baked if n not in got and not n.endswith("inv_freq")]
    _expect(not missing, f"gguf: tensors missing when read back: {missing[:3]}")


def run_family(shape: FamilyShape, workdir: str | Path, *, gguf_type: str = "F32") -> FamilyResult:
    """Run and check every cell of ``shape``'s row (see the module docstring); raises on a failed check.

    Returns:
        The row: each cell :data:`WORKS` or ``"refused: <line>"`` (the line the plan gave and the run raised).
    """
    work = Path(workdir)
    base = save_family_base(work / "base", shape)
    model_type = json.loads((base / "config.json").read_text())["model_type"]
    planned = plan_recipe(family_recipe(base, adapter=True, gguf=gguf_type)).outputs  # config.json alone
    row = FamilyResult(shape, model_type, planned=dict(planned))
    for output in ("adapter", "gguf"):
        line = planned[output]
        if line is None:
            continue
        asked = family_recipe(base, adapter=output == "adapter", gguf=gguf_type if output == "gguf" else None)
        try:
            run_recipe(asked, work / f"refused-{output}", progress=False)
        except InputError as e:
            _expect(str(e) == line, f"{output}: the run refused with {e!s:.200} but the plan said {line:.200}")
        else:
            raise AssertionError(f"{output}: the plan refused it ({line:.200}) but the run wrote it")
        row.cells[output] = f"refused: {line}"
    adapter, qtype = planned["adapter"] is None, gguf_type if planned["gguf"] is None else None
    out = work / "run"
    result = run_recipe(family_recipe(base, adapter=adapter, gguf=qtype), out, progress=False)

    stats = ActivationStats.load(out / STATS_DIR / MATH_STATS_NAME)
    mask = Mask.load(out / MASK_NAME)
    _expect(set(stats.targets) == set(mask), "calibrate: the statistics and the mask cover other weights")
    _expect(all(int(stats.token_count[n].sum()) > 0 for n in stats.targets), "calibrate: a weight saw no token")
    row.cells["calibrate"] = WORKS
    _expect(mask.total()[0] > 0, "mask: nothing selected")
    row.cells["mask"] = WORKS
    baked = check_checkpoint(base, out / CHECKPOINT.folder, mask)
    row.cells["checkpoint"] = WORKS
    outputs = [out / CHECKPOINT.folder]
    if adapter:
        check_adapter(base, out / ADAPTER.folder, baked)
        row.cells["adapter"] = WORKS
        outputs.append(out / ADAPTER.folder)
    if qtype:
        check_gguf_readback(out / CHECKPOINT.folder, qtype, baked)
        row.cells["gguf"] = WORKS
    for folder in outputs:
        _expect(verify(folder, base, mask, SCALE).ok, f"verify: {folder.name} does not pass")
        _expect(not verify(folder, base, mask, 1.0).ok, f"verify: {folder.name} passes for the wrong scale")
    row.cells["verify"] = WORKS
    report = reproduce(out, out_dir=work / "reproduced", base=str(base), progress=False)  # local base: redacted
    _expect(report.ok, f"reproduce: {report.to_text()}")
    _expect(result.mask_sha256 == mask.sha256, "reproduce: the run's mask hash is not its file's")
    row.cells["reproduce"] = WORKS
    return row


_SPM_SPECIALS = {"llama": ("<unk>", "<s>", "</s>"), "gemma": ("<pad>", "<bos>", "<eos>", "<unk>")}


def _spm_corpus() -> list[str]:
    """The organism's math and general texts (vendored, seeded): what the test tokenizers are trained on."""
    from mathneuro_edit.organism import general_texts, math_texts

    return math_texts(300, seed=0) + general_texts(300, seed=0)


def sentencepiece_tokenizer(style: str = "llama", size: int = VOCAB) -> Any:
    """A SentencePiece-style BPE tokenizer trained on the organism's texts, laid out like the released ones.

    ``"llama"`` (Llama 2, Mistral v0.1, Phi-3): ``<unk> <s> </s>``, the 256 ``<0xXX>`` byte tokens, then the
    pieces; normalizer Prepend("▁") + Replace(" ", "▁"); ``<s>`` added in front. ``"gemma"``: ``<pad> <bos> <eos>
    <unk>``, normalizer Replace(" ", "▁") alone (no space prefix). Both: byte fallback, and every split of a piece
    into two pieces is a merge, ranked by the piece's id, as transformers' SentencePiece conversion writes them.
    Deterministic (one training thread's result, sorted ties): the same tokenizer.json each time.

    Args:
        style: ``"llama"`` or ``"gemma"``.
        size: the vocabulary size (at most the tiny model's :data:`~.family_shapes.VOCAB`).

    Returns:
        A ``tokenizers.Tokenizer``.

    Example:
        >>> sentencepiece_tokenizer().get_vocab_size()  # doctest: +SKIP
        703
    """
    import tokenizers as tk

    specials = _SPM_SPECIALS[style]
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = tk.trainers.BpeTrainer(vocab_size=size - len(bytes_), special_tokens=list(specials), show_progress=False)
    learner = tk.Tokenizer(tk.models.BPE(unk_token="<unk>"))
    # Why split on "▁" while training: SentencePiece's pieces never hold a space past their first character
    learner.pre_tokenizer = tk.pre_tokenizers.Metaspace(prepend_scheme="always" if style == "llama" else "never")
    learner.train_from_iterator(_spm_corpus(), trainer)
    learned = sorted(learner.get_vocab().items(), key=lambda kv: kv[1])
    pieces = list(specials) + bytes_ + [t for t, _ in learned if t not in specials]
    vocab = {t: i for i, t in enumerate(pieces)}
    merges = []
    for piece in pieces[len(specials) + 256 :]:  # every split into two pieces, by the piece's rank
        splits = [(piece[:i], piece[i:]) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        merges += sorted(splits, key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
    tok = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(list(specials))
    replace = tk.normalizers.Replace(" ", "\u2581")
    prefix = [tk.normalizers.Prepend("\u2581")] if style == "llama" else []  # Gemma: no space prefix
    tok.normalizer = tk.normalizers.Sequence(prefix + [replace])
    steps = [tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    tok.decoder = tk.decoders.Sequence(steps + ([tk.decoders.Strip(" ", 1, 0)] if style == "llama" else []))
    bos = specials[1]
    tok.post_processor = tk.processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
    )
    return tok


def save_sentencepiece_base(folder: str | Path, style: str = "llama") -> Path:
    """A tiny model with a SentencePiece-style tokenizer.json (:func:`sentencepiece_tokenizer`): the Llama 3.x
    shape for ``"llama"``, Gemma 2's for ``"gemma"``."""
    from transformers import PreTrainedTokenizerFast

    folder = save_family_base(folder, FAMILY_SHAPES[0] if style == "llama" else family_shape("Gemma 2"))
    specials = _SPM_SPECIALS[style]
    names = (
        dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), specials))
        if style == "gemma"
        else dict(zip(("unk_token", "bos_token", "eos_token"), specials))
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)  # the organism's, saved by save_family_base
    PreTrainedTokenizerFast(tokenizer_object=sentencepiece_tokenizer(style), **names).save_pretrained(folder)
    return folder


# the GGUF tokenizer table: style -> its row (what sentencepiece_tokenizer lays out, and the releases that do)
SPM_WORKS = {
    "llama": "SentencePiece BPE, space prefix (Llama 2, Mistral v0.1, Phi-3)",
    "gemma": "SentencePiece BPE, no space prefix (Gemma)",
}
SPM_REFUSED = {
    "first": "SentencePiece BPE, Metaspace prepend_scheme 'first' (transformers' non-legacy conversion)",
    "unigram": "SentencePiece Unigram (T5, ALBERT)",
}


def _spm_variant(folder: Path, kind: str) -> None:
    """Rewrite the Llama-style tokenizer.json of ``folder`` as a variant llama.cpp's SPM cannot reproduce."""
    path = folder / "tokenizer.json"
    tok = json.loads(path.read_text(encoding="utf-8"))
    if kind == "first":  # transformers' LlamaConverter with legacy=False: a Metaspace pre-tokenizer, no normalizer
        tok["normalizer"] = None
        tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    else:  # the same pieces as a Unigram model, scored by rank (SentencePiece's unigram layout)
        vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
        tok["model"] = {
            "type": "Unigram",
            "unk_id": 0,
            "byte_fallback": True,
            "vocab": [[t, 0.0 if i < 259 else -float(i)] for t, i in vocab],
        }
    path.write_text(json.dumps(tok, ensure_ascii=False, indent=2), encoding="utf-8")


def sentencepiece_checkpoint(workdir: str | Path, style: str) -> Path:
    """Where :func:`tokenizer_rows` leaves the baked checkpoint (and its ``model-F32.gguf``) of ``style``."""
    return Path(workdir) / f"spm-{style}-run" / CHECKPOINT.folder


def _check_spm_gguf(ckpt: Path) -> None:
    """The GGUF holds llama.cpp's SPM vocabulary of the checkpoint's tokenizer.json: every piece at its id."""
    import gguf

    r = gguf.GGUFReader(str(ckpt / gguf_filename("F32")))
    _expect(r.fields["tokenizer.ggml.model"].contents() == "llama", "gguf: not llama.cpp's SPM tokenizer model")
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    vocab = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    _expect(all(tokens[i] == t for t, i in vocab.items()), "gguf: a piece is not at its tokenizer.json id")


def tokenizer_rows(workdir: str | Path) -> dict[str, str]:
    """The GGUF tokenizer cells: ``{tokenizer kind: WORKS or "refused: <line>"}``.

    Each SentencePiece style of :data:`SPM_WORKS` is a whole run (GGUF F32) whose file holds llama.cpp's SPM
    vocabulary and passes verify (tests/runs/test_families.py has llama.cpp itself tokenize like transformers and
    match its logits on :func:`sentencepiece_checkpoint`); each of :data:`SPM_REFUSED` is the run's own refusal,
    raised before any forward pass.
    """
    work = Path(workdir)
    rows = {"byte-level BPE (Llama 3, Qwen2/3, SmolLM, GPT-2): the rows above": WORKS}
    for style, kind in SPM_WORKS.items():
        base = save_sentencepiece_base(work / f"spm-{style}-base", style)
        out = sentencepiece_checkpoint(work, style).parent
        run_recipe(family_recipe(base, adapter=False, gguf="F32"), out, progress=False)
        _check_spm_gguf(out / CHECKPOINT.folder)
        mask = Mask.load(out / MASK_NAME)
        _expect(verify(out / CHECKPOINT.folder, base, mask, SCALE).ok, f"verify: the {style} checkpoint does not pass")
        rows[kind] = WORKS
    for variant, kind in SPM_REFUSED.items():
        base = save_sentencepiece_base(work / f"spm-{variant}-base")
        _spm_variant(base, variant)
        try:
            run_recipe(family_recipe(base, adapter=False, gguf="F32"), work / f"spm-{variant}-run", progress=False)
        except InputError as e:
            rows[kind] = f"refused: {e}"
        else:
            raise AssertionError(f"gguf: the {variant} tokenizer was written, but llama.cpp tokenizes it otherwise")
    return rows


def _cell(text: str, notes: dict[str, int]) -> str:
    if text == WORKS:
        return "works (tested)"
    n = notes.setdefault(text, len(notes) + 1)
    return f"refused [{n}](#refusal-{n})"


def matrix_markdown(rows: list[FamilyResult], tokenizers: dict[str, str] | None = None) -> str:
    """docs/families.md: the matrix, the refusal lines, and what each tiny config keeps of the released one."""
    notes: dict[str, int] = {}
    lines = [
        "# Model families: what each output does on each family",
        "",
        "Generated by `python scripts/families.py` (`tests/_families.py`); do not edit by hand.",
        "`tests/runs/test_families.py` runs the same cells: every cell below is a passing test, or a refusal whose",
        "exact line the test checks (the plan gives it from `config.json` alone, and the run raises it before",
        "reading any weights).",
        "",
        "Each family is a tiny random model (hidden 64, 2-4 layers, 4 experts) built from its released config's",
        "shape: the same layer types, tying, fused projections, MoE layout and rope settings. A cell is",
        "`works (tested)` when the run wrote the output and it passed an independent check: plain transformers",
        "loads the checkpoint and every tensor is the base's with the mask applied; plain PEFT's merge of the",
        "adapter equals the checkpoint; the GGUF is read back to the checkpoint by transformers' GGUF reader (for",
        "the architectures it reads) and llama.cpp itself loads it, tokenizes like transformers, and its logits and",
        "greedy continuation match transformers' (`test_llama_cpp_runs_the_gguf_of_every_family_marked_works`);",
        "verify passes (and fails for a wrong scale); reproduce re-runs the lock bit for bit.",
        "",
        "| family | model_type | " + " | ".join(CELLS) + " |",
        "|---|---|" + "---|" * len(CELLS),
    ]
    for r in rows:
        cells = [_cell(r.cells[c], notes) for c in CELLS]
        lines.append(f"| {r.shape.name} | `{r.model_type}` | " + " | ".join(cells) + " |")
    if tokenizers:
        lines += [
            "",
            "GGUF tokenizers (the vocabulary written with the GGUF; `tokenizer.json` decides). The",
            "SentencePiece rows are a BPE with byte fallback trained on the organism's texts, laid out like",
            "Llama 2's and Gemma's tokenizer.json; llama.cpp itself tokenizes, detokenizes and runs their",
            "GGUF like transformers (`tests/weights/test_gguf_vocab.py`, `tests/runs/test_families.py`):",
            "",
            "| tokenizer | gguf |",
            "|---|---|",
        ]
        lines += [f"| {k} | {_cell(v, notes)} |" for k, v in tokenizers.items()]
    lines += ["", "## Refusals", ""]
    for text, n in notes.items():
        lines += [f'<a id="refusal-{n}"></a>{n}. {text.removeprefix("refused: ")}', ""]
    lines += ["## The tiny configs", "", "| family | follows | kept |", "|---|---|---|"]
    lines += [f"| {r.shape.name} | `{r.shape.released}` | {r.shape.kept} |" for r in rows]
    return "\n".join(lines) + "\n"


def run_all(workdir: str | Path) -> tuple[list[FamilyResult], dict[str, str]]:
    """:func:`run_family` for every family, in :data:`FAMILY_SHAPES` order, and :func:`tokenizer_rows`."""
    rows = [run_family(s, Path(workdir) / f"f{i:02d}") for i, s in enumerate(FAMILY_SHAPES)]
    return rows, tokenizer_rows(workdir)
