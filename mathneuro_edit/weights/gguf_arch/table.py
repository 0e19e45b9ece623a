"""The families the GGUF export does not write: those it does not write yet (:data:`GGUF_PENDING`) and those
llama.cpp cannot run (:data:`NO_LLAMA_CPP`). The written ones are registered by their modules (:mod:`.family`).
"""

from __future__ import annotations

__all__ = ["GGUF_PENDING", "NO_LLAMA_CPP"]


# model_type -> what llama.cpp's converter does for it that this writer does not (yet, verified) do
GGUF_PENDING: dict[str, str] = {}  # empty: every family of docs/families.md that llama.cpp runs is written

# model_type -> why no GGUF can be run: llama.cpp has no architecture for the family (gguf-py's MODEL_ARCH and its
# converter know none), so there is nothing to write it for
NO_LLAMA_CPP: dict[str, str] = {
    "jetmoe": "llama.cpp has no JetMoE architecture (neither its mixture of attention heads nor its ParallelExperts "
    "MLP), so no llama.cpp build can run it",
}
