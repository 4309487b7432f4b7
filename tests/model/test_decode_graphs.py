"""Decode graphs: the shape buckets, the padding of a decode step to a
bucket (run eagerly on the CPU: the same inputs a CUDA graph replays) and
the fallbacks; capture itself needs a GPU (scripts/device_check.py)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from iterserve.model.decode_graphs import (
    BATCH_ROW_BUCKETS,
    MAX_BLOCKS_PER_ROW,
    DecodeGraphs,
    GraphShape,
    graph_shape,
    is_decode_only,
    padded_arrays,
    static_forward,
)
from iterserve.model.packing import SegmentSpec, host_arrays, pack
from iterserve.model.staging import HostStaging, pack_batched


@pytest.fixture(autouse=True)
def _quiet_eager_flex():
    with warnings.catch_warnings():  # flex_attention warns that it runs uncompiled on CPU
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize(("num_rows", "max_blocks", "expected"), [
    (1, 1, GraphShape(1, 8)),
    (3, 8, GraphShape(4, 8)),
    (3, 9, GraphShape(4, 16)),
    (17, 100, GraphShape(32, 128)),
    (256, 512, GraphShape(256, 512)),
])
def test_a_step_runs_at_the_smallest_bucket_holding_it(num_rows, max_blocks, expected) -> None:
    assert graph_shape(num_rows, max_blocks) == expected


def test_steps_outside_every_bucket_have_no_graph() -> None:
    assert graph_shape(BATCH_ROW_BUCKETS[-1] + 1, 4) is None
    assert graph_shape(4, MAX_BLOCKS_PER_ROW + 1) is None
    assert graph_shape(0, 1) is None
    assert graph_shape(40, 4, max_batch_rows=32) is None


def test_every_step_size_up_to_the_largest_bucket_has_one() -> None:
    for num_rows in range(1, BATCH_ROW_BUCKETS[-1] + 1):
        shape = graph_shape(num_rows, 3)
        assert shape is not None and shape.num_rows >= num_rows
        smaller = [b for b in BATCH_ROW_BUCKETS if b < shape.num_rows]
        assert not smaller or smaller[-1] < num_rows


def test_only_all_sampling_decode_steps_are_graphed() -> None:
    decode = [SegmentSpec([1], 5, (0, 1), True), SegmentSpec([2], 3, (2,), True)]
    assert is_decode_only(host_arrays(decode, 4))
    assert not is_decode_only(host_arrays([*decode, SegmentSpec([1, 2], 0, (3,), True)], 4))
    assert not is_decode_only(host_arrays([*decode, SegmentSpec([1], 0, (3,), False)], 4))


def test_padding_rows_write_the_scratch_block_and_see_nothing() -> None:
    host = host_arrays([SegmentSpec([7], 5, (3, 1), True), SegmentSpec([9], 2, (2,), True)], 4)
    shape = GraphShape(4, 8)
    (tokens, positions, slots, segments, flex_positions, tables, entries, logical, listed,
     indices) = padded_arrays(host, shape, scratch_block=10, num_pool_blocks=11)
    assert tokens.tolist() == [7, 9, 0, 0] and positions.tolist() == [5, 2, 0, 0]
    assert slots.tolist() == [1 * 4 + 1, 2 * 4 + 2, 40, 40]
    assert flex_positions.tolist()[:4] == [5, 2, -1, -1] and (flex_positions[4:] == -1).all()
    assert tables.shape == (4, 8) and tables[0, :2].tolist() == [3, 1] and (tables[2:] == -1).all()
    assert sorted(entries[:3].tolist()) == [1, 2, 3] and (entries[3:] == 11).all()
    assert listed.tolist() == [3] and indices.shape == (1, 32)
    assert sorted(indices[0, :3].tolist()) == [1, 2, 3]


def test_capture_needs_a_cuda_device(tiny_model) -> None:
    cache = tiny_model.allocate_cache(8, 4)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        DecodeGraphs(lambda inputs, shape: torch.zeros(1), cache, 7, HostStaging("cpu"), 10,
                     capture=True)


@pytest.fixture(scope="module")
def flex_tiny(tiny_dir):
    from iterserve.model.loader import load_model

    return load_model(tiny_dir, attention_backend="flex"), load_model(tiny_dir,
                                                                      attention_backend="torch")


@pytest.mark.slow
def test_padded_decode_steps_match_the_per_request_path(flex_tiny) -> None:
    """Prefill eagerly, then decode through DecodeGraphs (padded to buckets,
    run eagerly here): logits equal the reference path's, and the scratch
    block takes the padding rows' K/V without touching any request's."""
    batched, reference = flex_tiny
    rng, block_size, num_blocks = random.Random(5), 4, 64
    cache = batched.allocate_cache(num_blocks + 1, block_size)
    reference_cache = reference.allocate_cache(num_blocks, block_size)
    staging = HostStaging("cpu")
    graphs = DecodeGraphs(static_forward(batched, cache), cache, num_blocks, staging,
                          batched.config.vocab_size)
    vocab = batched.config.vocab_size
    prompts = {f"r{i}": [rng.randrange(vocab) for _ in range(rng.randint(2, 20))]
               for i in range(5)}
    tables = {name: tuple(range(i * 12, (i + 1) * 12)) for i, name in enumerate(prompts)}
    specs = [SegmentSpec(p, 0, tables[n], True) for n, p in prompts.items()]
    assert graphs.run(host_arrays(specs, block_size)) is None  # prefill: no graph
    last = batched.forward(pack_batched(specs, block_size, num_blocks + 1, staging), cache)
    reference.forward(pack(specs, block_size), reference_cache)
    lengths = {n: len(p) for n, p in prompts.items()}
    for step in range(6):
        live = list(prompts)[: 5 - step % 3]  # 5, 4, 3 rows: buckets 8 and 4
        next_ids = last.argmax(dim=-1).tolist()
        specs = [SegmentSpec([next_ids[i] if i < len(next_ids) else 1], lengths[n], tables[n],
                             True) for i, n in enumerate(live)]
        got = graphs.run(host_arrays(specs, block_size))
        expected = reference.forward(pack(specs, block_size), reference_cache)
        assert got is not None
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        for n in live:
            lengths[n] += 1
        last = got
    assert graphs.shapes == (GraphShape(4, 16), GraphShape(8, 16))  # 12-block tables
    assert graphs.num_replays == 6
    used = np.arange(num_blocks)
    torch.testing.assert_close(cache.key_pools[0][used], reference_cache.key_pools[0][used],
                               rtol=0, atol=1e-5)


@pytest.mark.slow
def test_executor_with_decode_graphs_gives_the_reference_tokens(tiny_dir) -> None:
    from iterserve.llm import LLM
    from iterserve.model.executor import TorchExecutor
    from iterserve.model.loader import load_model
    from iterserve.records.sampling_params import SamplingParams

    prompts = [[5, 9, 13, 2] * 5, [7, 3], [11] * 23]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    llm = LLM(tiny_dir, num_kv_blocks=64, block_size=4, attention_backend="torch")
    try:
        expected = [o.token_ids for o in llm.generate(prompts, params)]
        model = load_model(tiny_dir, attention_backend="flex")
        executor = TorchExecutor(model, 64, 4, llm.tokenizer, decode_graphs=True)
        assert executor.cache.num_blocks == 65 and executor.kv.facts().num_blocks_total == 64
    finally:
        llm.close()
    got = run_offline(executor, prompts, params)
    assert got == expected
    assert executor.decode_graphs is not None and executor.decode_graphs.num_replays > 0


def run_offline(executor, prompts, params):
    from iterserve.engine.loop import Engine
    from iterserve.policies.registry import make_policy
    from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec

    specs = []
    for i, prompt in enumerate(prompts):
        executor.add_request(f"r{i}", prompt, params, seed=i)
        specs.append(RequestSpec(f"r{i}", 0.0, len(prompt), params.max_tokens,
                                 prompt_token_ids=tuple(prompt)))
    workload = OnlineWorkload("graphs", "ms", Capacity(64, 8), tuple(specs), kv=KvSpec(64, 4))
    Engine(workload, make_policy("vllm"), executor).run()
    return [tuple(executor.streams[s.request_id].output_token_ids) for s in specs]


@pytest.mark.slow
def test_a_capture_on_idle_inputs_writes_the_scratch_block_only(flex_tiny) -> None:
    """What a graph's warm-up and capture run: every row padding."""
    from iterserve.model.decode_graphs import idle_arrays

    batched, _ = flex_tiny
    cache = batched.allocate_cache(9, 4)
    for pool in (*cache.key_pools, *cache.value_pools):
        pool.fill_(0.5)
    shape = GraphShape(4, 8)
    inputs = [torch.from_numpy(a) for a in idle_arrays(shape, 8 * 4, 9)]
    logits = static_forward(batched, cache)(inputs, shape)
    assert logits.shape[0] == 4
    for pool in (*cache.key_pools, *cache.value_pools):
        assert (pool[:8] == 0.5).all()
        assert not (pool[8, 0] == 0.5).all()


def test_a_failed_capture_leaves_decode_steps_eager(tiny_model, monkeypatch) -> None:
    cache = tiny_model.allocate_cache(9, 4)
    graphs = DecodeGraphs(lambda inputs, shape: torch.zeros(shape.num_rows, 3), cache, 8,
                          HostStaging("cpu"), 100, capture=False)
    graphs.capture = True  # as on CUDA, with a recording that fails

    def failing_record(captured, shape):
        raise RuntimeError("capture not supported")

    monkeypatch.setattr(graphs, "_record", failing_record)
    host = host_arrays([SegmentSpec([7], 5, (3, 1), True)], 4)
    assert graphs.run(host) is None and graphs.run(host) is None
    assert graphs.failure == "RuntimeError: capture not supported"
    assert graphs.num_eager_fallbacks == 2 and graphs.shapes == ()
