"""WorkflowsClient against the Workflows simulator over real HTTP.

The client's clock is a :class:`~tests.clock.FakeClock`: 429 pauses, the budget window and
retry backoff run in fake time (nothing really sleeps), while every request is real HTTP.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from consumers.runtime.metrics import REGISTRY
from consumers.workflows.client import (
    InstancePage,
    InstanceStatus,
    Listed,
    ProbeFailure,
    StepState,
    Termination,
    WorkflowsClient,
)
from consumers.workflows.discovery import Discovery, Listing
from consumers.workflows.ratelimit import (
    FLOOR_KEPT,
    ON_DEMAND,
    SHARE_SPENT,
    TERMINATE,
    WATCHDOG,
    SharedRateLimit,
)
from consumers.workflows.simulator.server import STATUSES, SimulatorServer
from consumers.workflows.simulator.state import LISTING
from statemachine.errors import ConfigError, InvalidInput, WorkflowsApiError
from statemachine.events import ProbeFailureReason as R
from statemachine.vocabulary import LISTED_ALIVE_STATUSES
from tests.clock import FakeClock
from tests.pipeline import Pipeline

TOKEN = "cf-secret-token-0123456789"
MakeClient = Callable[..., Awaitable[WorkflowsClient]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_client(simulator: SimulatorServer, clock: FakeClock) -> AsyncIterator[MakeClient]:
    clients: list[WorkflowsClient] = []

    async def make(**options: Any) -> WorkflowsClient:
        settings: dict[str, Any] = {
            "api_url": simulator.url, "account_id": "acc", "workflow": "site-audit",
            "api_token": TOKEN, "timeout": 2.0, "max_retries": 0,
            "clock": clock, "sleep": clock.sleep,
        }  # fmt: skip
        client = WorkflowsClient(**(settings | options))
        await client.start()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.stop()


def failure(answer: InstanceStatus | ProbeFailure) -> ProbeFailure:
    assert isinstance(answer, ProbeFailure), answer
    assert TOKEN not in answer.detail
    return answer


# --- answers about the instance ---------------------------------------------------------------


@pytest.mark.parametrize("status", STATUSES)
async def test_every_status_is_reported(
    simulator: SimulatorServer, make_client: MakeClient, status: str
) -> None:
    simulator.sim.set_instance("i-1", status, end=None)
    client = await make_client()
    assert await client.get_instance("i-1") == InstanceStatus(status, None, None)


async def test_error_object_and_end_are_parsed(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    end = datetime(2026, 11, 30, 8, 5, 1, 250000, tzinfo=UTC)
    error: dict[str, str | None] = {
        "name": "WorkflowTimeoutError",
        "message": "Execution timed out after 900000ms",
    }
    simulator.sim.set_instance("i-1", "errored", error=error, end=end)
    answer = await (await make_client()).get_instance("i-1")
    assert answer == InstanceStatus("errored", error, end)
    assert isinstance(answer, InstanceStatus) and answer.ended_at is not None
    assert answer.ended_at.tzinfo is UTC


async def test_a_string_error_is_kept_as_a_string(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "errored", error="Worker exceeded CPU time limit.")
    answer = await (await make_client()).get_instance("i-1")
    assert isinstance(answer, InstanceStatus)
    assert (answer.status, answer.error) == ("errored", "Worker exceeded CPU time limit.")
    assert answer.ended_at is not None


async def test_unknown_instance_is_not_found(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    answer = await (await make_client()).get_instance("gone")
    assert answer == InstanceStatus("not_found", None, None)
    assert simulator.sim.requests_for("gone") == 1


async def test_unknown_workflow_is_a_probe_failure_not_a_not_found(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    client = await make_client(workflow="no-such-workflow")
    answer = failure(await client.get_instance("i-1"))
    assert (answer.reason, answer.http_status) == (R.WORKFLOW_NOT_FOUND, 404)
    assert "10200" in answer.detail


@pytest.mark.parametrize(
    "instance_id",
    ["*/30 * * * *-1786001400000", "a/b", "with space", "100%2F", "?x=1#y", "..", "ü"],
)
async def test_ids_round_trip_percent_encoded(
    simulator: SimulatorServer, make_client: MakeClient, instance_id: str
) -> None:
    simulator.sim.set_instance(instance_id, "paused")
    simulator.sim.set_instance("a", "complete")  # a prefix of "a/b" must not answer for it
    answer = await (await make_client()).get_instance(instance_id)
    assert answer == InstanceStatus("paused", None, None)
    assert simulator.sim.stats()["by_instance"] == {instance_id: 1}


# --- failures ---------------------------------------------------------------------------------


async def test_latency_above_the_timeout_is_a_timeout(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("slow", "running")
    simulator.sim.set_fault("slow", "latency", latency_ms=600)
    client = await make_client(timeout=0.2)
    t0 = time.monotonic()
    answer = failure(await client.get_instance("slow"))
    assert (answer.reason, answer.http_status) == (R.TIMEOUT, None)
    assert time.monotonic() - t0 >= 0.19  # it waited its timeout (the answer came 0.6 s late)


async def test_latency_below_the_timeout_is_fine(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("slow", "running")
    simulator.sim.set_fault("slow", "latency", latency_ms=50)
    client = await make_client(timeout=0.5)
    assert await client.get_instance("slow") == InstanceStatus("running", None, None)


@pytest.mark.parametrize(
    ("kind", "options", "reason", "http_status"),
    [
        ("server_error", {}, R.SERVER_ERROR, 500),
        ("server_error", {"http_status": 503}, R.SERVER_ERROR, 503),
        ("success_false", {}, R.SERVER_ERROR, 200),
        ("forbidden", {}, R.UNAUTHORIZED, 403),
        ("malformed", {}, R.INVALID_RESPONSE, 200),
        ("custom", {"http_status": 401, "body": "{}"}, R.UNAUTHORIZED, 401),
        ("custom", {"http_status": 408, "body": ""}, R.TIMEOUT, 408),
        ("custom", {"http_status": 404, "body": "Not Found"}, R.INVALID_RESPONSE, 404),
        ("custom", {"http_status": 302, "headers": {"location": "/x"}}, R.INVALID_RESPONSE, 302),
    ],
)
async def test_faults_become_probe_failures(
    simulator: SimulatorServer,
    make_client: MakeClient,
    kind: str,
    options: dict[str, Any],
    reason: R,
    http_status: int,
) -> None:
    simulator.sim.set_instance("f", "running")
    simulator.sim.set_fault("f", kind, **options)  # type: ignore[arg-type]
    answer = failure(await (await make_client()).get_instance("f"))
    assert (answer.reason, answer.http_status) == (reason, http_status)
    assert simulator.sim.requests_for("f") == 1  # max_retries=0


@pytest.mark.parametrize(
    "body",
    [
        '{"success": true, "result": {}}',
        '{"success": true, "result": {"status": "sleeping"}}',
        '{"success": true, "result": {"status": "not_found"}}',
        '{"success": true}',
        '{"result": {"status": "running"}}',
        '{"success": "yes", "result": {"status": "running"}}',
        "[1, 2]",
        '{"success": true, "result": {"status": "complete", "end": "yesterday"}}',
        '{"success": true, "result": {"status": "complete", "end": 1786001400}}',
        '{"success": true, "result": {"status": "errored", "error": 42}}',
        '{"success": true, "result": {"status": "errored", "error": {"name": 1}}}',
    ],
)
async def test_unexpected_shapes_are_invalid_responses(
    simulator: SimulatorServer, make_client: MakeClient, body: str
) -> None:
    simulator.sim.set_fault("f", "custom", http_status=200, body=body)
    answer = failure(await (await make_client()).get_instance("f"))
    assert (answer.reason, answer.http_status) == (R.INVALID_RESPONSE, 200)


async def test_instance_not_found_is_recognised_by_message_alone(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    body = '{"success": false, "errors": [{"code": 1, "message": "x.instance.not_found"}]}'
    simulator.sim.set_fault("f", "custom", http_status=404, body=body)
    assert await (await make_client()).get_instance("f") == InstanceStatus("not_found", None, None)


async def test_unreachable_api_is_a_network_failure(make_client: MakeClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = await make_client(api_url=f"http://127.0.0.1:{port}/client/v4")
    answer = failure(await client.get_instance("i"))
    assert (answer.reason, answer.http_status) == (R.NETWORK, None)


async def test_the_token_is_sent_and_never_shown(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.token = TOKEN
    simulator.sim.set_instance("i", "running")
    assert await (await make_client()).get_instance("i") == InstanceStatus("running", None, None)
    for token in ("wrong-token", None):
        answer = failure(await (await make_client(api_token=token)).get_instance("i"))
        assert (answer.reason, answer.http_status) == (R.UNAUTHORIZED, 403)
    # An API that echoes the token back must not leak it into the detail either.
    simulator.sim.token = None
    echo = f'{{"success": false, "errors": [{{"code": 10001, "message": "bad {TOKEN}"}}]}}'
    simulator.sim.set_fault("i", "custom", http_status=500, body=echo)
    client = await make_client()
    answer = failure(await client.get_instance("i"))
    assert "[redacted]" in answer.detail
    assert TOKEN not in repr(client)


# --- retries ----------------------------------------------------------------------------------


async def test_a_server_error_is_retried_with_growing_backoff_and_every_try_is_budgeted(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    # given an instance whose first two answers are 500s
    simulator.sim.set_instance("f", "running")
    simulator.sim.set_fault("f", "server_error", times=2)
    client = await make_client(max_retries=2, budget=10)

    # when it is asked about
    answer = await client.get_instance("f")

    # then the third try answers, after 0.5 s and 1 s of backoff less up to 25 % jitter
    assert answer == InstanceStatus("running", None, None)
    first, second = clock.sleeps
    assert 0.375 <= first <= 0.5
    assert 0.75 <= second <= 1.0
    assert simulator.sim.requests_for("f") == 3
    assert (await client.budget_left()) == 7


async def test_retries_stop_after_max_retries(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    simulator.sim.set_fault("f", "success_false", retry_after=0)
    client = await make_client(max_retries=2)
    answer = failure(await client.get_instance("f"))
    assert (answer.reason, answer.http_status) == (R.SERVER_ERROR, 200)
    assert simulator.sim.requests_for("f") == 3
    assert clock.sleeps == [0.0, 0.0]  # retry-after: 0 replaced the backoff


async def test_a_short_retry_after_replaces_the_backoff_and_a_long_one_stops_retries(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    simulator.sim.set_instance("f", "running")
    client = await make_client(max_retries=2)
    # up to 2 s is honoured instead of the backoff
    simulator.sim.set_fault("f", "server_error", retry_after=2, times=1)
    assert await client.get_instance("f") == InstanceStatus("running", None, None)
    assert clock.sleeps == [2.0]
    assert simulator.sim.requests_for("f") == 2
    # longer: the answer stands, no retry, no wait
    simulator.sim.set_fault("f", "server_error", retry_after=5)
    assert failure(await client.get_instance("f")).reason == R.SERVER_ERROR
    assert clock.sleeps == [2.0]
    assert simulator.sim.requests_for("f") == 3


async def test_not_found_and_client_errors_are_not_retried(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_fault("bad", "forbidden")
    client = await make_client(max_retries=2)
    await client.get_instance("bad")
    await client.get_instance("gone")
    assert simulator.sim.stats()["by_instance"] == {"bad": 1, "gone": 1}


# --- rate limits ------------------------------------------------------------------------------


async def test_a_429_pauses_all_probing_and_callers_that_can_wait_are_sent_after_it(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    # given a client that is told to back off for 30 s
    simulator.sim.set_instance("other", "running")
    simulator.sim.set_fault("limited", "rate_limit", retry_after=30, times=1)
    client = await make_client(max_retries=2)
    t0 = clock.now
    answer = failure(await client.get_instance("limited"))
    assert (answer.reason, answer.http_status) == (R.RATE_LIMITED, 429)
    assert await client.paused_for() == 30

    # when callers that cannot wait that long ask during the pause, up to its last moment
    for instance_id, seconds_later in (("other", 0.0), ("limited", 15.0), ("other", 29.9)):
        clock.now = t0 + seconds_later
        paused = failure(await client.get_instance(instance_id, wait=0.05))

        # then each is answered rate_limited at once, without sending or waiting
        assert (paused.reason, paused.http_status) == (R.RATE_LIMITED, None)
        assert f"paused by a Cloudflare 429 for {30 - seconds_later:.1f}s more" in paused.detail
    assert simulator.sim.stats()["total"] == 1
    assert clock.sleeps == []

    # and a caller whose bound outlasts the pause waits it out, then is answered
    clock.now = t0 + 20
    assert await client.get_instance("other", wait=15) == InstanceStatus("running", None, None)
    assert clock.sleeps == [pytest.approx(10)]
    assert await client.paused_for() is None
    assert simulator.sim.stats()["total"] == 2


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"ratelimit": '"default";r=0;t=30'}, 30),
        ({"retry-after": "__date__"}, 120),
        ({"retry-after": "7", "ratelimit": '"default";r=0;t=30'}, 7),
        ({"x-ratelimit-reset": "45"}, 45),
        ({}, 60),
        ({"retry-after": "0"}, 1),  # at least a second
        ({"retry-after": "86400"}, 900),  # at most 15 minutes
    ],
)
async def test_the_pause_length_comes_from_the_429_headers(
    simulator: SimulatorServer,
    make_client: MakeClient,
    clock: FakeClock,
    headers: dict[str, str],
    expected: float,
) -> None:
    tolerance = 0.0
    if headers.get("retry-after") == "__date__":  # an HTTP date: wall clock, whole seconds
        headers = {"retry-after": formatdate(time.time() + 120, usegmt=True)}
        tolerance = 1.5
    simulator.sim.set_fault("f", "rate_limit", headers=headers)
    client = await make_client()
    assert failure(await client.get_instance("f")).reason == R.RATE_LIMITED
    assert await client.paused_for() == pytest.approx(expected, abs=tolerance)


async def test_an_exhausted_budget_refuses_without_sending_when_no_slot_frees_in_time(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    # given 3 requests per minute, all used, and callers that wait at most 2 s
    simulator.sim.set_instance("i", "running")
    client = await make_client(budget=3, budget_window=60, timeout=2.0)
    for _ in range(3):
        assert isinstance(await client.get_instance("i"), InstanceStatus)
    assert (await client.budget_left()) == 0

    # when one more call comes
    answer = failure(await client.get_instance("i"))

    # then it is refused at once, without sending
    assert (answer.reason, answer.http_status, answer.detail) == (
        R.RATE_LIMITED, None, "local request budget exhausted",
    )  # fmt: skip
    assert clock.sleeps == []
    assert simulator.sim.requests_for("i") == 3
    # and the window frees the whole budget a minute after it was used
    clock.advance(59.9)
    assert (await client.budget_left()) == 0
    clock.advance(0.1)
    assert (await client.budget_left()) == 3
    assert await client.get_instance("i") == InstanceStatus("running", None, None)


@pytest.mark.parametrize(("timeout", "answered"), [(700.0, 5), (500.0, 4)])
async def test_a_caller_waits_for_the_budget_window_as_long_as_its_timeout_allows(
    simulator: SimulatorServer,
    make_client: MakeClient,
    clock: FakeClock,
    timeout: float,
    answered: int,
) -> None:
    # given 2 requests per 5 minutes
    simulator.sim.set_instance("i", "running")
    client = await make_client(budget=2, budget_window=300, timeout=timeout)
    t0 = clock.now

    # when 5 callers ask at once
    answers = await asyncio.gather(*(client.get_instance("i") for _ in range(5)))

    # then 2 are sent now, 2 when the window frees them (5 min), 1 after 10 min, when the
    # caller may wait that long; otherwise it is refused without sending
    ok = [a for a in answers if isinstance(a, InstanceStatus)]
    assert len(ok) == answered == simulator.sim.requests_for("i")
    refused = [failure(a) for a in answers if isinstance(a, ProbeFailure)]
    assert [r.detail for r in refused] == ["local request budget exhausted"] * (5 - answered)
    assert clock.now - t0 == (600 if answered == 5 else 300)


# --- concurrency and lifecycle ----------------------------------------------------------------


async def test_concurrency_is_bounded(simulator: SimulatorServer, make_client: MakeClient) -> None:
    for n in range(20):
        simulator.sim.set_instance(f"i-{n}", "running")
    simulator.sim.latency_ms = 200
    client = await make_client(concurrency=4)
    t0 = time.monotonic()
    answers = await asyncio.gather(*(client.get_instance(f"i-{n}") for n in range(20)))
    elapsed = time.monotonic() - t0
    assert answers == [InstanceStatus("running", None, None)] * 20
    assert elapsed >= 1.0  # 20 answers of 0.2 s, four at a time
    assert simulator.sim.stats()["max_in_flight"] == 4


async def test_start_and_stop_are_idempotent(simulator: SimulatorServer) -> None:
    simulator.sim.set_instance("i", "queued")
    client = WorkflowsClient(api_url=simulator.url, account_id="a", workflow="site-audit",
                             api_token=None)  # fmt: skip
    with pytest.raises(WorkflowsApiError, match="not started"):
        await client.get_instance("i")
    await client.start()
    await client.start()
    assert await client.get_instance("i") == InstanceStatus("queued", None, None)
    await client.stop()
    await client.stop()
    with pytest.raises(WorkflowsApiError):
        await client.get_instance("i")
    async with client as same:
        assert same is client
        assert await client.get_instance("i") == InstanceStatus("queued", None, None)
    with pytest.raises(InvalidInput):
        await client.get_instance("")


async def test_a_given_transport_is_used(simulator: SimulatorServer) -> None:
    simulator.sim.set_instance("i/x", "waiting")
    transport = httpx.ASGITransport(app=simulator.app)
    async with WorkflowsClient(api_url="http://sim/client/v4", account_id="a",
                               workflow="site-audit", api_token=None,
                               transport=transport) as client:  # fmt: skip
        assert await client.get_instance("i/x") == InstanceStatus("waiting", None, None)
    assert simulator.sim.requests_for("i/x") == 1


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        WorkflowsClient(api_url="http://x", account_id="a", workflow="w", api_token=None,
                        concurrency=0)  # fmt: skip


# --- one budget for every process probing an account ---------------------------------------


@pytest.fixture
def budget_store(pipeline: Pipeline) -> Any:
    """The store's shared budget, on each backend pair."""
    return pipeline.store.budget


