"""Model layer: local HF checkpoints, packed ragged forward over a paged KV cache,
sampling, stopping and the torch executor (spec 0x04, 0x09). Only this layer
imports torch (an import-linter contract); this package file imports nothing,
so torch-free users (`tokenizer`, `stopping` with FakeTokenizer) stay fast to
import. Sampling parameters live in `records/sampling_params.py`.

Modules and their one job:
    make_model   write a random-weight Llama checkpoint + local tokenizer (presets)
    loader       load_model(dir, dtype, device, attention_backend) -> PackedCausalLM (safetensors only)
    hf_config    head_dim / RoPE through transformers, only where it can change them
    packing      SegmentSpec, PackedBatch, pack(segments, block_size)
    kv_cache     PagedKVCache: per-layer K/V pools [num_blocks, block_size, kv, d]
    llama        PackedCausalLM.forward(batch, cache) -> logits at sample rows
    attention    request-local paged attention (0x04 visibility predicate)
    kernels      the in-place paged decode kernel (csrc/): built once into the user's cache
    projection   the projection matmuls; bf16 weights prepacked for oneDNN where it pays
    executor     TorchExecutor: runs a validated plan's intervals on the model
    runtime      torch version, threads, dtypes, CUDA availability
    sampling     sample(logits, rows) with per-request seeded generators
    stopping     token_stop_reason, IncrementalDetokenizer (stop strings)
    tokenizer    TextTokenizer protocol, HFTokenizer/load_tokenizer, FakeTokenizer

Typical use by an executor::

    model = load_model(model_dir, dtype=torch.float32, device="cpu")
    cache = model.allocate_cache(num_blocks=1024, block_size=16)
    batch = pack([SegmentSpec(token_ids, start, block_ids, sample=True)], cache.block_size)
    logits = model.forward(batch, cache)   # [num sampled segments, vocab], float32
    tokens = sample(logits, [SampleRow(params, seed, output_index)])
"""
