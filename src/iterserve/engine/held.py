"""Submissions held back until a sibling's prompt is computed.

The ``n`` samples of one prompt share its full KV blocks through the prefix
cache, which registers a full block only once the step that computed it is
committed. Samples submitted together are planned together and none finds
the others' blocks; so the online front holds samples 1..n-1 (the
followers) until sample 0 (the leader) has its first output (its whole
prompt is computed and committed), then lets them arrive: each claims the
leader's full prompt blocks as an ordinary prefix hit and computes only its
partial last block and its own outputs.

A held follower has its id, its executor stream and its sink already; it is
not yet declared to the scheduler, so its arrival in the decision and event
logs is the instant it is released. The front keeps the instant it was
submitted (``submitted_ms``) so that serving metrics count its TTFT from
the client's request. A follower is released when its leader has emitted,
or has ended (rejected, cancelled, aborted: the follower then arrives as any
request does and meets the same gate), or when the follower is aborted (it
then arrives and is cancelled as any request aborted before it was
published). Whether to hold is the caller's choice (the server holds only
when prefix caching is on); this module is the mechanism only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from iterserve.engine.streams import StreamSink
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState


@dataclass(frozen=True, slots=True)
class HeldRequest:
    """A declared follower waiting for its leader's prompt."""

    spec: RequestSpec  # its arrival is the instant it was submitted
    sink: StreamSink
    leader_id: str


class HeldRequests:
    """Followers by leader, in submission order (engine front, under its lock)."""

    def __init__(self) -> None:
        self._by_leader: dict[str, list[HeldRequest]] = {}
        self._leader_of: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._leader_of)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._leader_of

    @property
    def request_ids(self) -> list[str]:
        return list(self._leader_of)

    def hold(self, held: HeldRequest) -> None:
        self._by_leader.setdefault(held.leader_id, []).append(held)
        self._leader_of[held.spec.request_id] = held.leader_id

    def take(self, request_id: str) -> HeldRequest | None:
        """Release one follower now (it was aborted), or None when it is not held."""
        leader_id = self._leader_of.pop(request_id, None)
        if leader_id is None:
            return None
        followers = self._by_leader[leader_id]
        held = next(h for h in followers if h.spec.request_id == request_id)
        followers.remove(held)
        if not followers:
            del self._by_leader[leader_id]
        return held

    def take_due(self, state: SchedulerState,
                 is_open: Callable[[str], bool]) -> list[HeldRequest]:
        """Release the followers whose leader has emitted or has ended
        (``is_open``: the leader's stream is still open), in submission order."""
        due = [leader_id for leader_id in self._by_leader
               if _leader_is_done(leader_id, state, is_open)]
        released = []
        for leader_id in due:
            for held in self._by_leader.pop(leader_id):
                del self._leader_of[held.spec.request_id]
                released.append(held)
        return released


def _leader_is_done(leader_id: str, state: SchedulerState,
                    is_open: Callable[[str], bool]) -> bool:
    view = state.views.get(leader_id)
    if view is not None and (view.num_emitted >= 1 or view.is_terminal):
        return True
    return not is_open(leader_id)  # rejected, or ended before it was published