def shared(
    store: Any,
    clock: FakeClock,
    budget: int = 3,
    shares: dict[str, float] | None = None,
    floor: float = 0.0,
) -> SharedRateLimit:
    wall = datetime(2026, 12, 1, tzinfo=UTC)
    return SharedRateLimit(
        store,
        "acc",
        budget,
        300.0,
        shares=shares,
        floor=floor,
        clock=lambda: wall + timedelta(seconds=clock.now),
        sleep=clock.sleep,
    )


async def test_processes_probing_one_account_share_one_budget(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock, budget_store: Any
) -> None:
    # given two processes' clients on one account, with 3 requests per 5 minutes between them
    simulator.sim.set_instance("i", "running")
    one = await make_client(limiter=shared(budget_store, clock))
    two = await make_client(limiter=shared(budget_store, clock))

    # when both keep asking
    answers = [await c.get_instance("i", wait=0) for c in (one, two, one, two, one)]

    # then the account sees 3 requests in the window, not 3 per process
    assert [isinstance(a, InstanceStatus) for a in answers] == [True, True, True, False, False]
    assert simulator.sim.requests_for("i") == 3
    assert await two.budget_left() == 0
    assert "shared by every process" in failure(answers[3]).detail


async def test_no_spender_but_the_watchdog_takes_its_floor_in_any_process(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock, budget_store: Any
) -> None:
    # given two processes on one account, 10 requests per window, 0.3 kept for the watchdog,
    # status reads allowed the whole window by their share
    simulator.sim.set_instance("i", "running")
    one, two = [
        await make_client(
            limiter=shared(budget_store, clock, budget=10, shares={ON_DEMAND: 1.0}, floor=0.3)
        )
        for _ in range(2)
    ]

    # when reads and manual probes ask far past the rest of the window, then the watchdog asks
    reads = [await c.get_instance("i", wait=0, spender=ON_DEMAND) for c in (one, two) * 3]
    manual = [await c.get_instance("i", wait=0, spender="manual") for c in (one, two)]
    watchdog = [await c.get_instance("i", wait=0, spender=WATCHDOG) for c in (two, one) * 2]

    # then the others took 7, the reads were held to them (their share capped at 1 - floor),
    # and the watchdog had its 3
    assert sum(isinstance(a, InstanceStatus) for a in reads) == 6
    assert sum(isinstance(a, InstanceStatus) for a in manual) == 1
    held = failure(manual[-1])
    assert held.reason is R.RATE_LIMITED and FLOOR_KEPT in held.detail
    assert "3 of 10" in held.detail
    assert [isinstance(a, InstanceStatus) for a in watchdog] == [True] * 3 + [False]
    assert simulator.sim.requests_for("i") == 10


