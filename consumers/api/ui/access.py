"""Who may use the console, and the cookie that remembers them.

Credentials come from ``AUDITREC_API_TOKENS``: ``name:token:scope`` entries (scope ``read``,
``publish`` or ``operate``), or a bare ``token`` with full access (named ``token-N`` by its
position). ``operate`` and ``publish`` include ``read``. With no tokens configured the console
is open: one anonymous credential with full access, as the API is then open too.

The session cookie is *signed*, not stored: ``payload.signature`` where the payload names the
credential, an expiry and a random nonce, and the signature is an HMAC keyed by a hash of that
credential's token. It holds no token, so a leaked cookie does not leak a token; any number of
API processes accept it without sharing state; and removing a token from the configuration
ends every session made with it. The CSRF token of a form is an HMAC of the nonce under the
same key: bound to that session, useless with another. The open console signs with a key
drawn when the process starts (its sessions end with the process).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "OPEN",
    "SCOPES",
    "SESSION_SECONDS",
    "Credential",
    "Credentials",
    "Session",
]

SCOPES = ("read", "publish", "operate")
SESSION_SECONDS = 8 * 3600  # a working day; then the console asks for the token again
OPEN = "console"  # the anonymous credential's name when no token is configured
_IMPLIED = {"read": {"read"}, "publish": {"read", "publish"}, "operate": {"read", "operate"}}


@dataclass(frozen=True)
class Credential:
    name: str
    key: bytes  # the HMAC key of its sessions: a hash of the token, never the token itself
    token_digest: bytes  # what a typed token is compared with (constant time)
    scopes: frozenset[str]

    def can(self, scope: str) -> bool:
        return scope in self.scopes


@dataclass(frozen=True)
class Session:
    credential: Credential
    nonce: str
    expires: int

    @property
    def name(self) -> str:
        return self.credential.name

    def can(self, scope: str) -> bool:
        return self.credential.can(scope)

    def csrf(self) -> str:
        """The CSRF token of this session's forms."""
        return _sign(self.credential.key, f"csrf:{self.nonce}")

    def csrf_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf().encode())


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _sign(key: bytes, text: str) -> str:
    mac = hmac.new(key, text.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


class Credentials:
    """The configured credentials; :attr:`open` when there are none."""

    def __init__(self, entries: Sequence[str]) -> None:
        self._by_name: dict[str, Credential] = {}
        for position, entry in enumerate(entries, 1):
            name, token, scopes = _parse(entry, position)
            if name in self._by_name:
                raise ValueError(f"AUDITREC_API_TOKENS: the name {name!r} is used twice")
            digest = _digest(token)
            key = hashlib.sha256(b"auditrec-console-session:" + digest).digest()
            self._by_name[name] = Credential(name, key, digest, scopes)
        self.open = not self._by_name
        if self.open:
            key = secrets.token_bytes(32)
            self._by_name[OPEN] = Credential(OPEN, key, b"", frozenset(SCOPES))

    def match(self, token: str) -> Credential | None:
        """The credential of a typed token, compared in constant time with every one."""
        given = _digest(token)
        found = None
        for credential in self._by_name.values():
            if hmac.compare_digest(given, credential.token_digest) and not self.open:
                found = credential
        return found

    def open_session(self, credential: Credential, now: float | None = None) -> tuple[str, Session]:
        """A new session for ``credential``: the cookie's value and the session."""
        expires = int((now if now is not None else time.time()) + SESSION_SECONDS)
        session = Session(credential, secrets.token_urlsafe(16), expires)
        payload = json.dumps([credential.name, expires, session.nonce], separators=(",", ":"))
        body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
        return f"{body}.{_sign(credential.key, body)}", session

    def anonymous(self) -> Credential | None:
        return self._by_name[OPEN] if self.open else None

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session of a cookie, or ``None`` when it is missing, forged, expired, or made
        with a token no longer configured."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, signature = cookie.split(".")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            name, expires, nonce = json.loads(raw)
        except (ValueError, TypeError, UnicodeError):
            return None
        credential = self._by_name.get(name) if isinstance(name, str) else None
        if credential is None or not isinstance(expires, int) or not isinstance(nonce, str):
            return None
        if not hmac.compare_digest(signature.encode(), _sign(credential.key, body).encode()):
            return None
        if expires < (now if now is not None else time.time()):
            return None
        return Session(credential, nonce, expires)


def _parse(entry: str, position: int) -> tuple[str, str, frozenset[str]]:
    parts = entry.split(":")
    if len(parts) == 1:
        return f"token-{position}", entry, frozenset(SCOPES)
    if len(parts) != 3 or not all(parts):
        raise ValueError(
            f"AUDITREC_API_TOKENS entry {position}: expected name:token:scope or a bare token"
        )
    name, token, scope = parts
    if scope not in _IMPLIED:
        raise ValueError(
            f"AUDITREC_API_TOKENS entry {position}: unknown scope {scope!r} "
            f"(one of {', '.join(SCOPES)})"
        )
    return name, token, frozenset(_IMPLIED[scope])
