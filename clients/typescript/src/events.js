// The events a publisher sends, built with their id and time fixed: auditrec applies each
// event_id once, so publishing the same built event again (a retry after a dropped
// connection, a Workflow step run twice) never records it twice. In a Cloudflare Workflow,
// where a step may run more than once, derive the id from the instance and the step with
// eventIdFor() so that every run of the step builds the same event.
import { AuditrecError } from "./errors.js";
import {
  AUDIT_ID_PATTERN,
  AUDIT_ID_RULE,
  PUBLISHED_FAILED_BY,
  PUBLISHED_TYPES,
  SCHEMA_VERSIONS,
} from "./generated/schema.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const OFFSET = /(Z|[+-]\d{2}:\d{2})$/i;
// The namespace of eventIdFor's name-based (version 5) UUIDs.
const NAMESPACE = "3c5a4e7e-1d0b-5f6c-8a9e-2b7d4c1f0e93";

function invalid(message) {
  return new AuditrecError(message, { kind: "invalid", detail: [message] });
}

function timestamp(value, name) {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw invalid(`${name}: an invalid Date`);
    return value.toISOString();
  }
  if (typeof value !== "string" || !OFFSET.test(value) || Number.isNaN(Date.parse(value))) {
    throw invalid(`${name}: ${JSON.stringify(value)} is not an RFC 3339 time with an offset`);
  }
  return value;
}

function uuid(value, name) {
  if (typeof value !== "string" || !UUID.test(value)) {
    throw invalid(`${name}: ${JSON.stringify(value)} is not a UUID`);
  }
  return value.toLowerCase();
}

/**
 * The envelope of one event, its event_id and occurred_at fixed now (or as given).
 * Throws an AuditrecError (kind "invalid") naming the field for an unknown type, an audit id
 * auditrec refuses, a time without an offset, an id that is not a UUID, or data that is not
 * an object; auditrec checks the rest and answers 422 naming each problem.
 */
export function buildEvent(type, auditId, data = {}, options = {}) {
  if (!PUBLISHED_TYPES.includes(type)) {
    throw invalid(`type: ${JSON.stringify(type)} is not one of ${PUBLISHED_TYPES.join(", ")}`);
  }
  if (typeof auditId !== "string" || !AUDIT_ID_PATTERN.test(auditId)) {
    throw invalid(`audit_id: ${JSON.stringify(auditId)} ${AUDIT_ID_RULE}`);
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw invalid("data: must be an object");
  }
  if (type === "AuditFailed" && data.failed_by !== undefined && !PUBLISHED_FAILED_BY.includes(data.failed_by)) {
    throw invalid(
      `data.failed_by: ${JSON.stringify(data.failed_by)} is auditrec's to write; ` +
        `publishers send ${PUBLISHED_FAILED_BY.join(", ")}`,
    );
  }
  const event = {
    event_id: uuid(options.eventId ?? crypto.randomUUID(), "event_id"),
    type,
    schema_version: SCHEMA_VERSIONS[type],
    audit_id: auditId,
    occurred_at: timestamp(options.occurredAt ?? new Date(), "occurred_at"),
    data: { ...data },
  };
  if (options.producer !== undefined) event.producer = options.producer;
  if (options.causationId != null) event.causation_id = uuid(options.causationId, "causation_id");
  if (options.correlationId != null) event.correlation_id = uuid(options.correlationId, "correlation_id");
  return Object.freeze(event);
}

export const auditStarted = (auditId, data, options) => buildEvent("AuditStarted", auditId, data, options);
export const workflowInstanceAttached = (auditId, data, options) =>
  buildEvent("WorkflowInstanceAttached", auditId, data, options);
export const auditProgressed = (auditId, data, options) => buildEvent("AuditProgressed", auditId, data, options);
export const auditCompleted = (auditId, data, options) => buildEvent("AuditCompleted", auditId, data, options);
export const auditFailed = (auditId, data, options) => buildEvent("AuditFailed", auditId, data, options);

function bytesOf(id) {
  const hex = id.replaceAll("-", "");
  return Uint8Array.from({ length: 16 }, (_, i) => Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16));
}

/**
 * A name-based (version 5) UUID of `parts` joined by ":": the same parts give the same id, in
 * any process, so a step that runs again builds the same event. Uses Web Crypto (Workers,
 * Node >= 20, browsers).
 */
export async function eventIdFor(...parts) {
  if (parts.length === 0) throw invalid("eventIdFor: give at least one part");
  const name = new TextEncoder().encode(parts.map(String).join(":"));
  const input = new Uint8Array(16 + name.length);
  input.set(bytesOf(NAMESPACE));
  input.set(name, 16);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-1", input)).slice(0, 16);
  digest[6] = (digest[6] & 0x0f) | 0x50;
  digest[8] = (digest[8] & 0x3f) | 0x80;
  const hex = [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
