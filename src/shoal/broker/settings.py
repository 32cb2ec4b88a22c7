"""Queue settings, address-setting wildcards and destination parameters.

Resolution order for a queue: its own settings (config or destination
parameters at creation) > the most specific matching address setting > the
built-in default. Names are Artemis' kebab-case names where one exists.
Address settings may prefix any queue setting with ``default-`` (Artemis'
``default-group-buckets`` style); both spellings mean the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from shoal.errors import InvalidSetting

GROUP_MODES = ("sticky", "shared")
POISON_POLICIES = ("dead-letter", "park")
QUEUE_TYPES = ("classic", "log")
# What a queue does past its memory budget (max-size-bytes, or the broker's
# global-max-size), as Artemis' address-full-policy:
#   page  (default, as Artemis) persistent messages keep their bodies in the
#         journal only and are read back when delivered; producers are not
#         slowed down. Non-persistent messages (and every message when the
#         store cannot read bodies back, e.g. --data :memory:) fall back to
#         "block".
#   block producers that send to the full queue are paused (flow control)
#         until it drains below the budget; their messages are still accepted.
#   fail  a SEND that does not fit gets an ERROR frame (resource-full).
FULL_POLICIES = ("page", "block", "fail")


# G1: the group id header, and Artemis' name for it, accepted as an alias of
# the default (not of a queue's own ``group-header``).
DEFAULT_GROUP_HEADER = "JMSXGroupID"
ARTEMIS_GROUP_HEADER = "_AMQ_GROUP_ID"


def group_id_of(
    headers: dict[str, str], group_header: str, default_group: str | None
) -> str | None:
    """The group a message belongs to on a queue with these settings (G1, G10):
    its ``group_header`` (or Artemis' alias of the default one), else the
    queue's ``default-group`` (None: ungrouped)."""
    gid = headers.get(group_header)
    if gid is None and group_header == DEFAULT_GROUP_HEADER:
        gid = headers.get(ARTEMIS_GROUP_HEADER)
    return gid or default_group


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Every knob a queue has. Field names are the kebab-case names with '_'."""

    group_header: str = DEFAULT_GROUP_HEADER
    group_mode: str = "sticky"
    group_buckets: int = -1
    group_rebalance: bool = False
    group_first_key: str | None = None
    # Exact tracking (-1 buckets): bindings of idle groups beyond this are evicted.
    group_bindings_max: int = 1_000_000
    consumers_before_dispatch: int = 0
    delay_before_dispatch: int = 0  # ms
    default_group: str | None = None
    exclusive: bool = False
    poison_policy: str = "dead-letter"
    dead_letter_address: str = "DLQ"
    expiry_address: str | None = None  # None: expired messages are dropped
    max_delivery_attempts: int = 10
    default_persistent: bool = False
    # Artemis' name: record a persistent message's delivery count before each
    # delivery, so a message in flight at a crash comes back redelivered=true.
    # Off by default (one more record per persistent delivery).
    persist_delivery_count_before_delivery: bool = False
    queue_type: str = "classic"
    log_buckets: int = 8
    max_size_bytes: int = -1  # per-queue memory limit for message bodies; -1 none
    address_full_policy: str = "page"  # see FULL_POLICIES
    # Artemis-style priority: the ``priority`` header (0-9) orders the heads of
    # groups and ungrouped messages (higher first); never within a group.
    priority: bool = False

    def with_overrides(self, overrides: dict[str, Any]) -> QueueSettings:
        return dataclasses.replace(self, **overrides) if overrides else self


SETTING_NAMES: dict[str, str] = {
    f.name.replace("_", "-"): f.name for f in dataclasses.fields(QueueSettings)
}
_FIELD_TYPES: dict[str, Any] = {f.name: f.type for f in dataclasses.fields(QueueSettings)}
_CHOICES = {
    "group_mode": GROUP_MODES,
    "poison_policy": POISON_POLICIES,
    "queue_type": QUEUE_TYPES,
    "address_full_policy": FULL_POLICIES,
}


def _field_of(name: str) -> str | None:
    """The QueueSettings field a kebab-case name sets (``default-`` accepted)."""
    return SETTING_NAMES.get(name.removeprefix("default-") if name not in SETTING_NAMES else name)


# Settings whose value names another address: whoever sets one sends there.
ADDRESS_SETTINGS = frozenset({"dead_letter_address", "expiry_address"})


def named_addresses(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, address) for each setting of ``raw`` (kebab-case names) that
    names another address."""
    return [
        (name, str(value))
        for name, value in raw.items()
        if _field_of(name) in ADDRESS_SETTINGS and value not in (None, "")
    ]


def coerce_setting(name: str, value: Any) -> tuple[str, Any]:
    """Validate one setting given by its kebab-case name; return (field, value).

    Accepts strings (destination parameters) as well as TOML values.
    Raises InvalidSetting naming the setting.
    """
    field_name = _field_of(name)
    if field_name is None:
        raise InvalidSetting(name, f"unknown queue setting {name!r}")
    kind = _FIELD_TYPES[field_name]
    try:
        if kind == "bool":
            if isinstance(value, bool):
                out: Any = value
            elif str(value).lower() in ("true", "1", "yes"):
                out = True
            elif str(value).lower() in ("false", "0", "no"):
                out = False
            else:
                raise ValueError("expected true or false")
        elif kind == "int":
            if isinstance(value, bool):
                raise ValueError("expected an integer")
            out = int(value)
        elif kind == "str | None":
            out = None if value in (None, "") else str(value)
        else:
            out = str(value)
    except ValueError as exc:
        raise InvalidSetting(name, f"setting {name!r}: invalid value {value!r} ({exc})") from None
    choices = _CHOICES.get(field_name)
    if choices and out not in choices:
        raise InvalidSetting(name, f"setting {name!r} must be one of {', '.join(choices)}")
    if field_name == "group_buckets" and out < -1:
        raise InvalidSetting(name, "setting 'group-buckets' must be -1, 0 or positive")
    if field_name in ("log_buckets", "max_delivery_attempts") and out < 1:
        raise InvalidSetting(name, f"setting {name!r} must be at least 1")
    if field_name in ("consumers_before_dispatch", "delay_before_dispatch") and out < 0:
        raise InvalidSetting(name, f"setting {name!r} must not be negative")
    return field_name, out


def coerce_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """Validate a mapping of kebab-case names to values into field overrides."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        field_name, val = coerce_setting(name, value)
        out[field_name] = val
    return out


# Destination parameters that are not queue settings but are understood.
SUBSCRIPTION_PARAMETERS = frozenset({"exclusive"})


def split_destination(destination: str) -> tuple[str, dict[str, str]]:
    """'/queue/orders?group-buckets=2' -> ('/queue/orders', {'group-buckets': '2'})."""
    base, sep, query = destination.partition("?")
    if not sep:
        return destination, {}
    return base, dict(parse_qsl(query, keep_blank_values=True))


def _match(pattern: list[str], words: list[str]) -> bool:
    """Artemis wildcards: '#' any number of words (including none), '*' one word.

    Steps through the words once with the set of pattern positions reached
    (no backtracking): O(len(words) * len(pattern)) even for a long address
    against several '#'.
    """
    m = len(pattern)
    states = _skip_hashes(pattern, {0})
    for word in words:
        reached = set()
        for i in states:
            if i < m:
                p = pattern[i]
                if p == "#":
                    reached.add(i)  # '#' takes this word and may take more
                elif p == "*" or p == word:
                    reached.add(i + 1)
        if not reached:
            return False
        states = _skip_hashes(pattern, reached)
    return m in states


def _skip_hashes(pattern: list[str], states: set[int]) -> set[int]:
    """Add the positions reached by letting each '#' take no word."""
    m = len(pattern)
    for i in sorted(states):
        while i < m and pattern[i] == "#":
            i += 1
            states.add(i)
    return states


def _specificity(pattern: str) -> tuple[int, int, int]:
    words = pattern.split(".")
    literal = sum(1 for w in words if w not in ("#", "*"))
    singles = sum(1 for w in words if w == "*")
    # More literal words first, then fewer '#', then longer patterns.
    return (literal, -sum(1 for w in words if w == "#"), singles)


@dataclass(frozen=True, slots=True)
class AddressSettings:
    """Ordered wildcard patterns with setting overrides; most specific wins per key."""

    patterns: tuple[tuple[str, dict[str, Any]], ...] = ()
    base: QueueSettings = field(default_factory=QueueSettings)

    @classmethod
    def from_raw(cls, raw: dict[str, dict[str, Any]]) -> AddressSettings:
        return cls(tuple((pat, coerce_settings(vals)) for pat, vals in raw.items()))

    def resolve(self, queue_name: str, own: dict[str, Any] | None = None) -> QueueSettings:
        words = queue_name.split(".")
        matching = [(pat, vals) for pat, vals in self.patterns if _match(pat.split("."), words)]
        matching.sort(key=lambda pv: _specificity(pv[0]))
        merged: dict[str, Any] = {}
        for _pat, vals in matching:  # least specific first; later ones override
            merged.update(vals)
        if own:
            merged.update(own)
        return self.base.with_overrides(merged)


def by_config_name(fields: dict[str, Any]) -> dict[str, Any]:
    """Settings keyed by their names in configuration (``max-size-bytes``),
    as destination parameters and queue declarations spell them."""
    return {k.replace("_", "-"): v for k, v in fields.items()}


def settings_to_kebab(settings: QueueSettings) -> dict[str, Any]:
    return {
        f.name.replace("_", "-"): getattr(settings, f.name) for f in dataclasses.fields(settings)
    }
