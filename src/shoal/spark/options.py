"""The options of ``format("shoal")``: which exist, their aliases, and checks that name them.

Spark hands option keys over lower-cased, so the tables key on lower case
and keep the spelling people write for messages. Unknown options are
refused rather than ignored: a Kafka user's ``subscribe`` silently ignored
would read nothing they expect. Kafka's names that have a Shoal meaning are
accepted as aliases (``maxOffsetsPerTrigger``) or refused with the Shoal
option to use instead.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from shoal.errors import BrokerError

CONNECTION = ("url", "user", "password", "token", "timeout", "retrySeconds")
READ = (
    *CONNECTION,
    "queue",
    "queuePattern",
    "maxRowsPerBatch",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "failOnDataLoss",
    "fetchRows",
    "prefetch",
    "partitionRows",
    "pollInterval",
    "commit",
    "includeHeaders",
)
WRITE = (
    *CONNECTION,
    "destination",
    "groupColumn",
    "bodyColumn",
    "seqColumn",
    "headersColumn",
    "sinkId",
    "batchId",
    "stageRows",
)
# Spark passes these through to every writer; they are Spark's, not ours.
SPARK_OWN = ("path", "checkpointLocation", "queryName")

# Kafka's option -> Shoal's, accepted as the same option.
ALIASES = {"maxOffsetsPerTrigger": "maxRowsPerBatch"}
# Kafka's options with no Shoal equivalent of that name: what to use instead.
KAFKA_HINTS = {
    "subscribe": 'option("queue", "<log queue>[,<log queue>...]"): log queues bound to topics',
    "subscribePattern": 'option("queuePattern", "<regex over log queue names>")',
    "assign": 'option("queue", "<log queue>") with startingOffsets {"<bucket>": offset}',
    "topic": 'option("destination", "/topic/<name>") (or /queue/<name>)',
    "kafka.bootstrap.servers": 'option("url", "http://<broker>:8161"): the broker\'s HTTP port',
    "startingOffsetsByTimestamp": "startingTimestamp (one time for every bucket) or startingOffsets",
    "endingTimestamp": 'endingOffsets (latest or {"<bucket>": offset})',
    "endingOffsetsByTimestamp": 'endingOffsets (latest or {"<bucket>": offset})',
    "minPartitions": "partitionRows (rows per Spark partition)",
    "maxPartitions": "partitionRows (rows per Spark partition)",
    "minOffsetsPerTrigger": "maxRowsPerBatch (there is no minimum)",
    "groupIdPrefix": "nothing: one Spark query reads one log queue, Spark's checkpoint is the cursor",
    "kafka.group.id": "nothing: one Spark query reads one log queue, Spark's checkpoint is the cursor",
}
STARTING = ("earliest", "latest")
NO_MATCH = ("error", "latest")
ENDING = ("latest",)


class ShoalOptionError(BrokerError, ValueError):
    """An option of ``format("shoal")`` is unknown, missing or has a bad value."""

    code = "config"


def _spelled(known: tuple[str, ...]) -> dict[str, str]:
    return {k.lower(): k for k in known}


def normalize(options: Mapping[str, Any], known: tuple[str, ...], role: str) -> dict[str, str]:
    """Lower-cased options with aliases resolved; refuses unknown ones, naming them."""
    spelled = _spelled(known + SPARK_OWN)
    aliases = {a.lower(): t.lower() for a, t in ALIASES.items()}
    alias_spelled = {a.lower(): a for a in ALIASES}
    hints = {k.lower(): (k, v) for k, v in KAFKA_HINTS.items()}
    out: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for raw_key, value in dict(options).items():
        key = str(raw_key).lower()
        canonical = aliases.get(key, key)
        if canonical in spelled:
            if canonical in out and out[canonical] != str(value):
                raise ShoalOptionError(
                    f"shoal {role}: {given_as[canonical]!r} and "
                    f"{alias_spelled.get(key) or spelled[canonical]!r} are the same option "
                    f"with different values ({out[canonical]!r}, {str(value)!r}); give one"
                )
            out[canonical] = str(value)
            given_as[canonical] = alias_spelled.get(key) or spelled[canonical]
            continue
        if key in hints:
            name, hint = hints[key]
            raise ShoalOptionError(
                f"shoal {role}: Kafka's option {name!r} is not a Shoal option; use {hint}"
            )
        if key.startswith("kafka."):
            raise ShoalOptionError(
                f"shoal {role}: {raw_key!r} is a Kafka client option; Shoal "
                "takes url, user, password or token"
            )
        close = difflib.get_close_matches(key, list(spelled), n=1, cutoff=0.75)
        maybe = f"; did you mean {spelled[close[0]]!r}?" if close else ""
        raise ShoalOptionError(
            f"shoal {role}: unknown option {raw_key!r}{maybe} (options: {', '.join(known)})"
        )
    return out


def parse_offsets(role: str, name: str, raw: str, words: tuple[str, ...]) -> str:
    """Check a ``startingOffsets``/``endingOffsets`` value; returns it (words lower-cased)."""
    low = raw.strip().lower()
    if low in words:
        return low
    allowed = ", ".join(words)
    try:
        given = json.loads(raw)
    except ValueError:
        given = None
    if isinstance(given, dict) and (
        _bucket_offsets(given)
        or all(isinstance(v, dict) and _bucket_offsets(v) for v in given.values())
    ):
        return raw
    raise ShoalOptionError(
        f'shoal {role}: option {name!r} must be {allowed} or JSON {{"<bucket>": <offset>, ...}} '
        f'(several queues: {{"<queue>": {{"<bucket>": <offset>}}}}), not {raw!r}'
    )


def _bucket_offsets(given: dict[Any, Any]) -> bool:
    return all(
        str(b).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= 0
        for b, o in given.items()
    )


def validate_read(options: Mapping[str, Any]) -> dict[str, str]:
    """Every check a read (stream or batch) can make before touching the broker."""
    opts = normalize(options, READ, "source")
    queue, pattern = opts.get("queue"), opts.get("queuepattern")
    if not queue and not pattern:
        raise ShoalOptionError(
            'shoal source: option "queue" is required: '
            'option("queue", "<log queue name>[,<name>...]") or '
            'option("queuePattern", "<regex>")'
        )
    if queue and pattern:
        raise ShoalOptionError('shoal source: give "queue" or "queuePattern", not both')
    if queue and not all(q.strip() for q in queue.split(",")):
        raise ShoalOptionError(f"shoal source: option 'queue' has an empty name in {queue!r}")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ShoalOptionError(
                f"shoal source: option 'queuePattern' is not a regular "
                f"expression ({exc}): {pattern!r}"
            ) from None
    ms = opts.get("startingtimestamp")
    if ms is not None and not ms.strip().isdigit():
        raise ShoalOptionError(
            "shoal source: option 'startingTimestamp' must be milliseconds "
            f"since the epoch, not {ms!r}"
        )
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in NO_MATCH:
        raise ShoalOptionError(
            "shoal source: option 'startingOffsetsByTimestampStrategy' must "
            f"be {' or '.join(NO_MATCH)}, not {strategy!r}"
        )
    opts["startingoffsetsbytimestampstrategy"] = strategy
    opts["startingoffsets"] = parse_offsets(
        "source", "startingOffsets", opts.get("startingoffsets") or "earliest", STARTING
    )
    if "endingoffsets" in opts:
        opts["endingoffsets"] = parse_offsets(
            "source", "endingOffsets", opts["endingoffsets"], ENDING
        )
    return opts


def validate_write(options: Mapping[str, Any]) -> dict[str, str]:
    opts = normalize(options, WRITE, "sink")
    if not opts.get("destination"):
        raise ShoalOptionError(
            'shoal sink: option "destination" is required: '
            'option("destination", "/queue/NAME") or "/topic/NAME"'
        )
    return opts
