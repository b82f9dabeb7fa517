"""What ``serve`` refuses before it listens, so the record never depends on a setting left
out: an API without tokens beyond loopback, and a token short enough to guess. ``doctor``
says the same. The process boundary is what is tested (its exit code at start-up). An API
without tokens on loopback starts, and says once, in its log, that anyone who reaches it may
change the record."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.cli import run, run_process
from tests.security.conftest import serving

# Were the refusal missing, serve would run until the timeout (and the test fail with it).
START = 30.0


def test_an_api_without_tokens_beyond_loopback_is_refused(env: dict[str, str]) -> None:
    refused = run_process(
        "serve", "--only", "api", env={**env, "AUDITREC_API_HOST": "0.0.0.0"}, timeout=START
    )

    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "AUDITREC_API_TOKENS" in refused.stderr
    assert "AUDITREC_API_ALLOW_OPEN" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_token_shorter_than_16_characters_is_refused_by_name_never_its_secret(
    env: dict[str, str],
) -> None:
    tokens = "viewer:a-long-enough-token-0001:read,ops:hunter2:operate"
    refused = run_process(
        "serve", "--only", "api", env={**env, "AUDITREC_API_TOKENS": tokens}, timeout=START
    )

    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "AUDITREC_API_TOKENS: entry 2 ('ops')" in refused.stderr
    assert "shorter than 16 characters" in refused.stderr
    assert "hunter2" not in refused.stdout + refused.stderr


def test_doctor_fails_the_api_check_with_the_same_refusal(env: dict[str, str]) -> None:
    exposed = run("doctor", "--json", env={**env, "AUDITREC_API_HOST": "0.0.0.0"})
    short = run("doctor", "--json", env={**env, "AUDITREC_API_TOKENS": "hunter2"})
    fine = run("doctor", "--json", env=env)

    api = {
        name: next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "api")
        for name, r in (("exposed", exposed), ("short", short), ("fine", fine))
    }
    assert exposed.returncode == 2 and not api["exposed"]["ok"] and api["exposed"]["refused"]
    assert "AUDITREC_API_TOKENS" in api["exposed"]["fix"]
    assert not api["short"]["ok"] and "'token-1'" in api["short"]["fix"]
    assert short.returncode == 2 and "api" in json.loads(short.stdout)["refused"]
    assert "hunter2" not in short.stdout + short.stderr
    assert api["fine"]["ok"] and "open (no tokens) on 127.0.0.1" in api["fine"]["detail"]


def test_a_token_of_an_unknown_scope_is_refused_by_serve_and_doctor_alike(
    env: dict[str, str],
) -> None:
    bad = {**env, "AUDITREC_API_TOKENS": "viewer:abc:readonly"}
    served = run_process("serve", "--only", "api", env=bad, timeout=START)
    checked = run("doctor", "--json", env=bad)

    sentence = "AUDITREC_API_TOKENS: entry 1 ('viewer'): unknown scope"
    assert served.returncode == 2 and sentence in served.stderr, served.stderr[-2000:]
    api = next(c for c in json.loads(checked.stdout)["checks"] if c["name"] == "api")
    assert checked.returncode == 2
    assert not api["ok"] and api["refused"] and sentence in api["fix"]
    assert "error: `serve` refuses this configuration" in checked.stderr


def test_a_misspelled_variable_stops_serve_and_doctor_alike_naming_the_known_one(
    env: dict[str, str],
) -> None:
    typo = {**env, "AUDITREC_WATCHDOG_INTERVALL": "5m"}
    served = run_process("serve", "--only", "api", env=typo, timeout=START)
    checked = run("doctor", env=typo)

    said = "unknown variable AUDITREC_WATCHDOG_INTERVALL (did you mean AUDITREC_WATCHDOG_INTERVAL?)"
    for result in (served, checked):
        assert result.returncode == 2, result.stdout + result.stderr
        assert said in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AUDITREC_API_HEADER_TIMEOUT", "0s"),
        ("AUDITREC_API_HEADER_TIMEOUT", "11m"),
        ("AUDITREC_API_BODY_TIMEOUT", "2h"),
        ("AUDITREC_API_MAX_HEADER_BYTES", "100"),
        ("AUDITREC_API_MAX_CONNECTIONS", "0"),
        ("AUDITREC_API_AUTH_FAILURES_PER_MINUTE", "0"),
        ("AUDITREC_API_FORWARDED_ALLOW_IPS", "proxy.internal"),
        ("AUDITREC_API_FORWARDED_ALLOW_IPS", "127.0.0.1,10.0.0.5/8"),  # host bits set
    ],
)
def test_a_connection_limit_out_of_range_stops_serve_naming_it(
    env: dict[str, str], variable: str, value: str
) -> None:
    refused = run_process("serve", "--only", "api", env={**env, variable: value}, timeout=START)

    assert refused.returncode == 2, refused.stderr[-2000:]
    assert variable in refused.stderr
    assert "Traceback" not in refused.stderr


OPEN_WARNING = (
    "the API has no tokens: anyone who reaches it may read and change the record "
    "(set AUDITREC_API_TOKENS)"
)


def test_an_api_without_tokens_on_loopback_starts_and_warns_once(
    env: dict[str, str], tmp_path: Path
) -> None:
    # given serve on loopback, no tokens: it starts, open as warned
    log = tmp_path / "serve.log"
    with serving(env, log, "--only", "api") as url:
        assert httpx.get(f"{url}/audits", timeout=5).status_code == 200
        assert httpx.get(f"{url}/audits", timeout=5).status_code == 200

    # then its output warned once, naming the variable, where it listens and who may call
    lines = [line for line in log.read_text().splitlines() if OPEN_WARNING in line]
    assert len(lines) == 1, log.read_text()[-3000:]
    assert "host=127.0.0.1" in lines[0] and "allowed_hosts=" in lines[0]
    assert "warn" in lines[0].lower()
