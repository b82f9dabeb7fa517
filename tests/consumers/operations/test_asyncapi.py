"""The AsyncAPI document is valid for the AsyncAPI parser (npm ``@asyncapi/parser``, run with
the machine's Node from ``scripts/asyncapi``) and true to the models and the codec: every
event type is a message on its topic with the models' schema, the codec's key and headers,
valid examples, and a sender and receivers."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from consumers.eventlog.codec import dead_letter, encode
from consumers.eventlog.port import Record, Topics
from consumers.operations.contracts.asyncapi import CHANNEL_KEYS, asyncapi_document
from consumers.operations.contracts.catalog import PUBLIC_TYPES, topic_of
from consumers.operations.contracts.deadletter import DeadLetter
from consumers.operations.contracts.examples import EXAMPLES
from consumers.operations.contracts.roles import ROLES
from statemachine.events import EVENT_TYPES, LIFECYCLE_TYPES

ROOT = Path(__file__).resolve().parents[3]
VALIDATOR = ROOT / "scripts" / "asyncapi"
AUDITREC = str(Path(sys.executable).with_name("auditrec"))
TOPICS = Topics("shop", "shop-eu")


@pytest.fixture(scope="session")
def node() -> str:
    """Node with ``@asyncapi/parser`` installed from the lock file (``npm ci``, once)."""
    found = shutil.which("node")
    if found is None or shutil.which("npm") is None:
        if os.environ.get("AUDITREC_REQUIRE_SERVICES") == "1":
            pytest.fail("node and npm are needed to validate the AsyncAPI document")
        pytest.skip("node and npm are not installed")
    # one install for all the test processes: the others wait for it
    with (VALIDATOR / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (VALIDATOR / "node_modules" / "@asyncapi" / "parser").is_dir():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=VALIDATOR,
                check=True,
                capture_output=True,
                timeout=600,
            )
    return found


def parse(node: str, document: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "asyncapi.json"
    path.write_text(json.dumps(document))
    done = subprocess.run(
        [node, str(VALIDATOR / "validate.mjs"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_parser_finds_the_document_valid_without_a_warning(node: str, tmp_path: Path) -> None:
    document = asyncapi_document(TOPICS, kafka_servers=("k1:9092", "k2:9092"))
    parsed = parse(node, document, tmp_path)
    problems = [d for d in parsed["diagnostics"] if d["severity"] <= 1]
    assert parsed["valid"] and problems == []
    assert parsed["version"].startswith("3.")
    assert set(parsed["messages"]) == {*EVENT_TYPES, "DeadLetter"}
    assert set(parsed["channels"]) == set(TOPICS.all())
    by_id = {op["id"]: op for op in parsed["operations"]}
    assert set(by_id["publishers_send_ingest"]["messages"]) == set(PUBLIC_TYPES)
    assert "publishers_send_lifecycle" not in by_id
    assert set(by_id["ingest_send_lifecycle"]["messages"]) == set(PUBLIC_TYPES)
    assert by_id["probe_receive_probeRequests"]["channels"] == [TOPICS.probe_requests]


def test_the_parser_rejects_a_document_whose_schema_is_broken(node: str, tmp_path: Path) -> None:
    # The check can fail: a payload schema with a type that does not exist is an error.
    document = asyncapi_document(TOPICS)
    document["components"]["schemas"]["AuditStarted"]["properties"]["audit_id"]["type"] = "text"
    parsed = parse(node, document, tmp_path)
    assert not parsed["valid"]
    assert any(d["severity"] == 0 and "audit_id" in d["path"] for d in parsed["diagnostics"]), (
        parsed["diagnostics"]
    )


def _bare(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _bare(v)
            for k, v in node.items()
            if k not in ("description", "examples", "title", "required")
        }
    if isinstance(node, list):
        return [_bare(v) for v in node]
    return node


def test_every_event_type_is_a_message_with_the_models_schema() -> None:
    document = asyncapi_document(TOPICS)
    schemas = document["components"]["schemas"]
    for name, cls in EVENT_TYPES.items():
        model = cls.model_json_schema(ref_template="#/components/schemas/{model}")
        defs = model.pop("$defs", {})
        assert _bare(schemas[name]) == _bare(model), name
        assert set(schemas[name]["required"]) == {"type", *model["required"]}
        for model_name, body in defs.items():
            assert _bare(schemas[model_name]) == _bare(body), model_name
        channel = document["channels"][CHANNEL_KEYS[topic_of(name)]]
        assert channel["messages"][name] == {"$ref": f"#/components/messages/{name}"}
    lifecycle = document["channels"]["lifecycle"]["messages"]
    assert set(lifecycle) == set(LIFECYCLE_TYPES)
    assert set(document["channels"]["probeRequests"]["messages"]) == {"ProbeRequested"}
    assert document["channels"]["lifecycle"]["address"] == "shop.lifecycle.v1"


def test_keys_and_headers_are_the_codecs() -> None:
    document = asyncapi_document(TOPICS)
    for name, cls in EVENT_TYPES.items():
        message = document["components"]["messages"][name]
        record = encode(TOPICS.lifecycle, cls.model_validate(EXAMPLES[name]))
        headers = {k: v.decode() for k, v in record.headers}
        assert message["examples"][0]["headers"] == headers
        check = jsonschema.Draft202012Validator(message["headers"])
        assert list(check.iter_errors(headers)) == []
        assert not check.is_valid({**headers, "event-type": "Other"})
        key = message["bindings"]["kafka"]["key"]
        assert record.key == EXAMPLES[name]["audit_id"]
        assert jsonschema.Draft202012Validator(key).is_valid(record.key)
        assert not jsonschema.Draft202012Validator(key).is_valid("a b")


def _validator(document: dict[str, Any], model: str) -> jsonschema.Draft202012Validator:
    root = {"$ref": f"#/components/schemas/{model}", "components": document["components"]}
    return jsonschema.Draft202012Validator(
        root, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_every_example_is_valid_against_its_payload_schema() -> None:
    document = asyncapi_document(TOPICS)
    for name, message in document["components"]["messages"].items():
        check = _validator(document, message["payload"]["$ref"].rsplit("/", 1)[-1])
        assert message.get("examples"), f"{name}: no example in contracts/examples.py"
        for example in message["examples"]:
            assert list(check.iter_errors(example["payload"])) == [], name
        broken = {**message["examples"][0]["payload"], "unexpected": 1}
        assert not check.is_valid(broken), name


def test_the_dead_letter_schema_is_what_the_codec_writes() -> None:
    document = asyncapi_document(TOPICS)
    check = _validator(document, "DeadLetter")
    for value in (b'{"type": "AuditStarted"}', b"\xff\xfe not utf-8"):
        record = Record(TOPICS.lifecycle, 1, 7, "a-1", value)
        out = dead_letter(TOPICS, record, "shop-eu-projector", "not valid JSON")
        body = json.loads(out.value)
        assert list(check.iter_errors(body)) == []
        assert DeadLetter.model_validate(body).source_offset == 7
        assert dict(out.headers) == {
            "consumer": b"shop-eu-projector",
            "dead-letter-of": f"{TOPICS.lifecycle}/1@7".encode(),
        }
        assert out.key == f"{TOPICS.lifecycle}:1:7"


def test_every_message_has_a_sender_and_every_event_a_receiver() -> None:
    document = asyncapi_document(TOPICS)
    sent: set[str] = set()
    received: set[str] = set()
    for operation in document["operations"].values():
        names = {ref["$ref"].rsplit("/", 1)[-1] for ref in operation["messages"]}
        (sent if operation["action"] == "send" else received).update(names)
    # (a type nobody sends is missing from consumers/operations/contracts/roles.py)
    assert sent == {*EVENT_TYPES, "DeadLetter"}
    assert received == set(EVENT_TYPES)
    groups = {
        op["bindings"]["kafka"]["groupId"]["enum"][0]
        for op in document["operations"].values()
        if op["action"] == "receive"
    }
    receivers = {r.name for r in ROLES for u in r.uses if u.action == "receive"}
    assert groups == {TOPICS.group(name) for name in receivers}
    assert {"shop-eu-projector", "shop-eu-reconciler", "shop-eu-probe"} <= groups


def test_the_cli_prints_and_writes_the_configured_document(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update(AUDITREC_TOPIC_PREFIX="shop", AUDITREC_EVENT_LOG_URL="kafka://k1:9092,k2")
    out = tmp_path / "contract" / "asyncapi.json"
    done = subprocess.run(
        [AUDITREC, "asyncapi", "--out", str(out)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document == asyncapi_document(Topics("shop"), kafka_servers=("k1:9092", "k2:9092"))
    printed = subprocess.run([AUDITREC, "asyncapi"], env=env, capture_output=True, text=True)
    assert json.loads(printed.stdout) == document