def slots(spender: str, result: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "auditrec_probe_budget_slots_total", {"spender": spender, "result": result}
        )
        or 0.0
    )


async def test_status_reads_spend_at_most_their_share_and_the_watchdog_keeps_the_rest(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock, budget_store: Any
) -> None:
    # given two processes on one account, 10 requests per window, status reads held to 0.5
    simulator.sim.set_instance("i", "running")
    shares = {ON_DEMAND: 0.5}
    one = await make_client(limiter=shared(budget_store, clock, budget=10, shares=shares))
    two = await make_client(limiter=shared(budget_store, clock, budget=10, shares=shares))
    before = {(s, r): slots(s, r) for s in (ON_DEMAND, WATCHDOG) for r in ("spent", "refused")}

    # when both take reads' slots far past the share, then the watchdog asks
    reads = [await c.get_instance("i", wait=0, spender=ON_DEMAND) for c in (one, two) * 6]
    watchdog = [await c.get_instance("i", wait=0, spender=WATCHDOG) for c in (two, one) * 3]

    # then 5 reads went out across both processes, the rest refused for the share without a
    # request, and the watchdog had the other 5 slots
    assert sum(isinstance(a, InstanceStatus) for a in reads) == 5
    refused = failure(reads[-1])
    assert refused.reason is R.RATE_LIMITED and SHARE_SPENT in refused.detail
    assert [isinstance(a, InstanceStatus) for a in watchdog] == [True] * 5 + [False]
    assert "shared by every process" in failure(watchdog[-1]).detail
    assert simulator.sim.requests_for("i") == 10
    # and the metric counts by spender
    assert slots(ON_DEMAND, "spent") - before[(ON_DEMAND, "spent")] == 5
    assert slots(ON_DEMAND, "refused") - before[(ON_DEMAND, "refused")] == 7
    assert slots(WATCHDOG, "spent") - before[(WATCHDOG, "spent")] == 5
    assert slots(WATCHDOG, "refused") - before[(WATCHDOG, "refused")] == 1


