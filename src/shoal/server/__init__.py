"""The only asyncio code: listeners and per-connection sessions (``stomp``,
``ws``, ``http``) that feed protocol objects and turn their events into core
commands, the flush that turns the core's effects into bytes (``app``), the
fsync pipeline with group commit (``persistence``), configuration
(``config``), start-up and graceful shutdown, and the cluster's I/O
(``cluster``). ``session_api.ServerState`` is what a session may use of the
server; ``http_guard`` holds the pure Host/Origin checks the HTTP and
WebSocket listeners share."""
