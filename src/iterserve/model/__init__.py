"""Model layer: local HF checkpoints, packed ragged forward over a paged KV cache,
sampling and stopping (spec 0x04, 0x09). Only this layer and the engine's
executor import torch."""