async def test_a_429_seen_by_one_process_pauses_the_others(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock, budget_store: Any
) -> None:
    # given one process told by Cloudflare to back off for 20 s
    simulator.sim.set_instance("i", "running")
    simulator.sim.set_fault("limited", "rate_limit", retry_after=20, times=1)
    one = await make_client(limiter=shared(budget_store, clock, budget=100))
    two = await make_client(limiter=shared(budget_store, clock, budget=100))
    assert failure(await one.get_instance("limited")).reason == R.RATE_LIMITED

    # when the other process asks: at once, then with a bound that outlasts the pause
    held = failure(await two.get_instance("i", wait=1))
    answered = await two.get_instance("i", wait=30)

    # then it sends nothing during the pause, and is answered once the pause ends
    assert (held.reason, held.http_status) == (R.RATE_LIMITED, None)
    assert answered == InstanceStatus("running", None, None)
    assert simulator.sim.requests_for("i") == 1
    assert sum(clock.sleeps) == pytest.approx(20, abs=0.01)


# --- the instance listing ----------------------------------------------------------------------


async def test_a_listing_pages_by_status_since_a_date_with_its_cursor(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    t0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
    for i in range(5):
        simulator.sim.set_instance(f"run-{i}", "running", queued=t0 + timedelta(minutes=i))
    simulator.sim.set_instance("old", "running", queued=t0 - timedelta(days=1))
    simulator.sim.set_instance("done", "complete", queued=t0)
    client = await make_client()

    first = await client.list_instances(status="running", date_start=t0, per_page=3)
    assert isinstance(first, InstancePage), first
    assert [(i.id, i.status) for i in first.items] == [
        ("run-0", "running"), ("run-1", "running"), ("run-2", "running")
    ]  # fmt: skip
    assert first.cursor is not None
    second = await client.list_instances(
        status="running", date_start=t0, per_page=3, cursor=first.cursor
    )
    minute = timedelta(minutes=1)
    assert second == InstancePage(
        [Listed("run-3", "running", t0 + 3 * minute), Listed("run-4", "running", t0 + 4 * minute)],
        None,
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"success": true, "result": {"id": "x"}}', "not a list"),
        ('{"success": true, "result": [{"status": "running"}]}', "no string id"),
        ('{"success": true, "result": [], "result_info": {"cursor": 7}}', "cursor"),
    ],
)
async def test_a_listing_that_does_not_read_is_an_invalid_response(
    simulator: SimulatorServer, make_client: MakeClient, body: str, problem: str
) -> None:
    simulator.sim.set_fault(LISTING, "custom", http_status=200, body=body)
    answer = await (await make_client()).list_instances()
    assert isinstance(answer, ProbeFailure)
    assert answer.reason is R.INVALID_RESPONSE
    assert problem in answer.detail


