"""Bounded per-client metric labels.

A request's ``user`` (or ``X-Client-Id``) is untrusted input: used as a
label value as it is, 300 users made 8,516 series. The first
``max_labels`` distinct clients keep their own label; every later one is
counted under :data:`OTHER_CLIENTS`, so a per-client family has at most
``max_labels + 1`` series. Totals are separate families without a client
label (a ``sum()`` over a per-client family is the total too).
"""

from __future__ import annotations

OTHER_CLIENTS = "other"
DEFAULT_MAX_CLIENT_LABELS = 16


class ClientLabels:
    """client id -> label; labels are handed out on first sight and kept.

    Written on the engine thread only; a scrape reads it (a dict lookup)."""

    def __init__(self, max_labels: int = DEFAULT_MAX_CLIENT_LABELS) -> None:
        if max_labels < 0:
            raise ValueError(f"max_labels must be >= 0, got {max_labels}")
        self.max_labels = max_labels
        self._labels: dict[str, str] = {}

    def label(self, client_id: str) -> str:
        """The client's label, handing one out while any is left. A client
        literally named ``other`` shares the overflow label."""
        label = self._labels.get(client_id)
        if label is not None:
            return label
        if client_id == OTHER_CLIENTS or len(self._labels) >= self.max_labels:
            return OTHER_CLIENTS
        self._labels[client_id] = client_id
        return client_id

    def label_if_known(self, client_id: str) -> str:
        """The label without handing a new one out (for scrape-time reads)."""
        return self._labels.get(client_id, OTHER_CLIENTS)
