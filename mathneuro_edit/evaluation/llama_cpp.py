"""The run's math evaluation on its GGUF files, in llama.cpp: each file against the base written the same way (the
same float GGUF, the same quantizer), on the run's own evaluation problems, paired (``evaluation.llama_cpp``).

Why a file's own numbers: a GGUF user runs llama.cpp on a quantized file, not the checkpoint in transformers, and
rounding to 4 bits can undo most of an edit that moves 0.04% of the weights by 5% (``gguf_survival.json`` counts
what survived). A figure belongs to what produced it, so the GGUF card shows these, never the checkpoint's.

The prompts are the token ids the checkpoint's evaluation feeds transformers (:func:`~.prompts.encode_prompts`: the
GGUF's vocabulary is the checkpoint tokenizer's, id for id), generation is greedy and stops where transformers'
stops (an end-of-sequence id, the answer complete, ``max_new_tokens``), and the completion is decoded by the same
tokenizer and read by the same rule (:class:`~.results.MathPrediction`). So a float GGUF and the checkpoint differ
only by the two engines' arithmetic. llama-cpp-python is optional (``pip install llama-cpp-python``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .prompts import completion_done, encode_prompts, extract_prediction, uses_chat_template
from .results import MathPrediction, extract_answer, truncate_completion
from .significance import discordant_pairs, mcnemar_exact, wilson_interval
from .tasks import MathTask

__all__ = [
    "GGUF_EVAL_NAME",
    "pair_row",
    "llama_cpp_version",
    "llama_cpp_completions",
    "evaluate_gguf_pairs",
    "gguf_eval_line",
]

GGUF_EVAL_NAME = "gguf_eval.json"  # beside the GGUF files: each file's evaluation in llama.cpp, as the run measured it


def pair_row(qtype: str, base: Sequence[bool], edited: Sequence[bool]) -> dict[str, Any]:
    """One file's paired result: both accuracies with their 95% Wilson intervals, the change in points, the
    discordant counts and the two-sided exact McNemar p-value, raw: no verdict, since whether a file's change is
    significant depends on how many files the run tested (the card's Holm adjustment,
    :func:`~mathneuro_edit.outputs.gguf.file_verdicts`).

    Example:
        >>> r = pair_row("Q8_0", [True, False, False, False], [True, True, True, False])
        >>> r["base"]["correct"], r["edited"]["correct"], r["difference_pp"], r["discordant"], r["mcnemar_p"]
        (1, 3, 50.0, {'base_only': 0, 'edited_only': 2}, 0.5)
    """
    if len(base) != len(edited) or not base:
        raise ValueError(f"pair_row: need two equally long, non-empty outcome lists, got {len(base)} and {len(edited)}")
    n, kb, ke = len(base), sum(map(bool, base)), sum(map(bool, edited))
    b, c = discordant_pairs(list(base), list(edited))
    p = mcnemar_exact(b, c)
    return {
        "type": qtype,
        "n": n,
        "base": {"correct": kb, "accuracy": kb / n, "wilson95": list(wilson_interval(kb, n))},
        "edited": {"correct": ke, "accuracy": ke / n, "wilson95": list(wilson_interval(ke, n))},
        "difference_pp": 100 * (ke - kb) / n,
        "discordant": {"base_only": b, "edited_only": c},
        "mcnemar_p": p,
    }


def llama_cpp_version() -> str:
    """``llama-cpp-python X.Y.Z``, the engine the figures come from (raises ImportError without it)."""
    import llama_cpp

    return f"llama-cpp-python {llama_cpp.__version__}"


def llama_cpp_completions(
    path: str | Path,
    rows: Sequence[Sequence[int]],
    decode: Callable[[list[int]], str],
    prefills: Sequence[str | None],
    eos_ids: Sequence[int],
    max_new_tokens: int,
    threads: int = 1,
) -> list[str]:
    """Greedy completions of the GGUF file ``path`` in llama.cpp, one per prompt of token ids: stopped at an
    end-of-sequence id, once :func:`~.prompts.completion_done` says the answer is complete, or at
    ``max_new_tokens`` (transformers' stopping rules in the evaluation), decoded by ``decode``."""
    import llama_cpp

    n_ctx = max(len(r) for r in rows) + max_new_tokens + 1
    # seed and one sequence: greedy decoding draws nothing, so the completions depend only on the file and the ids
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False, seed=0)
    eos, out = set(eos_ids), []
    try:
        for ids, prefill in zip(rows, prefills):
            got: list[int] = []
            for tok in llm.generate(list(ids), temp=0.0, top_k=1, reset=True):
                if int(tok) in eos:
                    break
                got.append(int(tok))
                if len(got) >= max_new_tokens or completion_done(decode(got), prefill):
                    break
            out.append(decode(got))
    finally:
        llm.close()
    return out


