// The outcome feed's webhooks: each change of an audit's status that auditrec decides or
// records, signed with the Standard Webhooks scheme (https://www.standardwebhooks.com).
// verifyWebhook() checks a delivery's signature with the official `standardwebhooks` package,
// its time against a tolerance, and returns its entry; an entry comes again on a retry with the
// same `id`, so apply it keyed by that id.

import { Webhook, WebhookVerificationError as SignatureError } from "standardwebhooks";

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

// standardwebhooks' Webhook, the delivery's time checked against `now` within `tolerance`
// seconds: the package's own check is against the clock within a fixed 5 minutes. Its verify()
// asks verifyTimestamp() for the time and signs with what it returns.
class OutcomeWebhook extends Webhook {
  #tolerance;
  #now;

  constructor(secret, tolerance, now) {
    super(secret);
    this.#tolerance = tolerance;
    this.#now = now;
  }

  verifyTimestamp(sent) {
    if (!/^\d+$/.test(sent)) throw new WebhookVerificationError(`webhook-timestamp: ${JSON.stringify(sent)} is not unix seconds`);
    const now = this.#now;
    const drift = Math.floor(Number(now instanceof Date ? now.getTime() : now) / 1000) - Number(sent);
    const tolerance = this.#tolerance;
    if (drift > tolerance) throw new WebhookVerificationError(`webhook-timestamp: ${drift} s old, more than ${tolerance} s`);
    if (-drift > tolerance) throw new WebhookVerificationError(`webhook-timestamp: ${-drift} s ahead, more than ${tolerance} s`);
    return new Date(Number(sent) * 1000);
  }
}

// The hook above is the package's (standardwebhooks 1.1.1, pinned): a version without it would
// check the time its own way, so refuse to load rather than ignore `tolerance` and `now`.
if (typeof Webhook.prototype.verifyTimestamp !== "function") {
  throw new Error("standardwebhooks: Webhook.verifyTimestamp is gone; install the version in package-lock.json");
}

/**
 * Verifies one outcome delivery: `payload` the raw body as received (before any JSON
 * parsing), `headers` its webhook-id, webhook-timestamp and webhook-signature, `secret` the
 * `whsec_…` secret. The signature is checked by the `standardwebhooks` package. Resolves to the
 * entry; rejects with a WebhookVerificationError for a missing header, a time more than
 * `tolerance` seconds from `now` (either way), no `v1` signature that matches (a changed body,
 * another secret), or a body that is no outcome entry; with a TypeError for a secret that is
 * not `whsec_` and a base64 key.
 */
export async function verifyWebhook(payload, headers, secret, { tolerance = 300, now = Date.now() } = {}) {
  if (typeof payload !== "string") throw new WebhookVerificationError("payload: give the raw body as a string");
  const delivery = {
    "webhook-id": header(headers, "webhook-id"),
    "webhook-timestamp": header(headers, "webhook-timestamp"),
    "webhook-signature": header(headers, "webhook-signature"),
  };

  let webhook;
  try {
    webhook = new OutcomeWebhook(secret, tolerance, now);
  } catch {
    // the receiver's mistake, not the sender's: no 401 for it
    throw new TypeError(`secret: not ${SECRET_PREFIX} followed by a base64 key`);
  }
  try {
    webhook.verify(payload, delivery, { jsonParse: false });
  } catch (error) {
    if (!(error instanceof SignatureError)) throw error;
    if (error.message === "No matching signature found") {
      throw new WebhookVerificationError("webhook-signature: no v1 signature matches (a changed body or another secret)");
    }
    throw new WebhookVerificationError(`webhook: ${error.message}`);
  }
  return outcomeOf(payload);
}
