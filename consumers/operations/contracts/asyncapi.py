"""The AsyncAPI 3 document of auditrec's topics, generated from the models
(``auditrec asyncapi``, ``GET /asyncapi.json``).

Channels are the four topics under the configured prefix (``<prefix>.lifecycle.v1``,
``.probe-requests.v1``, ``.dead-letter.v1``, and ``.ingest.v1`` where Kafka publishers
write); each event type is a message with its payload schema (the JSON Schema of
:mod:`.schemas`, its nested models under ``components/schemas``), its Kafka key (the audit
id) and headers (``event-type``, ``schema-version``) as the codec writes them, and its
examples; the operations say which role sends or receives what (:mod:`.roles`), with the
Kafka consumer group of each receiving component.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Final

from consumers.eventlog.codec import encode
from consumers.eventlog.kafka.clients import bootstrap_servers
from consumers.eventlog.port import Topics
from consumers.operations.contracts.catalog import is_public, schema_id, topic_of
from consumers.operations.contracts.deadletter import EXAMPLE as DEAD_LETTER_EXAMPLE
from consumers.operations.contracts.deadletter import DeadLetter
from consumers.operations.contracts.examples import EXAMPLES
from consumers.operations.contracts.roles import ROLES, Channel
from consumers.operations.contracts.schemas import envelope_schema
from consumers.runtime.settings import Settings
from statemachine.events import EVENT_TYPES
from statemachine.upcasting import CURRENT_VERSION
from statemachine.vocabulary import AUDIT_ID_PATTERN

__all__ = ["ASYNCAPI_VERSION", "CHANNEL_KEYS", "asyncapi_document", "asyncapi_for"]

ASYNCAPI_VERSION: Final = "3.0.0"
_KAFKA_BINDING: Final = "0.5.0"
_REF: Final = "#/components/schemas/{model}"
# The channel's key in the document, for each topic role.
CHANNEL_KEYS: Final[dict[Channel, str]] = {
    "lifecycle": "lifecycle",
    "probe-requests": "probeRequests",
    "dead-letter": "deadLetter",
    "ingest": "ingest",
    "confirmations": "confirmations",
}
_KEY: Final = {
    "type": "string",
    "pattern": AUDIT_ID_PATTERN,
    "description": "The audit id: every event of an audit is in one partition, in order.",
}


def _headers(name: str) -> dict[str, Any]:
    """The headers the codec writes for ``name`` (:func:`~consumers.eventlog.codec.encode`:
    the type and the schema version, as text; the tests hold the two together)."""
    return {
        "type": "object",
        "required": ["event-type", "schema-version"],
        "properties": {
            "event-type": {
                "type": "string",
                "const": name,
                "description": "The event type, as in the body's `type`.",
            },
            "schema-version": {
                "type": "string",
                "const": str(CURRENT_VERSION[name]),
                "description": "The body's `schema_version`, as decimal text.",
            },
        },
    }


def _message(name: str, schemas: dict[str, Any]) -> dict[str, Any]:
    body, defs = envelope_schema(name, ref_template=_REF)
    schemas[name] = body
    for model, schema in defs.items():
        schemas.setdefault(model, schema)
    message: dict[str, Any] = {
        "name": name,
        "title": name,
        "summary": body["description"],
        "contentType": "application/json",
        "headers": _headers(name),
        "payload": {"$ref": _REF.format(model=name)},
        "bindings": {"kafka": {"key": _KEY, "bindingVersion": _KAFKA_BINDING}},
        "tags": [{"name": "public" if is_public(name) else "internal"}],
        "externalDocs": {"url": schema_id(name, "public" if is_public(name) else "internal")},
    }
    example = EXAMPLES.get(name)  # a type without one is named by the tests
    if example is not None:
        record = encode("topic", EVENT_TYPES[name].model_validate(example))
        message["examples"] = [
            {
                "name": f"{name}Example",
                "headers": {key: value.decode() for key, value in record.headers},
                "payload": example,
            }
        ]
    return message


def _dead_letter(schemas: dict[str, Any]) -> dict[str, Any]:
    schemas["DeadLetter"] = DeadLetter.model_json_schema(ref_template=_REF)
    return {
        "name": "DeadLetter",
        "title": "DeadLetter",
        "summary": schemas["DeadLetter"]["description"],
        "contentType": "application/json",
        "headers": {
            "type": "object",
            "required": ["consumer", "dead-letter-of"],
            "properties": {
                "consumer": {"type": "string", "description": "The consumer that set it aside."},
                "dead-letter-of": {
                    "type": "string",
                    "description": "The source record's position, `topic/partition@offset`.",
                },
            },
        },
        "payload": {"$ref": _REF.format(model="DeadLetter")},
        "bindings": {
            "kafka": {
                "key": {
                    "type": "string",
                    "description": (
                        "The source record's position, `topic:partition:offset`: every "
                        "record about one source record shares a partition."
                    ),
                },
                "bindingVersion": _KAFKA_BINDING,
            }
        },
        "examples": [
            {
                "name": "DeadLetterExample",
                "headers": {
                    "consumer": DEAD_LETTER_EXAMPLE["consumer"],
                    "dead-letter-of": "audit.lifecycle.v1/2@1042",
                },
                "payload": DEAD_LETTER_EXAMPLE,
            }
        ],
    }


def asyncapi_document(topics: Topics, *, kafka_servers: tuple[str, ...] = ()) -> dict[str, Any]:
    """The AsyncAPI document for ``topics`` (their prefix and consumer groups); with
    ``kafka_servers`` (``host:port``), a server entry for each broker."""
    schemas: dict[str, Any] = {}
    messages = {name: _message(name, schemas) for name in EVENT_TYPES}
    messages["DeadLetter"] = _dead_letter(schemas)
    address = {
        "lifecycle": topics.lifecycle,
        "probe-requests": topics.probe_requests,
        "dead-letter": topics.dead_letter,
        "ingest": topics.ingest,
        "confirmations": topics.confirmations,
    }
    on_channel: dict[str, list[str]] = {key: [] for key in address}
    on_channel["ingest"] = [name for name in EVENT_TYPES if is_public(name)]
    for name in EVENT_TYPES:
        on_channel[topic_of(name)].append(name)
    on_channel["dead-letter"].append("DeadLetter")
    on_channel["confirmations"].append("ProbeRequested")
    descriptions = {
        "lifecycle": "The event store: every audit's lifecycle, keyed by audit id.",
        "probe-requests": "Requests to probe an audit's workflow instance, keyed by audit id.",
        "dead-letter": "Records a consumer could not decode or apply, with the reason.",
        "confirmations": (
            "Probe requests of the event subscription (deaths its queue reported), keyed by "
            "audit id, answered in order as the probe budget allows."
        ),
        "ingest": (
            "What Kafka publishers write, keyed by audit id: the publisher types (as POST "
            "/events takes them), validated onto the lifecycle topic by the ingest component."
        ),
    }
    channels = {
        CHANNEL_KEYS[role]: {  # type: ignore[index]
            "address": topic,
            "title": topic,
            "description": descriptions[role],
            "messages": {m: {"$ref": f"#/components/messages/{m}"} for m in on_channel[role]},
            "bindings": {"kafka": {"topic": topic, "bindingVersion": _KAFKA_BINDING}},
        }
        for role, topic in address.items()
    }
    operations: dict[str, Any] = {}
    for role in ROLES:
        for use in role.uses:
            key = CHANNEL_KEYS[use.channel]
            names = [m for m in use.messages() if m in on_channel[use.channel]]
            operation: dict[str, Any] = {
                "action": use.action,
                "channel": {"$ref": f"#/channels/{key}"},
                "title": f"{role.name}: {use.action} {use.summary}",
                "summary": use.summary,
                "description": role.description,
                "tags": [{"name": role.name}],
                "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in names],
            }
            if use.action == "receive" and role.component:
                group = {"type": "string", "enum": [topics.group(role.name)]}
                operation["bindings"] = {
                    "kafka": {"groupId": group, "bindingVersion": _KAFKA_BINDING}
                }
            operations[f"{role.name}_{use.action}_{key}"] = operation
    document: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "auditrec",
            "version": metadata.version("auditrec"),
            "description": (
                "The topics of auditrec, an event-sourced reconciler of audits run as "
                "Cloudflare Workflows: what each topic carries, how records are keyed and "
                "headed, and which component writes and reads each message. Bodies are UTF-8 "
                "JSON; unknown fields are invalid; timestamps are RFC 3339 with an offset."
            ),
            "tags": [
                {"name": "public", "description": "Published by other services."},
                {"name": "internal", "description": "Written by auditrec alone."},
            ],
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }
    if kafka_servers:
        document["servers"] = {
            f"kafka{i + 1}": {"host": host, "protocol": "kafka", "description": "A broker."}
            for i, host in enumerate(kafka_servers)
        }
    return document


def asyncapi_for(settings: Settings) -> dict[str, Any]:
    """The document for this deployment: its topic and group prefixes, and its brokers when
    the event log is Kafka."""
    url = settings.event_log_url
    servers = tuple(bootstrap_servers(url)) if url.startswith("kafka://") else ()
    topics = Topics(settings.topic_prefix, settings.group_prefix, settings.ingest_topic)
    return asyncapi_document(topics, kafka_servers=servers)
