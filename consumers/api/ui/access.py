"""Who may use the console, and the cookie that remembers them.

Credentials are the API's tokens (``AUDITREC_API_TOKENS``, parsed and matched by
:mod:`consumers.runtime.tokens`: names, nested scopes ``read`` ⊂ ``publish`` ⊂ ``operate``). With
no tokens configured the console is open: one anonymous credential with full access, as the API
is then open too.

The session cookie is *signed*, not stored: ``payload.signature`` where the payload names the
token, an expiry and a random nonce, and the signature is an HMAC keyed by a hash of that
token's secret. It holds no token, so a leaked cookie does not leak a token; any number of API
processes accept it; and removing (or changing) a token in the configuration ends every session
made with it. The payload also names the token's session *generation*, kept in the projection
store (:meth:`~projections.coordination.Coordination.session_generation`) and shared by every
replica: logging out moves it on, so every cookie of that token, copied or not, is refused from
then on. The CSRF token of a form is an HMAC of the nonce under the same key: bound to that
session, useless with another. The open console signs with a key drawn when the process starts
(its sessions end with the process).

The sign-in form has a CSRF token of its own before any session exists, in a short-lived
``SameSite=Strict`` cookie of the form's path and repeated in the form
(:meth:`Credentials.login_token`), so a page of another site cannot sign the operator's
browser in under a token of its choosing. The token is made by the server: a random nonce and
an expiry under an HMAC keyed by a hash of every configured token's session key (the same on
every replica of one configuration), so a cookie another origin plants (a sibling subdomain
may set one for the parent domain) with a value of its own making, matching field or not, is
refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from consumers.runtime.tokens import ApiToken, Scope, actor_name, match

__all__ = [
    "LOGIN_SECONDS",
    "OPEN",
    "SESSION_SECONDS",
    "Credential",
    "Credentials",
    "Session",
]

_KEY_TAG = b"auditrec-console-session:"
_LOGIN_TAG = b"auditrec-console-login:"
SESSION_SECONDS = 8 * 3600  # a working day; then the console asks for the token again
LOGIN_SECONDS = 3600  # how long a sign-in form may wait to be sent
OPEN = "console"  # the anonymous credential's name (the actor) when no token is configured


@dataclass(frozen=True)
class Credential:
    token: ApiToken | None  # None: the open console's anonymous credential
    key: bytes = field(repr=False)  # the HMAC key of its sessions: a hash, never the secret

    @property
    def name(self) -> str:
        return self.token.name if self.token is not None else OPEN

    @property
    def scope(self) -> Scope:
        """What its token may do (the open console's anonymous credential: ``operate``)."""
        return self.token.scope if self.token is not None else "operate"

    def can(self, scope: Scope) -> bool:
        return self.token is None or self.token.allows(scope)


@dataclass(frozen=True)
class Session:
    credential: Credential
    nonce: str
    expires: int
    generation: int = 0  # the token's session generation when it was made

    @property
    def name(self) -> str:
        return self.credential.name

    @property
    def actor(self) -> str:
        """Who acts in this session, as over the API: ``token:<name>``, or ``anonymous``."""
        return actor_name(self.credential.token)

    @property
    def scope(self) -> Scope:
        return self.credential.scope

    def can(self, scope: Scope) -> bool:
        return self.credential.can(scope)

    def csrf(self) -> str:
        """The CSRF token of this session's forms."""
        return _sign(self.credential.key, f"csrf:{self.nonce}")

    def csrf_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf().encode())


def _sign(key: bytes, text: str) -> str:
    mac = hmac.new(key, text.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


class Credentials:
    """The configured tokens as console credentials; :attr:`open` when there are none."""

    def __init__(self, tokens: Sequence[ApiToken]) -> None:
        self._tokens = tuple(tokens)
        self._by_name: dict[str, Credential] = {
            t.name: Credential(t, hashlib.sha256(_KEY_TAG + t.secret.encode()).digest())
            for t in self._tokens
        }
        self.open = not self._tokens
        if self.open:
            self._by_name[OPEN] = Credential(None, secrets.token_bytes(32))
        keys = sorted(credential.key for credential in self._by_name.values())
        self._login_key = hashlib.sha256(_LOGIN_TAG + b"".join(keys)).digest()

    def match(self, given: str) -> Credential | None:
        """The credential of a typed token (compared in constant time with every one)."""
        token = match(self._tokens, given)
        return self._by_name[token.name] if token is not None else None

    def open_session(
        self, credential: Credential, now: float | None = None, generation: int = 0
    ) -> tuple[str, Session]:
        """A new session for ``credential`` in the token's ``generation``: the cookie's value
        and the session."""
        expires = int((now if now is not None else time.time()) + SESSION_SECONDS)
        session = Session(credential, secrets.token_urlsafe(16), expires, generation)
        payload = json.dumps(
            [credential.name, expires, session.nonce, generation], separators=(",", ":")
        )
        body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
        return f"{body}.{_sign(credential.key, body)}", session

    def anonymous(self) -> Credential | None:
        return self._by_name[OPEN] if self.open else None

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session of a cookie, or ``None`` when it is missing, forged, expired, or made
        with a token no longer configured (its generation is the caller's to check)."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, signature = cookie.split(".")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            name, expires, nonce, generation = json.loads(raw)
        except (ValueError, TypeError, UnicodeError):
            return None
        credential = self._by_name.get(name) if isinstance(name, str) else None
        if credential is None or not isinstance(expires, int) or not isinstance(nonce, str):
            return None
        if not isinstance(generation, int):
            return None
        if not hmac.compare_digest(signature.encode(), _sign(credential.key, body).encode()):
            return None
        if expires < (now if now is not None else time.time()):
            return None
        return Session(credential, nonce, expires, generation)

    def login_token(self, now: float | None = None) -> str:
        """A fresh sign-in form's CSRF token (its cookie and its hidden field alike):
        ``nonce.expires.signature``."""
        expires = int((now if now is not None else time.time()) + LOGIN_SECONDS)
        body = f"{secrets.token_urlsafe(18)}.{expires}"
        return f"{body}.{_sign(self._login_key, f'login:{body}')}"

    def login_token_valid(self, token: str | None, now: float | None = None) -> bool:
        """Whether ``token`` was made by :meth:`login_token` (with these tokens configured)
        and has not expired."""
        if not token or token.count(".") != 2:
            return False
        body, signature = token.rsplit(".", 1)
        expected = _sign(self._login_key, f"login:{body}")
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return False
        expires = body.split(".")[1]
        return expires.isdigit() and int(expires) >= (now if now is not None else time.time())

    def login_token_ok(self, cookie: str | None, given: str, now: float | None = None) -> bool:
        """Whether a sign-in form came back with the token its own cookie holds, one the
        server made."""
        if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):
            return False
        return self.login_token_valid(cookie, now)
