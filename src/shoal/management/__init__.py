"""Management over HTTP, as pure request handlers: the JSON API (``api``)
with its OpenAPI document (``openapi``), the Prometheus scrape (``scrape``,
rendered by ``metrics``), the Spark log-queue endpoints (``logs``) and the
console's static files (``console``). They share the request/response types
and the router (``http``) and reach the broker only through one port
(``broker_port``), which the server implements
(``shoal.server.management_port``); ``routes`` assembles the router. The HTTP listener that calls them lives in
``shoal.server.http``."""
