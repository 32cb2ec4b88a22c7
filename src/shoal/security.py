"""Users, salted password hashes, roles and per-address permissions.

Pure: the server authenticates CONNECT frames and HTTP requests with
:class:`Security`, and checks each SEND / SUBSCRIBE / management call with
:meth:`Security.allowed`. Address patterns use Artemis wildcards (``#`` any
words, ``*`` one word, ``.`` separator), as address settings do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.broker.settings import (
    SUBSCRIPTION_PARAMETERS,
    _match,
    named_addresses,
    split_destination,
)
from shoal.errors import ConfigError, Forbidden, Unauthenticated

ACTIONS = ("send", "consume", "browse", "create", "manage")
DESTINATION_PREFIXES = ("/queue/", "/topic/", "/temp-queue/", "/temp-topic/")
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
# Checked for unknown users so they cost the same scrypt as known ones: a
# fast "no such user" would tell real user names apart by timing.
_DUMMY_HASH = (
    f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}$"
    "c2hvYWwtZHVtbXktc2FsdA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
)
_CACHE_MAX = 10_000  # entries in each memo below; cleared whole when full
_Rule = tuple[list[str], tuple[int, int], frozenset[str]]  # pattern words, rank, roles


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """'scrypt$N$r$p$salt$hash' with a random 16-byte salt."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **_SCRYPT)
    b64 = base64.b64encode
    return f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        got = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=32
        )
        return hmac.compare_digest(got, base64.b64decode(digest))
    except (ValueError, TypeError):
        return False


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    roles: tuple[str, ...] = ()
    token_hashes: tuple[str, ...] = ()  # sha256 hex of API tokens (HTTP Bearer)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Permission:
    match: str  # address pattern
    action: str
    roles: frozenset[str]


@dataclass(slots=True)
class Security:
    users: dict[str, User] = field(default_factory=dict)
    permissions: list[Permission] = field(default_factory=list)
    # Verified (user, password) pairs: scrypt is deliberately slow, reconnects are not.
    _verified: dict[tuple[str, str], bool] = field(default_factory=dict)
    # Per action, (pattern words, rank, roles) sorted most specific first;
    # built on first use, with the decisions memoized by (action, address).
    _rules: dict[str, list[_Rule]] | None = None
    _decisions: dict[tuple[str, str], frozenset[str] | None] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def authenticate(self, login: str | None, passcode: str | None) -> str | None:
        """Return the user name, None when security is off; raise Unauthenticated.

        Runs scrypt on a cache miss: the STOMP server calls :meth:`verify`
        from a worker thread instead.
        """
        if not self.enabled:
            return login
        login, passcode = self.require_credentials(login, passcode)
        if not self.verify(login, passcode):
            raise wrong_credentials(login)
        return login

    @staticmethod
    def require_credentials(login: str | None, passcode: str | None) -> tuple[str, str]:
        if not login or passcode is None:
            raise Unauthenticated("login and passcode are required")
        return login, passcode

    def cached(self, login: str, passcode: str) -> bool | None:
        """The remembered outcome for this pair, None when scrypt must run."""
        return self._verified.get((login, hashlib.sha256(passcode.encode()).hexdigest()))

    def verify(self, login: str, passcode: str) -> bool:
        """Check a password (slow on a cache miss; safe to call from a thread)."""
        key = (login, hashlib.sha256(passcode.encode()).hexdigest())
        ok = self._verified.get(key)
        if ok is None:
            user = self.users.get(login)
            stored = user.password_hash if user is not None else _DUMMY_HASH
            ok = verify_password(passcode, stored) and user is not None
            if len(self._verified) > _CACHE_MAX:
                self._verified.clear()
            self._verified[key] = ok
        return ok

    def authenticate_token(self, token: str) -> str:
        """The user owning this API token; raise Unauthenticated otherwise."""
        digest = token_hash(token)
        for user in self.users.values():
            if any(hmac.compare_digest(digest, h) for h in user.token_hashes):
                return user.name
        raise Unauthenticated("unknown API token")

    def allowed(self, user: str | None, action: str, address: str) -> bool:
        """Most specific matching rule for (action, address) decides; none -> deny."""
        if not self.enabled:
            return True
        account = self.users.get(user or "")
        if account is None:
            return False
        roles = self._roles_for(action, address)
        return roles is not None and not roles.isdisjoint(account.roles)

    def allowed_somewhere(self, user: str | None, action: str) -> bool:
        """Whether some rule grants ``user`` the ``action`` on some address (for
        what acts before its address is known, e.g. an empty sink batch)."""
        if not self.enabled:
            return True
        account = self.users.get(user or "")
        if account is None:
            return False
        if self._rules is None:
            self._rules = _compile_rules(self.permissions)
        return any(
            not roles.isdisjoint(account.roles) for _, _, roles in self._rules.get(action, ())
        )

    def _roles_for(self, action: str, address: str) -> frozenset[str] | None:
        """Roles of the most specific rule for (action, address), memoized."""
        key = (action, address)
        try:
            return self._decisions[key]
        except KeyError:
            pass
        if self._rules is None:
            self._rules = _compile_rules(self.permissions)
        words = address.split(".")
        roles = None
        for pwords, _rank, perm_roles in self._rules.get(action, ()):
            if _match(pwords, words):  # rules are sorted most specific first
                roles = perm_roles
                break
        if len(self._decisions) > _CACHE_MAX:
            self._decisions.clear()
        self._decisions[key] = roles
        return roles

    def check(self, user: str | None, action: str, address: str) -> None:
        if not self.allowed(user, action, address):
            raise Forbidden(f"user {user!r} may not {action} on {address!r}")

    def check_destination(self, user: str | None, action: str, destination: str) -> None:
        """``action`` (send, consume) on a client's destination. Its parameters
        are queue settings, fixed when the frame creates the queue: they need
        ``create`` on the address, and a setting that names another address
        (dead letters, expired messages go there) needs ``send`` on that one."""
        base, params = split_destination(destination)
        address = address_of(base)
        self.check(user, action, address)
        settings = {k: v for k, v in params.items() if k not in SUBSCRIPTION_PARAMETERS}
        if not settings:
            return
        if not self.allowed(user, "create", address):
            raise Forbidden(
                f"user {user!r} may not create on {address!r}: destination parameters "
                f"({', '.join(settings)}) configure the queue"
            )
        self.check_named_addresses(user, settings)

    def check_named_addresses(self, user: str | None, settings: dict[str, Any]) -> None:
        """Settings that name another address need ``send`` on it."""
        for name, target in named_addresses(settings):
            if not self.allowed(user, "send", target):
                raise Forbidden(f"user {user!r} may not send to {target!r}, which {name} names")


