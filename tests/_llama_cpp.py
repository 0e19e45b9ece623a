"""llama.cpp against transformers on the same prompt: the measure the GGUF tests hold every written family to."""

from __future__ import annotations

import numpy as np
import torch


def logit_gap(llm, model, ids: list[int]) -> float:
    """Largest |llama.cpp logit - transformers logit| over the prompt's positions, relative to the largest
    transformers logit (at least 1): the families test asks < 1e-3; a refused config shows it would exceed it."""
    llm.reset()
    llm.eval(ids)
    cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0]
    return float((cpp - hf).abs().max()) / max(1.0, float(hf.abs().max()))
