"""Where the outcome feed goes: ``AUDITREC_WEBHOOK_URLS`` read into endpoints (names stable by
URL, filters by type), ``AUDITREC_OUTCOME_QUEUE_ID``, and what ``serve`` refuses to run with."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator

import pytest

from consumers.runtime.endpoints import parse_webhook_urls, queue_endpoint
from consumers.runtime.settings import load_settings
from statemachine.errors import ConfigError

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``AUDITREC_*`` variable from the environment the tests run in."""
    for name in list(os.environ):
        if name.startswith("AUDITREC_"):
            monkeypatch.delenv(name)
    yield


def test_urls_split_on_commas_and_whitespace_and_are_named_by_their_url() -> None:
    endpoints = parse_webhook_urls(
        " https://a.example/hook?token=s3cret ,\nhttp://127.0.0.1:9000/in#audit.failed|audit.overturned"
    )
    assert [e.kind for e in endpoints] == ["webhook", "webhook"]
    first, second = endpoints
    assert (
        first.name
        == "webhook-" + hashlib.sha256(b"https://a.example/hook?token=s3cret").hexdigest()[:8]
    )
    assert first.address == "https://a.example/hook?token=s3cret"
    assert first.target == "https://a.example/hook"  # no query: it may hold the receiver's token
    assert first.types is None and first.wants("audit.restored")
    assert second.address == "http://127.0.0.1:9000/in"  # the fragment is never sent
    assert second.target == "http://127.0.0.1:9000/in"
    assert second.types == {"audit.failed", "audit.overturned"}
    assert second.wants("audit.failed") and not second.wants("audit.completed")


def test_a_filter_keeps_the_endpoint_s_name() -> None:
    (plain,) = parse_webhook_urls("https://a.example/hook")
    (filtered,) = parse_webhook_urls("https://a.example/hook#audit.failed")
    assert plain.name == filtered.name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ftp://a.example/x", "entry 1 is not an http:// or https:// URL"),
        ("https://a.example/x https:///nohost", "entry 2 is not an http:// or https:// URL"),
        (
            "https://a.example/x#audit.exploded",
            "entry 1 filters by unknown outcome type(s) 'audit.exploded'",
        ),
        ("https://a.example/x#", None),  # an empty fragment: no filter
        ("https://a.example/x#|", "entry 1 filters by unknown outcome type(s) (none)"),
        ("https://a.example/x https://a.example/x#audit.failed", "entry 2 repeats an earlier URL"),
    ],
)
def test_a_malformed_entry_is_refused_naming_it(text: str, message: str | None) -> None:
    if message is None:
        assert parse_webhook_urls(text)[0].types is None
        return
    with pytest.raises(ConfigError) as refused:
        parse_webhook_urls(text)
    assert str(refused.value).startswith("AUDITREC_WEBHOOK_URLS: ")
    assert message in str(refused.value)


def test_the_outcome_queue_is_an_endpoint_after_the_webhooks() -> None:
    settings = load_settings(
        webhook_urls="https://a.example/h",
        webhook_secret=SECRET,
        outcome_queue_id="q-1",
        cloudflare_account_id="acc",
        cloudflare_queues_token="cf-queues-token",
    )
    assert [e.name for e in settings.outcome_endpoints()][1] == "queue-q-1"
    assert settings.outcomes_refusal() is None
    assert queue_endpoint("q-1").target == "queue q-1"
    with pytest.raises(ConfigError, match="AUDITREC_OUTCOME_QUEUE_ID: not a queue id"):
        queue_endpoint("../other")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"webhook_urls": "https://a.example/h"},
            "AUDITREC_WEBHOOK_URLS needs AUDITREC_WEBHOOK_SECRET",
        ),
        (
            {"webhook_urls": "https://a.example/h", "webhook_secret": "whsec_c2hvcnQ="},
            "AUDITREC_WEBHOOK_SECRET is not a Standard Webhooks secret",
        ),
        (
            {"webhook_urls": "https://a.example/h", "webhook_secret": "whsec_not base64!"},
            "AUDITREC_WEBHOOK_SECRET is not a Standard Webhooks secret",
        ),
        ({"webhook_urls": "nope"}, "AUDITREC_WEBHOOK_URLS: entry 1"),
        (
            {"outcome_queue_id": "q-1"},
            "AUDITREC_OUTCOME_QUEUE_ID needs AUDITREC_CLOUDFLARE_ACCOUNT_ID",
        ),
    ],
)
def test_what_the_feed_cannot_run_with_is_named(settings: dict[str, str], message: str) -> None:
    refusal = load_settings(**settings).outcomes_refusal()
    assert refusal is not None and message in refusal


def test_no_endpoint_is_no_feed_and_no_refusal() -> None:
    settings = load_settings()
    assert settings.outcome_endpoints() == ()
    assert settings.outcomes_refusal() is None