def address_of(destination: str) -> str:
    """The address a destination (without parameters) names: '/queue/a.b' -> 'a.b'."""
    for prefix in DESTINATION_PREFIXES:
        if destination.startswith(prefix):
            return destination[len(prefix) :]
    return destination


def wrong_credentials(login: str) -> Unauthenticated:
    return Unauthenticated(f"wrong login or passcode for {login!r}")


def _compile_rules(permissions: list[Permission]) -> dict[str, list[_Rule]]:
    rules: dict[str, list[_Rule]] = {}
    for perm in permissions:
        pwords = perm.match.split(".")
        # More literal words first, then fewer '#'.
        rank = (sum(w not in ("#", "*") for w in pwords), -pwords.count("#"))
        rules.setdefault(perm.action, []).append((pwords, rank, perm.roles))
    # A stable sort: of equally specific rules the first one listed wins.
    return {
        action: sorted(lst, key=lambda rule: rule[1], reverse=True) for action, lst in rules.items()
    }


class LoginThrottle:
    """Failed logins per peer address: a token bucket of ``per_minute`` tokens.

    Each failure takes a token; tokens come back evenly over a minute. With
    none left, logins from that address are refused without checking the
    password, so guessing is slow and costs the broker no scrypt.
    """

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._buckets.get(address, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)

    def allows(self, address: str, now: float) -> bool:
        return self.per_minute <= 0 or self._tokens(address, now) >= 1.0

    def failed(self, address: str, now: float) -> None:
        if self.per_minute <= 0:
            return
        if len(self._buckets) > _CACHE_MAX:  # forget addresses whose bucket refilled
            full = float(self.per_minute)
            self._buckets = {a: b for a, b in self._buckets.items() if self._tokens(a, now) < full}
        self._buckets[address] = (max(0.0, self._tokens(address, now) - 1.0), now)

    def succeeded(self, address: str, now: float) -> None:
        """Give back the token a login took up front once it proved right."""
        if self.per_minute > 0 and address in self._buckets:
            self._buckets[address] = (
                min(float(self.per_minute), self._tokens(address, now) + 1.0),
                now,
            )


def parse_security(users_raw: dict[str, Any], permissions_raw: list[Any]) -> Security:
    """Build from TOML tables: [users.NAME] password-hash, roles; [[permissions]]."""
    users: dict[str, User] = {}
    for name, entry in users_raw.items():
        if not isinstance(entry, dict) or "password-hash" not in entry:
            raise ConfigError(f"users.{name}", "needs a 'password-hash' (use `shoal user add`)")
        roles = entry.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise ConfigError(f"users.{name}.roles", "must be a list of role names")
        tokens = entry.get("token-hashes", [])
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ConfigError(f"users.{name}.token-hashes", "must be a list of sha256 hex digests")
        users[name] = User(name, str(entry["password-hash"]), tuple(roles), tuple(tokens))
    perms: list[Permission] = []
    for i, entry in enumerate(permissions_raw):
        if not isinstance(entry, dict) or "match" not in entry:
            raise ConfigError(f"permissions[{i}]", "needs a 'match' address pattern")
        for key in entry:
            if key != "match" and key not in ACTIONS:
                raise ConfigError(
                    f"permissions[{i}].{key}", f"unknown action; use one of {', '.join(ACTIONS)}"
                )
        for action in ACTIONS:
            roles = entry.get(action)
            if roles is None:
                continue
            if not isinstance(roles, list):
                raise ConfigError(f"permissions[{i}].{action}", "must be a list of role names")
            perms.append(Permission(str(entry["match"]), action, frozenset(roles)))
    return Security(users, perms)


def load_users_file(path: Path) -> dict[str, Any]:
    """The file `shoal user add` writes: {"NAME": {"password-hash": ..., "roles": [...]}}."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(str(path), f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must hold a JSON object of users")
    return data


def add_user(path: Path, name: str, password: str, roles: list[str]) -> None:
    users = load_users_file(path)
    old = users.get(name, {})
    users[name] = {"password-hash": hash_password(password), "roles": roles}
    if old.get("token-hashes"):
        users[name]["token-hashes"] = old["token-hashes"]
    _write_users(path, users)


def add_token(path: Path, name: str) -> str:
    """Create an API token for an existing user; only its hash is stored."""
    users = load_users_file(path)
    if name not in users:
        raise ConfigError(name, f"no user {name!r} in {path}; add it first with `shoal user add`")
    token = secrets.token_urlsafe(32)
    users[name].setdefault("token-hashes", []).append(token_hash(token))
    _write_users(path, users)
    return token


def _write_users(path: Path, users: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(users, indent=2) + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
