"""The effective configuration as ``auditrec doctor`` shows it: every setting under its
variable's name, with its value (secrets masked, URLs without their password), where it
came from (``flag``, ``env`` or ``default``) and, for a ``sqlite://`` URL, the absolute path of
its file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from consumers.operations.doctor.files import resolved_path
from consumers.runtime.settings import Settings
from consumers.runtime.tokens import parse_tokens
from statemachine.errors import ConfigError

__all__ = ["Setting", "effective_configuration", "mask"]

_PREFIX = "AUDITREC_"
_SHOWN_ENDS = 2  # characters shown at each end of a long secret
_LONG_SECRET = 16


@dataclass(frozen=True, slots=True)
class Setting:
    variable: str
    value: str | None
    source: str  # flag, env or default
    path: str | None = None  # a sqlite:// URL's file, absolute (as resolved from here)


def mask(secret: str) -> str:
    """``cf…89`` for a long secret (enough to tell two apart), ``********`` otherwise."""
    if len(secret) < _LONG_SECRET:
        return "********"
    return f"{secret[:_SHOWN_ENDS]}…{secret[-_SHOWN_ENDS:]}"


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        user = f"{parts.username}:" if parts.username else ":"
        return urlunsplit(parts._replace(netloc=f"{user}********@{host}"))
    except ValueError:
        return url.split("://", 1)[0] + "://…"


def _tokens(value: SecretStr) -> str:
    """The API tokens by name and scope (``viewer:read, ops:operate``), never their secrets."""
    try:
        tokens = parse_tokens(value.get_secret_value())
    except ConfigError as exc:
        return f"invalid: {exc}"
    return ", ".join(f"{t.name}:{t.scope}" for t in tokens)


def _shown(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if name == "api_tokens" and isinstance(value, SecretStr):
        return _tokens(value)
    if isinstance(value, SecretStr):
        return mask(value.get_secret_value())
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if name.endswith("_url"):
        return _without_password(str(value))
    return str(value)


def effective_configuration(
    settings: Settings,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Setting]:
    """Every setting, in declaration order. ``flags``: the command line's overrides (a value
    of ``None`` was not given); ``environ`` defaults to the process's environment."""
    given = {k for k, v in (flags or {}).items() if v is not None}
    env = os.environ if environ is None else environ
    settings_env = {k.upper() for k, v in env.items() if v != ""}
    result = []
    for name in Settings.model_fields:
        variable = _PREFIX + name.upper()
        if name in given:
            source = "flag"
        elif variable in settings_env:
            source = "env"
        else:
            source = "default"
        value = getattr(settings, name)
        path = resolved_path(value) if name.endswith("_url") and isinstance(value, str) else None
        shown = _shown(name, value)
        result.append(Setting(variable, shown, source, None if path is None else str(path)))
    return result
