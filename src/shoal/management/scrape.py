"""``GET /metrics``: the Prometheus scrape, read through the port at scrape
time and rendered by ``metrics.py``."""

from __future__ import annotations

from shoal.errors import BrokerError
from shoal.management.http import Context, Handler, Request, Response, Router
from shoal.management.metrics import CONTENT_TYPE, protocol_counts, render
from shoal.management.sampling import ManagementState


def metrics_handler(state: ManagementState) -> Handler:
    def handle(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        port = ctx.port
        registry = state.metrics_for(ctx)
        fsyncs = port.fsync_stats()
        if fsyncs is not None:
            registry.absorb_fsyncs(fsyncs.count, fsyncs.recent)
        queues = port.queue_infos()
        state.sample(ctx, queues)
        group_states: dict[str, dict[str, int]] = {}
        for q in queues:
            if q.get("type", "classic") == "log":
                continue
            try:
                group_states[q["name"]] = port.group_state_counts(q["name"])
            except BrokerError:  # e.g. deleted meanwhile: no group gauges
                continue
        text = render(
            registry,
            info=port.broker_info(),
            queues=queues,
            group_states=group_states,
            consumers=len(port.consumer_infos()),
            connections=len(port.connection_infos()),
            protocols=protocol_counts(port.sessions().values()),
            cluster=port.cluster_status(),
        )
        return Response(200, text.encode(), CONTENT_TYPE)

    return handle


def register(router: Router, state: ManagementState) -> None:
    router.add("GET", "/metrics", metrics_handler(state), auth="browse")
