// auditrec's publisher client for Cloudflare Workers (and any runtime with fetch and Web
// Crypto): typed event builders with fixed ids, and a client with retries.
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
export { PUBLISHED_TYPES, SCHEMA_IDS, SCHEMA_VERSIONS } from "./generated/schema.js";
