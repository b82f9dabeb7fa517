// auditrec's publisher client for Cloudflare Workers (and any runtime with fetch and Web
// Crypto): typed event builders with fixed ids, a client with retries, and the verifier of
// the outcome feed's webhooks.
export { AuditrecClient } from "./client.js";
export { AuditrecError } from "./errors.js";
export {
  auditCompleted,
  auditFailed,
  auditProgressed,
  auditStarted,
  buildEvent,
  eventIdFor,
  workflowInstanceAttached,
} from "./events.js";
export { OUTCOME_TYPES, verifyWebhook, WebhookVerificationError } from "./webhooks.js";
export { PUBLISHED_TYPES, SCHEMA_IDS, SCHEMA_VERSIONS } from "./generated/schema.js";