async def test_listing_pages_take_the_budget_like_single_gets(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "running")
    client = await make_client(budget=2, budget_window=60.0)
    assert isinstance(await client.list_instances(), InstancePage)
    assert isinstance(await client.get_instance("i-1"), InstanceStatus)
    refused = failure(await client.list_instances(wait=0))
    assert refused.reason is R.RATE_LIMITED
    assert simulator.sim.stats()["total"] == 2


async def test_discovery_lists_the_alive_statuses_and_leaves_the_rest(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    t0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
    for status in STATUSES:
        simulator.sim.set_instance(f"i-{status}", status, queued=t0)
    discovery = Discovery(await make_client(), limit=100, per_page=2)

    listing = await discovery.alive_since(t0, within=5.0)

    assert isinstance(listing, Listing), listing
    assert listing.alive == {f"i-{s}": s for s in LISTED_ALIVE_STATUSES}
    assert listing.requests == simulator.sim.requests_for(LISTING) == len(LISTED_ALIVE_STATUSES)
    assert listing.created == {f"i-{s}": t0 for s in LISTED_ALIVE_STATUSES}
    assert listing.workflow == "site-audit"


async def test_discovery_lists_the_workflow_it_is_asked_for(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    t0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
    simulator.sim.set_instance("a-1", "running", queued=t0)
    simulator.sim.set_instance("b-1", "running", queued=t0, workflow="crawl")
    discovery = Discovery(await make_client(), limit=100)

    listing = await discovery.alive_since(t0, within=5.0, workflow="crawl")

    assert isinstance(listing, Listing), listing
    assert (listing.alive, listing.workflow) == ({"b-1": "running"}, "crawl")
    assert listing.created == {"b-1": t0}


async def test_discovery_gives_up_on_a_cursor_that_comes_back(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    page = '{"success": true, "result": [{"id": "i", "status": "running"}], "result_info": {"cursor": "again"}}'
    simulator.sim.set_fault(LISTING, "custom", http_status=200, body=page)
    discovery = Discovery(await make_client(), limit=100)

    answer = await discovery.alive_since(datetime(2026, 11, 30, tzinfo=UTC), within=5.0)

    assert isinstance(answer, ProbeFailure)
    assert "came back" in answer.detail
    assert simulator.sim.requests_for(LISTING) == 2


async def test_discovery_answers_why_a_listing_is_unavailable(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.listing = False
    discovery = Discovery(await make_client(), limit=100)

    answer = await discovery.alive_since(datetime(2026, 11, 30, tzinfo=UTC), within=5.0)

    assert isinstance(answer, ProbeFailure)
    assert (answer.reason, answer.http_status) == (R.INVALID_RESPONSE, 404)


async def test_room_says_what_a_spender_could_take_now_as_take_would_grant_it(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock, budget_store: Any
) -> None:
    # given 10 requests per window, 0.3 kept for the watchdog, status reads capped at 0.5
    simulator.sim.set_instance("i", "running")
    client = await make_client(
        limiter=shared(budget_store, clock, budget=10, shares={ON_DEMAND: 0.5}, floor=0.3)
    )
    assert (await client.room("subscription"), await client.room(ON_DEMAND)) == (7, 5)
    assert await client.room(WATCHDOG) == 10

    # when the reads take 2 and the watchdog 1 of its floor
    for spender in (ON_DEMAND, ON_DEMAND, WATCHDOG):
        assert isinstance(await client.get_instance("i", wait=0, spender=spender), InstanceStatus)

    # then the others have 10 - 3 taken - 2 still kept for the watchdog; the reads their share
    assert (await client.room("subscription"), await client.room(ON_DEMAND)) == (5, 3)
    took = [await client.get_instance("i", wait=0, spender="subscription") for _ in range(6)]
    assert sum(isinstance(a, InstanceStatus) for a in took) == 5  # what room said, no more
    assert (await client.room("subscription"), await client.room(WATCHDOG)) == (0, 2)


# --- the step an instance is at ------------------------------------------------------------------


async def test_a_running_step_that_keeps_failing_is_read_as_retrying(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    # given an instance whose step "fetch" failed 3 times and runs a 4th attempt
    began = datetime(2026, 11, 30, 8, tzinfo=UTC)
    error = {"name": "Error", "message": "fetch failed"}
    async with httpx.AsyncClient(base_url=simulator.root_url) as http:
        r = await http.put(
            "/_sim/workflows/site-audit/instances/i-1",
            json={"status": "running", "step": {"name": "fetch", "attempts": 4, "error": error,
                                                "started_at": began.isoformat()}},
        )  # fmt: skip
    assert r.status_code == 200, r.text
    client = await make_client()

    # when it is read with its steps
    answer = await client.get_instance("i-1", steps=True)

    # then the step is the running one, retrying, with the failures' error
    assert answer == InstanceStatus(
        "running", None, None, StepState("fetch", began, 4, retrying=True, error=error)
    )
    assert isinstance(answer, InstanceStatus) and answer.step is not None
    assert answer.step.as_dict() == {
        "name": "fetch", "started_at": "2026-11-30T08:00:00+00:00", "attempts": 4,
        "retrying": True, "error": error,
    }  # fmt: skip
    # and without steps nothing is asked for but the status
    assert await client.get_instance("i-1") == InstanceStatus("running", None, None)


async def test_the_step_is_the_running_one_and_other_entries_are_skipped(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    t = "2026-11-30T08:00:00.000Z"
    steps = [
        {"type": "step", "name": "crawl", "start": t, "end": t, "success": True,
         "attempts": [{"start": t, "end": t, "success": True, "error": None}]},
        {"type": "step", "name": "score", "start": t, "end": None, "success": None,
         "attempts": [{"start": t, "end": t, "success": False, "error": "Worker exceeded CPU"},
                      {"start": t, "end": None, "success": None, "error": None}]},
        {"type": "waitForEvent", "name": "approval", "start": t, "end": None},
    ]  # fmt: skip
    simulator.sim.set_instance("i-1", "running", steps=steps)
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert isinstance(answer, InstanceStatus)
    assert answer.step == StepState(
        "score", datetime(2026, 11, 30, 8, tzinfo=UTC), 2, True, "Worker exceeded CPU"
    )


async def test_a_sleeping_instance_reports_its_last_step_not_retrying(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    error = {"name": "Error", "message": "timeout"}
    simulator.sim.set_instance(
        "i-1", "waiting", step={"name": "crawl", "attempts": 2, "error": error}
    )
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert isinstance(answer, InstanceStatus) and answer.step is not None
    assert answer.status == "waiting"
    assert (answer.step.name, answer.step.attempts, answer.step.retrying) == ("crawl", 2, False)
    assert answer.step.error is None  # it succeeded in the end
    steps = simulator.sim.get_instance("i-1")["steps"]  # type: ignore[index]
    assert [s["type"] for s in steps] == ["step", "sleep"]


async def test_an_instance_without_steps_has_no_step(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "queued")
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert answer == InstanceStatus("queued", None, None, None)


@pytest.mark.parametrize(
    "steps",
    [
        [{"type": "step", "name": 7, "attempts": []}],
        [{"type": "step", "name": "x", "attempts": "many"}],
        [{"type": "step", "name": "x", "attempts": [1, 2]}],
        [{"type": "sleep", "name": "nap"}],
        ["step"],
    ],
)
async def test_malformed_steps_leave_no_step_and_the_status_still_reads(
    simulator: SimulatorServer, make_client: MakeClient, steps: list[Any]
) -> None:
    simulator.sim.set_instance("i-1", "running", steps=steps)
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert answer == InstanceStatus("running", None, None, None)


async def test_steps_that_are_not_a_list_leave_no_step(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    body = '{"success": true, "errors": [], "result": {"status": "running", "steps": {"a": 1}}}'
    simulator.sim.set_fault("i-1", "custom", http_status=200, body=body)
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert answer == InstanceStatus("running", None, None, None)


@pytest.mark.parametrize(
    ("error", "read"),
    [
        (
            {"name": "Error", "message": "boom", "stack": "at x"},
            {"name": "Error", "message": "boom"},
        ),
        ({"message": "no name"}, {"name": None, "message": "no name"}),
        ("plain words", "plain words"),
    ],
)
async def test_errors_are_read_as_name_and_message_or_a_string(
    simulator: SimulatorServer, make_client: MakeClient, error: Any, read: Any
) -> None:
    simulator.sim.set_instance("i-1", "errored", error=error)
    answer = await (await make_client()).get_instance("i-1")
    assert isinstance(answer, InstanceStatus)
    assert (answer.status, answer.error) == ("errored", read)


async def test_rolling_back_is_read_as_such(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "rollingBack")
    answer = await (await make_client()).get_instance("i-1", steps=True)
    assert answer == InstanceStatus("rollingBack", None, None)


# --- terminating -------------------------------------------------------------------------------


async def test_terminate_terminates_a_running_instance_once(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "running")
    client = await make_client()

    assert await client.terminate("i-1") == Termination("terminated", "terminated")

    answer = await client.get_instance("i-1")
    assert isinstance(answer, InstanceStatus) and answer.ended_at is not None
    assert answer.status == "terminated"
    view = simulator.sim.instance_view("i-1")
    assert view is not None and (view["terminations"], view["patches"]) == (1, {"terminate": 1})


@pytest.mark.parametrize("status", ["complete", "errored", "terminated"])
async def test_terminating_an_ended_instance_is_already_ended_and_changes_nothing(
    simulator: SimulatorServer, make_client: MakeClient, status: str
) -> None:
    simulator.sim.set_instance("i-1", status)
    before = simulator.sim.get_instance("i-1")
    client = await make_client(max_retries=2)

    assert await client.terminate("i-1") == Termination("already_ended", status)

    assert simulator.sim.get_instance("i-1") == before
    assert simulator.sim.requests_for("i-1") == 1  # a 409 is not retried
    view = simulator.sim.instance_view("i-1")
    assert view is not None and (view["terminations"], view["patches"]) == (0, {"terminate": 1})


async def test_terminating_an_unknown_or_deleted_instance_is_not_found(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "running")
    assert simulator.sim.delete_instance("i-1")
    client = await make_client()
    assert await client.terminate("nope") == Termination("not_found")
    assert await client.terminate("i-1") == Termination("not_found")
    assert await client.get_instance("i-1") == InstanceStatus("not_found", None, None)


async def test_a_terminate_answered_503_is_retried_once(
    simulator: SimulatorServer, make_client: MakeClient, clock: FakeClock
) -> None:
    simulator.sim.set_instance("i-1", "running")
    simulator.sim.set_fault("i-1", "server_error", http_status=503, times=1)
    client = await make_client(max_retries=2, budget=10)

    assert await client.terminate("i-1", spender=TERMINATE) == Termination(
        "terminated", "terminated"
    )

    assert simulator.sim.requests_for("i-1") == 2
    assert len(clock.sleeps) == 1
    assert await client.budget_left() == 8  # every try took a slot
    view = simulator.sim.instance_view("i-1")
    assert view is not None and view["terminations"] == 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("forbidden", R.UNAUTHORIZED), ("rate_limit", R.RATE_LIMITED)],
)
async def test_a_refused_terminate_is_a_probe_failure(
    simulator: SimulatorServer, make_client: MakeClient, fault: Any, reason: R
) -> None:
    simulator.sim.set_instance("i-1", "running")
    simulator.sim.set_fault("i-1", fault, times=1)
    answer = await (await make_client(max_retries=2)).terminate("i-1", wait=0)
    assert isinstance(answer, ProbeFailure) and answer.reason is reason
    assert simulator.sim.get_instance("i-1")["status"] == "running"  # type: ignore[index]


# --- several workflows ---------------------------------------------------------------------------


async def test_each_call_reaches_the_workflow_it_names(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    # given an instance of workflow "crawl" and a client whose default is "site-audit"
    simulator.sim.set_instance("b-1", "running", workflow="crawl")
    client = await make_client()

    # then it is not found in the default workflow, and found in its own
    assert await client.get_instance("b-1") == InstanceStatus("not_found", None, None)
    assert await client.get_instance("b-1", workflow="crawl") == InstanceStatus(
        "running", None, None
    )
    assert await client.terminate("b-1") == Termination("not_found")
    assert await client.terminate("b-1", workflow="crawl") == Termination(
        "terminated", "terminated"
    )
    page = await client.list_instances(workflow="crawl")
    assert isinstance(page, InstancePage)
    assert [(i.id, i.status) for i in page.items] == [("b-1", "terminated")]
    assert await client.check(workflow="crawl") is None
    unknown = failure(await client.get_instance("b-1", workflow="nope"))
    assert unknown.reason is R.WORKFLOW_NOT_FOUND


async def test_a_deleted_instance_is_not_found_and_no_longer_listed(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "running")
    simulator.sim.set_instance("i-2", "running")
    client = await make_client()
    async with httpx.AsyncClient(base_url=simulator.root_url) as http:
        deleted = await http.delete("/_sim/workflows/site-audit/instances/i-1")
        assert deleted.status_code == 204

    assert await client.get_instance("i-1") == InstanceStatus("not_found", None, None)
    page = await client.list_instances()
    assert isinstance(page, InstancePage)
    assert [i.id for i in page.items] == ["i-2"]


async def test_a_workflow_named_per_call_is_one_percent_encoded_segment(
    simulator: SimulatorServer, make_client: MakeClient
) -> None:
    simulator.sim.set_instance("i-1", "paused", workflow="team/crawl v2")
    simulator.sim.set_instance("i-1", "running", workflow="team")
    client = await make_client()
    answer = await client.get_instance("i-1", workflow="team/crawl v2")
    assert answer == InstanceStatus("paused", None, None)
    with pytest.raises(InvalidInput):
        await client.get_instance("i-1", workflow="")