def evaluate_gguf_pairs(
    pairs: Mapping[str, tuple[str, Path, Path]],
    tokenizer: Any,
    task: MathTask,
    eos_ids: Sequence[int],
    *,
    threads: int = 1,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Each file of ``pairs`` (``{file name: (type, base file, edited file)}``) against its base file, on
    ``task``'s problems with ``task``'s prompts (:func:`llama_cpp_completions`), read by the evaluation's rule.

    Returns:
        ``{"engine", "task_sha256", "n", "prompt", "files": {file name: pair_row + "answers"}}``: what
        ``gguf_eval.json`` holds; ``note`` receives one line per file.
    """
    chat = uses_chat_template(tokenizer, task.chat_template)
    rows = encode_prompts(tokenizer, task.problems, task.shots[: task.n_shot], chat, task.prompt_style)
    prefills = [p.get("prefill") for p in task.problems]
    gold = [int(extract_answer(p["answer"])) for p in task.problems]

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def outcomes(path: Path) -> tuple[list[bool], list[str]]:
        said = llama_cpp_completions(path, rows, decode, prefills, eos_ids, task.max_new_tokens, threads)
        texts = [truncate_completion(s)[0] for s in said]  # the evaluation's own reading (runner._run_math)
        right = [
            MathPrediction(p["question"], g, t, extract_prediction(t, f), f).correct
            for p, g, t, f in zip(task.problems, gold, texts, prefills)
        ]
        return right, texts

    found: dict[str, Any] = {
        "engine": llama_cpp_version(),
        "task_sha256": task.sha256,
        "n": len(task.problems),
        "prompt": {
            "chat_template": chat,
            "n_shot": task.n_shot,
            "prompt_style": task.prompt_style,
            "max_new_tokens": task.max_new_tokens,
        },
        "files": {},
    }
    for name, (qtype, base_file, edited_file) in pairs.items():
        base, base_text = outcomes(base_file)
        edited, edited_text = outcomes(edited_file)
        row = pair_row(qtype, base, edited)
        found["files"][name] = {**row, "answers": {"base": base_text, "edited": edited_text}}
        if note is not None:
            note(f"{name}: {gguf_eval_line(row)}")
    return found


def gguf_eval_line(row: Mapping[str, Any]) -> str:
    """One file's result in words, with its own (raw) p-value: the card's verdict adjusts it over the run's files.

    Example:
        >>> gguf_eval_line(pair_row("Q4_0", [True, False], [True, True]))
        'llama.cpp, base in Q4_0 50.0% -> edited 100.0% (+50.0 pp, McNemar p = 1 before Holm over the files, n = 2)'
    """
    return (
        f"llama.cpp, base in {row['type']} {row['base']['accuracy']:.1%} -> edited {row['edited']['accuracy']:.1%} "
        f"({row['difference_pp']:+.1f} pp, McNemar p = {row['mcnemar_p']:.2g} before Holm over the files, "
        f"n = {row['n']})"
    )
