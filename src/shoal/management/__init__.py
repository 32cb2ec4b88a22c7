"""Management over HTTP, as pure request handlers over the core: the JSON
API (``api``) with its OpenAPI document (``openapi``), Prometheus metrics
(``metrics``), the Spark log-queue endpoints (``logs``), the console's static
files (``console``) and the router and request/response types they share
(``http``). The HTTP listener that calls them lives in ``shoal.server.http``."""
