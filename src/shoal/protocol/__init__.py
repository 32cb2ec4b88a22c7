"""Wire protocols, sans-I/O: each is a pure object fed bytes and a clock,
giving events; given events, it gives bytes. No sockets, no asyncio, no
broker imports. ``stomp/`` is STOMP 1.0-1.2; the server's listeners drive
them (``shoal.server``)."""
