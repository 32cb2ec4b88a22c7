"""STOMP destination strings -> (kind, name, queue-setting parameters).

``/queue/NAME``, ``/topic/NAME``, ``/temp-queue/NAME``, ``/temp-topic/NAME``,
each optionally followed by ``?param=value&...`` where every parameter is
a queue setting (``broker/settings.py``; an unknown name raises
InvalidSetting naming it). The queue's name is the part before ``?``.

Names the core derives (documented for operators and the other parts):

* ``/queue/NAME`` -> queue ``NAME``;
* ``/temp-queue/NAME`` on connection C -> queue ``tmp.C.NAME`` (a reply-to
  header naming it is rewritten to ``/temp-queue/tmp.C.NAME``, which any
  connection may send to while C is connected);
* ``/topic/T`` -> one queue per subscription: ``T::NAME`` for
  durable-subscription-name NAME (``T::CLIENTID.NAME`` when the connection
  gave a client id), else the non-durable ``T::C/SUBID``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shoal.broker.settings import coerce_setting, split_destination
from shoal.errors import InvalidDestination

KINDS = (
    ("/queue/", "queue"),
    ("/topic/", "topic"),
    ("/temp-queue/", "temp-queue"),
    ("/temp-topic/", "temp-topic"),
)


@dataclass(frozen=True, slots=True)
class Destination:
    kind: str  # queue | topic | temp-queue | temp-topic
    name: str
    base: str  # the destination without parameters
    own: dict[str, Any]  # kebab-case setting -> coerced value
    params: dict[str, str]  # raw parameters


def parse_destination(destination: str) -> Destination:
    base, params = split_destination(destination)
    for prefix, kind in KINDS:  # noqa: B007 - kind is read after the loop
        if base.startswith(prefix):
            name = base[len(prefix) :]
            break
    else:
        raise InvalidDestination(
            f"unknown destination {destination!r}: use /queue/, /topic/, /temp-queue/ or /temp-topic/"
        )
    if not name:
        raise InvalidDestination(f"destination {destination!r} has no name")
    own: dict[str, Any] = {}
    for key, value in params.items():
        field_name, val = coerce_setting(key, value)  # raises InvalidSetting(key)
        own[field_name.replace("_", "-")] = val
    return Destination(kind, name, base, own, params)


def temp_name(conn_id: int, name: str) -> str:
    return f"tmp.{conn_id}.{name}"


def is_temp_name(name: str) -> bool:
    head, _, rest = name.partition(".")
    if head != "tmp":
        return False
    cid, _, short = rest.partition(".")
    return cid.isdigit() and bool(short)


def subscription_queue_name(topic: str, sub_name: str, client_id: str | None) -> str:
    return f"{topic}::{client_id}.{sub_name}" if client_id else f"{topic}::{sub_name}"


def private_subscription_queue_name(topic: str, conn_id: int, sub_id: str) -> str:
    return f"{topic}::{conn_id}/{sub_id}"
