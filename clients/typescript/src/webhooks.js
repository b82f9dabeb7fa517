// The outcome feed's webhooks: each change of an audit's status that auditrec decides or
// records, signed with the Standard Webhooks scheme (https://www.standardwebhooks.com).
// verifyWebhook() checks a delivery's signature and time with Web Crypto and returns its entry;
// an entry comes again on a retry with the same `id`, so apply it keyed by that id.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SECRET_PREFIX = "whsec_";

/** The outcome entries' types (auditrec's statemachine/outcomes.py). */
export const OUTCOME_TYPES = Object.freeze([
  "audit.failed",
  "audit.completed",
  "audit.overturned",
  "audit.restored",
  "audit.failure_held",
  "audit.failure_released",
  "audit.failure_discarded",
]);

/** What verifyWebhook() throws: the message names what is wrong. Answer such a delivery 401. */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

function header(headers, name) {
  const value = typeof headers?.get === "function"
    ? headers.get(name)
    : Object.entries(headers ?? {}).find(([key]) => key.toLowerCase() === name)?.[1];
  if (value == null || value === "") throw new WebhookVerificationError(`missing header ${name}`);
  return String(value);
}

function base64Bytes(text) {
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

// Equal bytes in a time that depends on the lengths only, never on where they differ.
function equal(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

function field(body, name, check, rule) {
  const value = body[name];
  if (!check(value)) throw new WebhookVerificationError(`body.${name}: ${JSON.stringify(value) ?? "missing"} ${rule}`);
  return value;
}

const text = (v) => typeof v === "string" && v !== "";
const optionalText = (v) => v === null || typeof v === "string";

/** The outcome entry of a verified body; throws naming the first field that is wrong. */
function outcomeOf(payload) {
  let body;
  try {
    body = JSON.parse(payload);
  } catch {
    throw new WebhookVerificationError("body: not JSON");
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new WebhookVerificationError("body: not a JSON object");
  }
  const entry = { ...body };
  for (const name of ["error_code", "rule", "reconciled_by", "actor"]) entry[name] ??= null;
  field(entry, "id", text, "is not an outcome id");
  field(entry, "type", (v) => OUTCOME_TYPES.includes(v), `is not one of ${OUTCOME_TYPES.join(", ")}`);
  field(entry, "audit_id", text, "is not an audit id");
  field(entry, "status", text, "is not a status");
  for (const name of ["error_code", "rule", "reconciled_by", "actor"]) field(entry, name, optionalText, "is not a string or null");
  field(entry, "decided_at", (v) => typeof v === "string" && !Number.isNaN(Date.parse(v)), "is not an ISO 8601 time");
  field(entry, "event_id", (v) => typeof v === "string" && UUID.test(v), "is not a UUID");
  return Object.freeze(entry);
}

/**
 * Verifies one outcome delivery: `payload` the raw body as received (before any JSON
 * parsing), `headers` its webhook-id, webhook-timestamp and webhook-signature, `secret` the
 * `whsec_…` secret. Resolves to the entry; rejects with a WebhookVerificationError for a
 * missing header, a time more than `tolerance` seconds from `now` (either way), no `v1`
 * signature that matches (a changed body, another secret), or a body that is no outcome entry;
 * with a TypeError for a secret that is not `whsec_` and a base64 key.
 */
export async function verifyWebhook(payload, headers, secret, { tolerance = 300, now = Date.now() } = {}) {
  if (typeof payload !== "string") throw new WebhookVerificationError("payload: give the raw body as a string");
  const id = header(headers, "webhook-id");
  const sent = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");

  if (!/^\d+$/.test(sent)) throw new WebhookVerificationError(`webhook-timestamp: ${JSON.stringify(sent)} is not unix seconds`);
  const drift = Math.floor(Number(now instanceof Date ? now.getTime() : now) / 1000) - Number(sent);
  if (drift > tolerance) throw new WebhookVerificationError(`webhook-timestamp: ${drift} s old, more than ${tolerance} s`);
  if (-drift > tolerance) throw new WebhookVerificationError(`webhook-timestamp: ${-drift} s ahead, more than ${tolerance} s`);

  const encoded = String(secret ?? "");
  const key = base64Bytes(encoded.startsWith(SECRET_PREFIX) ? encoded.slice(SECRET_PREFIX.length) : encoded);
  if (key === null || key.length === 0) {
    // the receiver's mistake, not the sender's: no 401 for it
    throw new TypeError(`secret: not ${SECRET_PREFIX} followed by a base64 key`);
  }
  const hmac = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const expected = new Uint8Array(
    await crypto.subtle.sign("HMAC", hmac, new TextEncoder().encode(`${id}.${sent}.${payload}`)),
  );
  let matched = false;
  for (const signature of signatures.split(" ")) {
    const [version, value] = signature.split(",", 2);
    const decoded = version === "v1" && value ? base64Bytes(value) : null;
    if (decoded !== null && equal(decoded, expected)) matched = true;
  }
  if (!matched) {
    throw new WebhookVerificationError("webhook-signature: no v1 signature matches (a changed body or another secret)");
  }
  return outcomeOf(payload);
}
