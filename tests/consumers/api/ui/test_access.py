"""The console's credentials and session cookie, without a browser: what a cookie must prove
and what a token entry may say."""

from __future__ import annotations

from consumers.api.ui.access import LOGIN_SECONDS, OPEN, SESSION_SECONDS, Credentials
from consumers.api.ui.render import age
from consumers.runtime.tokens import parse_tokens


def credentials(*entries: str) -> Credentials:
    return Credentials(parse_tokens(",".join(entries)))


T = 1_800_000_000.0


def test_a_token_opens_a_session_its_cookie_proves_without_holding_the_token() -> None:
    creds = credentials("ops:s3cret-token-0123456789:operate", "ro:r3ad-token-0123456789:read")
    credential = creds.match("s3cret-token-0123456789")
    assert credential is not None and credential.name == "ops"
    cookie, session = creds.open_session(credential, now=T)
    assert "s3cret-token-0123456789" not in cookie
    again = creds.session(cookie, now=T + 60)
    assert again is not None and again.name == "ops" and again.can("operate")
    assert again.csrf() == session.csrf()


def test_a_cookie_forged_expired_or_of_a_removed_token_is_no_session() -> None:
    creds = credentials("ops:s3cret-token-0123456789:operate", "ro:r3ad-token-0123456789:read")
    ro = creds.match("r3ad-token-0123456789")
    assert ro is not None
    cookie, _ = creds.open_session(ro, now=T)
    body, signature = cookie.split(".")
    ops_cookie, _ = creds.open_session(creds.match("s3cret-token-0123456789"), now=T)  # type: ignore[arg-type]
    # the payload of one session under the signature of another: refused
    assert creds.session(f"{ops_cookie.split('.')[0]}.{signature}", now=T) is None
    # a signature changed in one character (the first: all its bits count, unlike the last
    # character's of a base64 string) is refused
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    assert creds.session(f"{body}.{flipped}", now=T) is None
    assert creds.session("garbage", now=T) is None
    assert creds.session(None, now=T) is None
    assert creds.session(cookie, now=T + SESSION_SECONDS + 1) is None
    # the token is removed from the configuration: its sessions end
    assert credentials("ops:s3cret-token-0123456789:operate").session(cookie, now=T) is None
    # the same token under the same name in another process: the session holds
    assert credentials("ro:r3ad-token-0123456789:read").session(cookie, now=T) is not None


def test_csrf_tokens_are_bound_to_their_session() -> None:
    creds = credentials("ops:s3cret-token-0123456789:operate")
    credential = creds.match("s3cret-token-0123456789")
    assert credential is not None
    _, one = creds.open_session(credential, now=T)
    _, two = creds.open_session(credential, now=T)
    assert one.csrf_ok(one.csrf())
    assert not one.csrf_ok(two.csrf())
    assert not one.csrf_ok("")


def test_a_sign_in_token_must_be_one_the_server_made_and_not_expired() -> None:
    creds = credentials("ops:s3cret-token-0123456789:operate")
    made = creds.login_token(now=T)
    assert creds.login_token_ok(made, made, now=T + 60)
    assert not creds.login_token_ok(made, made + "x", now=T)  # field and cookie disagree
    assert not creds.login_token_ok(made, made, now=T + LOGIN_SECONDS + 1)  # expired

    # a value another origin planted, its field matching: of the right shape, not made here
    nonce, expires, signature = made.split(".")
    planted = [
        "planted-by-a-sibling-subdomain",
        f"chosen-nonce.{expires}.{signature}",
        f"{nonce}.{int(expires) + 10**6}.{signature}",  # a later expiry under the same MAC
        credentials("ops:0ther-token-0123456789:operate").login_token(now=T),
    ]
    for value in planted:
        assert not creds.login_token_ok(value, value, now=T), value
    # the same configuration (another replica) accepts it
    assert credentials("ops:s3cret-token-0123456789:operate").login_token_ok(made, made, now=T)


def test_scopes_named_entries_and_bare_tokens() -> None:
    b, r, p = "bare-token-0123456789", "r" * 16, "p" * 16
    creds = credentials(b, f"ro:{r}:read", f"pub:{p}:publish")
    bare, ro, pub = creds.match(b), creds.match(r), creds.match(p)
    assert bare is not None and bare.name == "token-1"
    assert bare.can("operate") and bare.can("read")
    assert ro is not None and ro.can("read") and not ro.can("publish") and not ro.can("operate")
    assert pub is not None and pub.can("read") and pub.can("publish") and not pub.can("operate")
    assert creds.match("nope") is None and creds.match("") is None
    assert not creds.open and creds.anonymous() is None


def test_without_tokens_the_console_is_open_and_no_typed_token_matches() -> None:
    creds = credentials()
    assert creds.open
    anonymous = creds.anonymous()
    assert anonymous is not None and anonymous.name == OPEN and anonymous.can("operate")
    assert creds.match("") is None and creds.match("anything") is None
    cookie, _ = creds.open_session(anonymous, now=T)
    assert creds.session(cookie, now=T) is not None
    assert credentials().session(cookie, now=T) is None  # another process, another key


def test_ages_show_two_units_at_most() -> None:
    from datetime import timedelta

    assert [age(timedelta(seconds=s)) for s in (0, 905, 3600, 7260, 90061)] == [
        "0s",
        "15m 5s",
        "1h",
        "2h 1m",
        "1d 1h",
    ]
    assert age(None) == "-"
