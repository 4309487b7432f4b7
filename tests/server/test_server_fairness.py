"""``iterserve serve --policy vtc`` (0x09A): the fairness identity reaches the
state's client ledger, and /metrics shows each client's weighted service and
VTC counter beside the token rows."""

from __future__ import annotations

import httpx

from iterserve.server.metrics import parse_metrics


def test_vtc_server_exposes_per_client_ledger(serve):
    served = serve(policy="vtc")
    body = {"model": "tiny", "prompt": "fair share", "max_tokens": 3, "temperature": 0.0,
            "ignore_eos": True}
    for client in ("alice", "bob", "bob"):
        response = httpx.post(served.base_url + "/v1/completions", json=body,
                              headers={"X-Client-Id": client}, timeout=60)
        assert response.status_code == 200
    assert served.engine.wait_idle(30)
    samples = parse_metrics(httpx.get(served.base_url + "/metrics").text, ("model_name",))
    rows = {c: samples[f'iterserve:client_service_tokens_total{{client="{c}"}}']
            for c in ("alice", "bob")}
    done = {c: samples[f'iterserve:client_weighted_service{{client="{c}"}}']
            for c in ("alice", "bob")}
    assert done["bob"] == 2 * done["alice"] > 0  # two identical requests against one
    # w_p = w_q = 1: W_done = prompt rows + outputs = token rows + the first output
    assert done == {c: rows[c] + (1 if c == "alice" else 2) for c in rows}
    assert samples['iterserve:client_vtc_counter{client="bob"}'] >= done["bob"]
