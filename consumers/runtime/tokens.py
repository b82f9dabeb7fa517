"""API tokens and their scopes: ``AUDITREC_API_TOKENS="name:token:scope,…"``.

Scopes nest: ``read`` (GET routes) ⊂ ``publish`` (read and ``POST /events``) ⊂ ``operate``
(everything: operator actions, the brake, sweeps). An entry is ``name:secret:scope``; a bare
``secret`` (no colon) keeps the meaning tokens had before scopes: full access (``operate``),
named ``token-N`` by its 1-based position in the list. Names say who acted: what is done over
HTTP or in the console records ``token:<name>`` (:func:`actor_name`), and ``anonymous`` on an
API without tokens, so an API token can never be mistaken for a command-line user
(``cli:<os user>``).

A malformed entry is refused naming its position and what is wrong, never its secret; so is a
token shorter than :data:`MIN_SECRET` characters (one that can be guessed).
:func:`match` compares a given token with every configured secret in constant time, so timing
says nothing about which (or whether one) matched. The HTTP API and the console share these.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from statemachine.errors import ConfigError

__all__ = [
    "ANONYMOUS",
    "MIN_SECRET",
    "SCOPES",
    "ApiToken",
    "Scope",
    "actor_name",
    "allows",
    "match",
    "parse_tokens",
]

Scope = Literal["read", "publish", "operate"]
SCOPES: Final[tuple[str, ...]] = get_args(Scope)  # each includes the ones before it
_NAME: Final = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
_VARIABLE: Final = "AUDITREC_API_TOKENS"
MIN_SECRET: Final = 16  # characters a token has at least
ANONYMOUS: Final = "anonymous"  # who acts over an API explicitly left without tokens


@dataclass(frozen=True, slots=True)
class ApiToken:
    name: str
    secret: str = field(repr=False)  # never printed
    scope: Scope

    def allows(self, needed: Scope) -> bool:
        return allows(self.scope, needed)


def actor_name(token: ApiToken | None) -> str:
    """Who acts with ``token``: ``token:<name>``, or ``anonymous`` without one (an open API)."""
    return f"token:{token.name}" if token is not None else ANONYMOUS


def allows(scope: Scope, needed: Scope) -> bool:
    """Whether a token of ``scope`` may do what needs ``needed``."""
    return SCOPES.index(scope) >= SCOPES.index(needed)


def parse_tokens(text: str | None) -> tuple[ApiToken, ...]:
    """The tokens of ``text`` (the variable's value); :class:`ConfigError` naming the entry
    (by position and name, never its secret) when one is malformed or a name repeats."""
    if text is None:
        return ()
    tokens: list[ApiToken] = []
    for number, entry in enumerate((e.strip() for e in text.split(",")), start=1):
        if not entry:
            continue
        where = f"{_VARIABLE}: entry {number}"
        if ":" not in entry:
            name = f"token-{number}"
            tokens.append(_long_enough(ApiToken(name, entry, "operate"), f"{where} ({name!r})"))
            continue
        parts = entry.split(":")
        if len(parts) != 3:
            raise ConfigError(
                f"{where} has {len(parts)} ':'-separated parts; expected name:token:scope "
                "(or a bare token)"
            )
        name, secret, scope = (p.strip() for p in parts)
        where = f"{where} ({name!r})" if _NAME.match(name) else where
        if not _NAME.match(name):
            raise ConfigError(f"{where}: the name must be 1-64 characters of [A-Za-z0-9._@-]")
        if not secret:
            raise ConfigError(f"{where}: the token is empty")
        if scope not in SCOPES:
            raise ConfigError(f"{where}: unknown scope; expected one of {', '.join(SCOPES)}")
        tokens.append(_long_enough(ApiToken(name, secret, scope), where))  # type: ignore[arg-type]
    names = [t.name for t in tokens]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{_VARIABLE}: the name {name!r} is given to more than one token")
    return tuple(tokens)


def _long_enough(token: ApiToken, where: str) -> ApiToken:
    if len(token.secret) < MIN_SECRET:
        raise ConfigError(
            f"{where}: the token is shorter than {MIN_SECRET} characters; use a random one "
            "(e.g. `openssl rand -hex 24`)"
        )
    return token


def match(tokens: Sequence[ApiToken], given: str | None) -> ApiToken | None:
    """The token whose secret is ``given``; every secret is compared, in constant time."""
    offered = (given or "").encode()
    found: ApiToken | None = None
    for token in tokens:
        if hmac.compare_digest(offered, token.secret.encode()) and offered:
            found = token
    return found
