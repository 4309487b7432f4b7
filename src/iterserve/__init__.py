"""iterserve: a continuous-batching LLM serving engine whose scheduler is a
first-class, validated, replayable object (see shared/DESIGN.md)."""

__version__ = "0.1.0"

_LAZY = {"LLM": "iterserve.llm", "SamplingParams": "iterserve.records.sampling_params",
         "RequestOutput": "iterserve.llm", "CompletionOutput": "iterserve.llm"}
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "__version__"]


def __getattr__(name: str) -> object:
    """``from iterserve import LLM, SamplingParams`` without importing torch
    for the rest of the package (the scheduler path stays torch-free)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'iterserve' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
