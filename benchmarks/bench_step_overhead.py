"""Where one engine step's time goes outside the model forward (issue 12).

Runs an offline ``LLM.generate`` workload shaped like bench_vs_vllm's (the
`small` preset, bf16, prompts 32..256, outputs 16..256, token budget 512,
greedy, ignore_eos, every request at t = 0) and attributes each step of the
engine thread to phases by wrapping the functions that do each job:

    schedule     policy.choose (+ arrivals, readiness, prefix facts)
    validate     validate_state, validate_plan, validate_result
    execute-other  the executor's own work: memory intents, backing
                 intervals with blocks, block tables, building the result
    pack         building the packed batch tensors from the segments
    attn-meta    AttentionMetadata.build + rotary tables (inside the forward)
    forward      the rest of model.forward
    sample       logits -> tokens and logprobs
    publish      stops, detokenizing, the result builder, releasing blocks
    advance      the pure transition to the successor state
    observers    every EngineObserver.on_step (events, decision log, streams)
    step-other   what remains of Engine.step
    gc           Python's cyclic garbage collector, wherever in the step it ran
    gap          engine thread time between two steps (the online loop)

CPU time is `time.thread_time` of the engine thread: other processes on a
shared machine do not inflate it by preempting us. The forward's intra-op
work on torch's other threads is not in it; `forward (process)` adds it back
as the process CPU time spent in the forward, and `wall` is the step's wall
time (meaningful only on an idle machine). Steps are classed as `decode`
(every segment one row) or `mixed` (at least one prefill chunk); the table
shows the mean per step of each class, in ms, and each phase's share.

    .venv/bin/python benchmarks/bench_step_overhead.py /work/scratch/models/small
    .venv/bin/python benchmarks/bench_step_overhead.py MODEL --num-requests 32 --threads 1
    .venv/bin/python benchmarks/bench_step_overhead.py MODEL --profile 20   # + torch.profiler
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PHASES = ("schedule", "validate", "execute-other", "pack", "attn-meta", "forward", "sample",
          "publish", "advance", "observers", "step-other", "gc", "gap")
FIRST_PLAIN_TOKEN = 4


class PhaseClock:
    """Nested phase timers on one thread: a phase's time excludes its
    children's, so the phases of a step sum to the step."""

    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.forward_process_s = 0.0
        self._stack: list[list[Any]] = []  # [name, cpu at entry, child cpu]

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._enter(name)
        try:
            yield
        finally:
            self._leave()

    def _enter(self, name: str) -> None:
        self._stack.append([name, time.thread_time(), 0.0])

    def _leave(self) -> None:
        name, began, child_s = self._stack.pop()
        spent = time.thread_time() - began
        self.cpu_s[name] += spent - child_s
        if self._stack:
            self._stack[-1][2] += spent

    def watch_gc(self, thread_id: int) -> None:
        """Time collections on ``thread_id`` as their own phase."""
        def callback(event: str, info: dict[str, int]) -> None:
            if threading.get_ident() != thread_id:
                return
            if event == "start":
                self._enter("gc")
            else:
                self._leave()
        gc.callbacks.append(callback)

    def take(self) -> dict[str, float]:
        taken, self.cpu_s = dict(self.cpu_s), defaultdict(float)
        taken["forward (process)"], self.forward_process_s = self.forward_process_s, 0.0
        return taken


