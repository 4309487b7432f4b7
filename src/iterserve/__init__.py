"""iterserve: a continuous-batching LLM serving engine whose scheduler is a
first-class, validated, replayable object (see shared/DESIGN.md)."""

__version__ = "0.1.0"
