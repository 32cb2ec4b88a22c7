"""Every route the management port serves, assembled from the handler modules.

The server's HTTP listener builds one router per listener; the handler
modules depend on ``http`` (types, router) and ``broker_port``, never on this.
"""

from __future__ import annotations

from shoal._native import running_build
from shoal.management import api, console, logs, openapi, scrape
from shoal.management.http import Context, Request, Response, Router, json_response
from shoal.management.sampling import ManagementState


def health(ctx: Context, request: Request, params: dict[str, str]) -> Response:
    build, reason = running_build()
    body = {"status": "ok", "build": build}
    if reason:  # why the pure modules run: SHOAL_PURE, a stale or a missing build
        body["build_reason"] = reason
    return json_response(body)


def build_router() -> Router:
    router = Router()
    router.state = ManagementState()
    router.add("GET", "/health", health, auth="open")
    api.register(router, router.state)
    scrape.register(router, router.state)
    openapi.register(router)
    console.register(router)
    logs.register(router)  # log queues and the exactly-once sink (docs/spark.md)
    return router