def timed(clock: PhaseClock, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with clock.phase(name):
            return fn(*args, **kwargs)
    return wrapper


class _TimedChecker:
    """The engine's incremental state check (format 4), timed as `validate`."""

    def __init__(self, clock: PhaseClock, checker: Any) -> None:
        self.check = timed(clock, "validate", checker.check)


def instrument(llm: Any, clock: PhaseClock,
               profile: ForwardProfile | None = None) -> list[dict[str, Any]]:
    """Wrap the engine's phases; returns the list each step's record goes to.
    With ``profile``, every forward also runs under torch.profiler."""
    import iterserve.engine.loop as loop
    import iterserve.model.attention as attention
    import iterserve.model.executor as executor_module
    import iterserve.model.llama as llama

    engine = llm.engine.engine
    executor = llm.executor
    for name in ("validate_plan", "validate_result"):
        setattr(loop, name, timed(clock, "validate", getattr(loop, name)))
    engine._state_check = _TimedChecker(clock, engine._state_check)  # validate_state
    loop.advance = timed(clock, "advance", loop.advance)
    engine.policy.choose = timed(clock, "schedule", engine.policy.choose)
    executor_module.pack = timed(clock, "pack", executor_module.pack)
    for name in ("sample", "sample_ids", "sample_batch"):  # whichever the executor calls
        if hasattr(executor_module, name):
            setattr(executor_module, name, timed(clock, "sample", getattr(executor_module, name)))
    llama.rotary_tables = timed(clock, "attn-meta", llama.rotary_tables)
    build = attention.AttentionMetadata.build.__func__  # type: ignore[attr-defined]
    attention.AttentionMetadata.build = classmethod(  # type: ignore[method-assign]
        timed(clock, "attn-meta", build))
    forward = executor.model.forward

    def forward_timed(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        with clock.phase("forward"):
            out = forward(*args, **kwargs)
        clock.forward_process_s += time.process_time() - began
        return out

    executor.model.forward = forward_timed if profile is None else profile.wrap(forward_timed)
    executor._publish = timed(clock, "publish", executor._publish)
    executor.execute = timed(clock, "execute-other", executor.execute)
    for observer in engine.observers:
        observer.on_step = timed(clock, "observers", observer.on_step)
    return _wrap_step(engine, clock)


class ForwardProfile:
    """torch.profiler around each forward, on the thread that runs it (the
    engine thread: a profiler started on the caller's thread sees none of its
    ops), self CPU summed per op over the forwards of each step class."""

    def __init__(self) -> None:
        self.self_us: dict[str, Counter[str]] = {"decode": Counter(), "mixed": Counter()}
        self.calls: dict[str, Counter[str]] = {"decode": Counter(), "mixed": Counter()}
        self.forwards: Counter[str] = Counter()

    def wrap(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        from torch.profiler import ProfilerActivity, profile

        def profiled(batch: Any, *args: Any, **kwargs: Any) -> Any:
            kind = "decode" if len(batch.token_ids) == len(batch.sample_rows) else "mixed"
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                out = forward(batch, *args, **kwargs)
            self.forwards[kind] += 1
            for event in prof.key_averages():
                self.self_us[kind][event.key] += event.self_cpu_time_total
                self.calls[kind][event.key] += event.count
            return out
        return profiled

    def print_top(self, num_rows: int) -> None:
        for kind, totals in self.self_us.items():
            forwards = max(self.forwards[kind], 1)
            print(f"torch.profiler, {kind} forwards ({self.forwards[kind]}): self CPU per forward")
            for name, micros in totals.most_common(num_rows):
                print(f"  {micros / forwards / 1000:8.3f} ms  {self.calls[kind][name] / forwards:6.1f}"
                      f" calls  {name}")


def _wrap_step(engine: Any, clock: PhaseClock) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    step = engine.step
    last_end: list[float] = []  # thread_time of the engine thread, set on it

    def step_timed() -> bool:
        if not last_end:
            clock.watch_gc(threading.get_ident())
        if last_end:
            clock.cpu_s["gap"] += time.thread_time() - last_end[0]
        began_wall = time.perf_counter()
        iterations = engine.num_iterations
        with clock.phase("step-other"):
            out = step()
        last_end[:] = [time.thread_time()]
        if engine.num_iterations > iterations:
            records.append({"wall": time.perf_counter() - began_wall,
                            **clock.take()})
        return out

    engine.step = step_timed
    return records


def classify(records: list[dict[str, Any]], plans: list[tuple[int, int]]) -> dict[str, list]:
    classes: dict[str, list] = {"decode": [], "mixed": []}
    for record, (num_rows, num_segments) in zip(records, plans, strict=False):
        record["rows"] = num_rows
        classes["decode" if num_rows == num_segments else "mixed"].append(record)
    return classes


def record_plans(engine: Any) -> list[tuple[int, int]]:
    """(rows, segments) of each non-empty plan, in order."""
    plans: list[tuple[int, int]] = []
    choose = engine.policy.choose

    def choose_recorded(state: Any) -> Any:
        plan = choose(state)
        if plan.work:
            plans.append((sum(w.end - w.start for w in plan.work), len(plan.work)))
        return plan

    engine.policy.choose = choose_recorded
    return plans


def print_table(classes: dict[str, list]) -> None:
    names = [*PHASES, "forward (process)"]
    print(f"{'phase':<18}" + "".join(f"{c + ' ms':>12}{'share':>8}" for c in classes))
    means = {c: {n: 1000 * sum(r.get(n, 0.0) for r in rs) / max(len(rs), 1) for n in names}
             for c, rs in classes.items()}
    totals = {c: sum(means[c][n] for n in PHASES) for c in classes}
    for name in names:
        cells = "".join(f"{means[c][name]:>12.3f}{100 * means[c][name] / max(totals[c], 1e-9):>7.1f}%"
                        for c in classes)
        print(f"{name:<18}{cells}")
    print(f"{'total (thread)':<18}" + "".join(f"{totals[c]:>12.3f}{'':>8}" for c in classes))
    host = {c: totals[c] - means[c]["forward"] for c in classes}
    print(f"{'outside forward':<18}" + "".join(
        f"{host[c]:>12.3f}{100 * host[c] / max(totals[c], 1e-9):>7.1f}%" for c in classes))
    walls = {c: 1000 * sum(r["wall"] for r in rs) / max(len(rs), 1) for c, rs in classes.items()}
    print(f"{'wall (idle only)':<18}" + "".join(f"{walls[c]:>12.3f}{'':>8}" for c in classes))
    print(f"{'steps':<18}" + "".join(f"{len(rs):>12}{'':>8}" for rs in classes.values()))
    rows = {c: sum(r["rows"] for r in rs) / max(len(rs), 1) for c, rs in classes.items()}
    print(f"{'rows / step':<18}" + "".join(f"{rows[c]:>12.1f}{'':>8}" for c in classes))


def make_prompts(num_requests: int, vocab_size: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(FIRST_PLAIN_TOKEN, vocab_size) for _ in range(rng.randint(32, 256))],
             rng.randint(16, 256)) for _ in range(num_requests)]


def run(args: argparse.Namespace) -> None:
    import torch

    from iterserve.llm import LLM, SamplingParams

    torch.set_num_threads(args.threads)
    # the pool committed, as bench_vs_vllm's (sized there) and a server's are: a lazy one
    # puts its first-touch page faults into the steps' write_kv
    llm = LLM(args.model, dtype=args.dtype, policy=args.policy, max_num_batched_tokens=args.max_num_batched_tokens,
              max_num_seqs=64, enable_prefix_caching=False, commit_kv=True)
    requests = make_prompts(args.num_requests, llm.executor.model.config.vocab_size, args.seed)
    llm.generate([p for p, _ in requests[:2]], SamplingParams(max_tokens=4, temperature=0.0,
                                                              ignore_eos=True))
    clock = PhaseClock()
    plans = record_plans(llm.engine.engine)
    profile = ForwardProfile() if args.profile else None
    records = instrument(llm, clock, profile)
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for _, m in requests]
    began, began_cpu = time.perf_counter(), time.process_time()
    outputs = llm.generate([p for p, _ in requests], params)
    elapsed_s, process_s = time.perf_counter() - began, time.process_time() - began_cpu
    llm.close()
    num_tokens = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} requests, {num_tokens} output tokens, {len(records)} steps, "
          f"{elapsed_s:.2f} s wall ({num_tokens / elapsed_s:.0f} tok/s; idle machine only), "
          f"torch threads {args.threads}")
    print_table(classify(records, plans))
    engine_s = sum(sum(r.get(n, 0.0) for n in PHASES) for r in records)
    helpers_s = sum(r["forward (process)"] - r["forward"] for r in records)
    print(f"process CPU {process_s:.2f} s = engine thread {engine_s:.2f} s + torch helper "
          f"threads in the forward {helpers_s:.2f} s + everything else (the caller's stream "
          f"reading, other threads) {process_s - engine_s - helpers_s:.2f} s")
    if profile is not None:
        print("(each forward ran under torch.profiler: the phase times above include its cost)")
        profile.print_top(args.profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", default="vllm")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--profile", type=int, default=0, metavar="ROWS",
                        help="also run torch.profiler around every forward (on the engine "
                             "thread) and print its top ROWS ops by self CPU, per step class")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
