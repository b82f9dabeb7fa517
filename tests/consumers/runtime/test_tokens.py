"""API tokens with names and scopes (``AUDITREC_API_TOKENS``): parsing, refusals that name
the entry and never the secret, the scope order, and the constant-time match."""

from __future__ import annotations

import pytest

from consumers.runtime.settings import load_settings
from consumers.runtime.tokens import ApiToken, allows, match, parse_tokens
from statemachine.errors import ConfigError


def test_named_tokens_carry_their_name_and_scope() -> None:
    tokens = parse_tokens(
        "viewer:s3cret-r-0123456789:read, ci:s3cret-p-0123456789:publish,"
        "ops:s3cret-o-0123456789:operate"
    )

    assert [(t.name, t.secret, t.scope) for t in tokens] == [
        ("viewer", "s3cret-r-0123456789", "read"),
        ("ci", "s3cret-p-0123456789", "publish"),
        ("ops", "s3cret-o-0123456789", "operate"),
    ]


def test_a_bare_token_has_full_access_and_is_named_by_its_position() -> None:
    tokens = parse_tokens("viewer:s3cret-r-0123456789:read,bare-secret-0123456789")

    assert tokens[1] == ApiToken("token-2", "bare-secret-0123456789", "operate")


def test_no_variable_means_no_tokens() -> None:
    assert parse_tokens(None) == ()
    assert parse_tokens(" , ") == ()


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("ops:hunter2:admin", ["entry 1", "'ops'", "unknown scope", "read, publish, operate"]),
        ("a:b:c:hunter2", ["entry 1", "4 ':'-separated parts"]),
        ("ok:x-0123456789abcdef:read,ops::read", ["entry 2", "'ops'", "the token is empty"]),
        ("bad name:hunter2:read", ["entry 1", "the name must be"]),
        (
            "ops:hunter2-0123456789:read,ops:hunter3-0123456789:operate",
            ["the name 'ops'", "more than one token"],
        ),
        ("ops:hunter2", ["entry 1", "2 ':'-separated parts"]),
        ("ops:hunter2:read", ["entry 1", "'ops'", "shorter than 16 characters"]),
        ("hunter2-abcdefg", ["entry 1", "'token-1'", "shorter than 16 characters"]),
    ],
)
def test_a_malformed_entry_is_refused_naming_it_never_its_secret(
    spec: str, names: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tokens(spec)

    message = str(caught.value)
    assert "AUDITREC_API_TOKENS" in message
    for part in names:
        assert part in message
    assert "hunter" not in message


def test_scopes_nest_read_publish_operate() -> None:
    assert allows("operate", "read") and allows("operate", "publish")
    assert allows("publish", "read") and not allows("publish", "operate")
    assert allows("read", "read") and not allows("read", "publish")


def test_match_finds_the_token_of_a_secret_and_nothing_else() -> None:
    tokens = parse_tokens("viewer:aaaa-0123456789abc:read,ops:bbbb-0123456789abc:operate")

    assert match(tokens, "bbbb-0123456789abc") == tokens[1]
    assert match(tokens, "aaaa-0123456789abc") == tokens[0]
    assert match(tokens, "aaaa-0123456789abX") is None
    assert match(tokens, "") is None
    assert match(tokens, None) is None
    assert match((), "aaaa-0123456789abc") is None


def test_a_token_never_shows_its_secret_when_printed() -> None:
    assert "aaaa-0123456789abc" not in repr(parse_tokens("viewer:aaaa-0123456789abc:read")[0])


def test_the_settings_parse_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDITREC_API_TOKENS", "viewer:aaaa-0123456789abc:read,cccc-0123456789abc")
    settings = load_settings()

    assert [(t.name, t.scope) for t in settings.api_token_specs()] == [
        ("viewer", "read"),
        ("token-2", "operate"),
    ]
    assert settings.api_token_list() == ["aaaa-0123456789abc", "cccc-0123456789abc"]
