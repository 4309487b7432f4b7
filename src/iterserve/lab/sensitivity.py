"""One-control sensitivity on the 0x0E base fixture (F68-F72, F61).

The base fixture (0x0E): prompt S=16, chunk C=4, D=4 ready decodes,
B_tok=8, B_seq=8, 131072-byte K/V rows, a reservation ledger of 8 rows used
of 28 with a forecast of 5 rows per request, priorities low=4 / high=0 with
aging quantum 2, clients A=8 / B=4 offered events, exact prefix hit 0 and
foreign_ready=true. It derives 4 chunks, 136 causal pairs, 24 history rows,
3 MiB of exposure proxy, 4 piggyback decode rows, 4 reservation intents
and the first aging crossover at tick 8.

Ten cases over nine axes each change exactly one control; every ledger is
read from the code path that owns it (:mod:`iterserve.lab.sensitivity_runs`),
and :func:`formula_ledgers` states what F68-F72 and F61 say it must be. The
hidden-output case changes only realized output lengths and must leave
every online plan of the prefill unchanged (0x06 metamorphic check). This
is a shape ledger on a synthetic fixture, not a serving benchmark.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from iterserve.lab import sensitivity_runs as runs
from iterserve.metrics.chunk_ledger import ledger_from_starts
from iterserve.records.failures import failure_of
from iterserve.records.plan import IterationPlan


@dataclass(frozen=True, slots=True)
class SensitivityFixture:
    """One point of the one-control surface; the defaults are the 0x0E base."""

    prompt_tokens: int = 16  # S
    chunk_size: int = 4  # C
    num_decodes: int = 4  # D
    max_num_batched_tokens: int = 8  # B_tok
    max_num_seqs: int = 8  # B_seq
    bytes_per_row: int = 131072
    reservation_ceiling_rows: int = 28  # H
    reserved_rows: int = 8  # R_live
    forecast_rows: int = 5  # r_hat
    low_priority: int = 4
    high_priority: int = 0
    aging_quantum: int = 2  # q_age, ticks
    client_a_events: int = 8
    client_b_events: int = 4
    prefix_hit_rows: int = 0  # H_hit
    foreign_ready: bool = True  # the prompt's remote K/V reported READY
    hidden_output_tokens: int = 4  # the prompt's realized output length (hidden truth)


BASE = SensitivityFixture()

#: (axis, control, value): ten one-control cases over nine axes, each against BASE
CASES: tuple[tuple[str, str, int | bool], ...] = (
    ("chunk size", "chunk_size", 2),
    ("chunk size", "chunk_size", 8),
    ("token budget", "max_num_batched_tokens", 6),
    ("sequence budget", "max_num_seqs", 3),
    ("reservation forecast", "forecast_rows", 4),
    ("aging quantum", "aging_quantum", 3),
    ("client mix", "client_b_events", 8),
    ("prefix hit", "prefix_hit_rows", 8),
    ("foreign readiness", "foreign_ready", False),
    ("hidden output", "hidden_output_tokens", 8),
)


@dataclass(frozen=True, slots=True)
class Ledgers:
    num_chunks: int  # F68 M
    causal_pairs: int  # F69 P_causal
    history_rows: int  # F69 R_hist
    exposure_bytes: int  # R_hist x bytes per row (logical proxy)
    piggyback_decode_rows: int  # F70 D_piggy
    reservation_intents: int  # F71 A_intent
    aging_crossover_tick: int | None  # F61: first tick the low request runs
    client_completed: tuple[int, int]  # completed requests of clients A, B
    uncached_prompt_rows: int  # F72 U
    prompt_eligible: bool  # the prompt runs only on a READY foreign fact (0x0C)


LEDGER_NAMES = tuple(f.name for f in dataclasses.fields(Ledgers))


def formula_ledgers(f: SensitivityFixture) -> Ledgers:
    """F68-F72 and F61 evaluated directly: what the runs must agree with."""
    s, c = f.prompt_tokens, f.chunk_size
    starts = range(0, s, c)
    room = min(f.num_decodes, max(f.max_num_batched_tokens - min(c, s), 0),
               max(f.max_num_seqs - 1, 0))
    # F61: low - floor(t / q_age) <= high first holds at t = (low - high) * q_age
    crossover = max(f.low_priority - f.high_priority, 0) * f.aging_quantum
    return Ledgers(math.ceil(s / c), s * (s + 1) // 2, sum(starts), sum(starts) * f.bytes_per_row,
                   room, (f.reservation_ceiling_rows - f.reserved_rows) // f.forecast_rows,
                   crossover, (f.client_a_events, f.client_b_events),
                   s - f.prefix_hit_rows, f.foreign_ready)


@dataclass(frozen=True, slots=True)
class Observed:
    ledgers: Ledgers
    prefill_plans: tuple[IterationPlan, ...]  # every plan up to the prompt's last chunk


def observe(f: SensitivityFixture) -> Observed:
    """The ledgers from the code paths that own them (see sensitivity_runs)."""
    starts, plans = runs.chunk_run(f)
    ledger = ledger_from_starts(starts, f.prompt_tokens, f.bytes_per_row)
    first = next(i for i, plan in enumerate(plans) if runs.prefills_prompt(plan))
    last = max(i for i, plan in enumerate(plans) if runs.prefills_prompt(plan))
    piggyback = sum(1 for item in plans[first].work if item.request_id != runs.LONG_ID)
    return Observed(
        Ledgers(len(starts), ledger.total_pairs, ledger.history_rows,
                ledger.history_bytes_proxy or 0, piggyback, runs.reservation_intents(f),
                runs.aging_crossover_tick(f), runs.client_completed_requests(f),
                runs.uncached_prompt_rows(f), runs.prompt_planned_under_readiness(f)),
        tuple(plans[:last + 1]))


@dataclass(frozen=True, slots=True)
class SensitivityRow:
    axis: str
    control: str
    value: int | bool
    ledgers: Ledgers
    formula: Ledgers
    moved: tuple[str, ...]  # ledgers that differ from the base run
    online_plans_unchanged: bool  # the prefill's plans equal the base run's


def one_control(base: SensitivityFixture, case: SensitivityFixture) -> str:
    """The one control ``case`` changes against ``base``; FC15 (compound
    sensitivity) when it changes more or none."""
    changed = [f.name for f in dataclasses.fields(base)
               if getattr(base, f.name) != getattr(case, f.name)]
    if len(changed) != 1:
        raise ValueError(f"{failure_of('compound_sensitivity').label}: a case must change "
                         f"exactly one control, this one changes {changed or 'none'}")
    return changed[0]


def sensitivity_table() -> list[SensitivityRow]:
    base = observe(BASE)
    rows = [SensitivityRow("base", "-", 0, base.ledgers, formula_ledgers(BASE), (), True)]
    for axis, control, value in CASES:
        fixture = dataclasses.replace(BASE, **{control: value})  # type: ignore[arg-type]
        one_control(BASE, fixture)
        seen = observe(fixture)
        moved = tuple(name for name in LEDGER_NAMES
                      if getattr(seen.ledgers, name) != getattr(base.ledgers, name))
        rows.append(SensitivityRow(axis, control, value, seen.ledgers, formula_ledgers(fixture),
                                   moved, seen.prefill_plans == base.prefill_plans))
    return rows
