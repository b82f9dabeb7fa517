"""Out-of-range input is refused naming what is wrong, never a 500 or a traceback: a duration
past 100 years over HTTP (a listing, a bulk action, a purge, the console, a backtest: 422), on the
command line and in a setting (exit 2)."""

from __future__ import annotations

import pytest

from statemachine.vocabulary import ERROR_CODES
from tests.cli import run
from tests.consumers.api.conftest import JSON, LiveServer

HUGE = "99999999999d"
CODE = ERROR_CODES[0]


@pytest.mark.parametrize(
    ("method", "path", "params", "body", "named"),
    [
        ("GET", "/audits", {"older_than": HUGE}, None, "query.older_than"),
        ("GET", "/audits", {"older_than": "inf"}, None, "query.older_than"),
        ("GET", "/audits", {"older_than": "1e400"}, None, "query.older_than"),
        (
            "POST",
            "/audits/fail",
            None,
            {"code": CODE, "reason": "r", "older_than": HUGE},
            "older_than",
        ),
        ("POST", "/audits/restore", None, {"reason": "r", "older_than": HUGE}, "older_than"),
        ("POST", "/dead-letters/purge", None, {"older_than": HUGE}, "older_than"),
        ("POST", "/dead-letters/purge", None, {"older_than": "nan"}, "older_than"),
        ("GET", "/backtest", {"since": HUGE}, None, "since"),
        ("GET", "/backtest", {"set": f"INSTANCE_LOST_GRACE={HUGE}"}, None, "INSTANCE_LOST_GRACE"),
    ],
)
def test_a_duration_past_100_years_is_422_naming_the_parameter(
    open_api: LiveServer,
    method: str,
    path: str,
    params: dict[str, str] | None,
    body: dict[str, str] | None,
    named: str,
) -> None:
    with open_api.client() as client:
        answer = client.request(method, path, params=params, json=body, headers=JSON)

    assert answer.status_code == 422, answer.text
    assert named in answer.text


def test_the_console_answers_a_huge_duration_with_422(open_api: LiveServer) -> None:
    with open_api.client() as client:
        page = client.get("/ui/audits", params={"status": "running", "running_longer_than": HUGE})

    assert page.status_code == 422
    assert "running longer than" in page.text and "100 years" in page.text


@pytest.mark.parametrize(
    "args",
    [
        ("audits", "--older-than", HUGE),
        ("fail", "--older-than", HUGE, "--code", CODE, "--reason", "r"),
        ("restore", "--older-than", HUGE, "--reason", "r"),
        ("dead-letters", "purge", "--older-than", HUGE, "--yes"),
    ],
)
def test_a_huge_duration_flag_exits_2_naming_it(env: dict[str, str], args: tuple[str, ...]) -> None:
    refused = run(*args, env=env)

    assert refused.returncode == 2, refused.stderr
    assert "--older-than" in refused.stderr and "100 years" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("command", [("serve",), ("doctor",), ("audits",)])
def test_a_huge_duration_setting_exits_2_naming_the_variable(
    env: dict[str, str], command: tuple[str, ...]
) -> None:
    refused = run(*command, env={**env, "AUDITREC_STALE_RUNNING_AFTER": HUGE})

    assert refused.returncode == 2, refused.stderr
    assert "AUDITREC_STALE_RUNNING_AFTER" in refused.stderr
    assert "Traceback" not in refused.stderr
