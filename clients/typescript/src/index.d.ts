// The client's types. The event types are generated from auditrec's JSON Schemas
// (./generated/events.d.ts); this file declares the hand-written runtime around them.
import type { DataOf, PublishedEvent, PublishedType } from "./generated/events.js";

export type * from "./generated/events.js";
export { PUBLISHED_TYPES, SCHEMA_IDS, SCHEMA_VERSIONS } from "./generated/schema.js";

export interface EventOptions {
  /** Defaults to a random UUID; eventIdFor() gives one that is the same on every run. */
  eventId?: string;
  /** Defaults to now. A string must carry an offset (`Z` or `+01:00`). */
  occurredAt?: Date | string;
  producer?: string;
  causationId?: string | null;
  correlationId?: string | null;
}

/** A built event: every envelope field the builder fixed is present. */
export type Built<T extends PublishedType> = Extract<PublishedEvent, { type: T }> & {
  readonly event_id: string;
  readonly occurred_at: string;
  readonly schema_version: number;
};

export declare function buildEvent<T extends PublishedType>(
  type: T,
  auditId: string,
  data: DataOf[T],
  options?: EventOptions,
): Built<T>;
export declare function auditStarted(
  auditId: string,
  data: DataOf["AuditStarted"],
  options?: EventOptions,
): Built<"AuditStarted">;
export declare function workflowInstanceAttached(
  auditId: string,
  data: DataOf["WorkflowInstanceAttached"],
  options?: EventOptions,
): Built<"WorkflowInstanceAttached">;
export declare function auditProgressed(
  auditId: string,
  data: DataOf["AuditProgressed"],
  options?: EventOptions,
): Built<"AuditProgressed">;
export declare function auditCompleted(
  auditId: string,
  data?: DataOf["AuditCompleted"],
  options?: EventOptions,
): Built<"AuditCompleted">;
export declare function auditFailed(
  auditId: string,
  data: DataOf["AuditFailed"],
  options?: EventOptions,
): Built<"AuditFailed">;
/** A version 5 UUID of the parts joined by ":": the same parts, the same id. */
export declare function eventIdFor(...parts: (string | number)[]): Promise<string>;

export type ErrorKind =
  | "unreachable"
  | "invalid"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "unavailable"
  | "api";

export declare class AuditrecError extends Error {
  readonly kind: ErrorKind;
  /** The HTTP status of auditrec's answer; null when there was none. */
  readonly status: number | null;
  readonly detail: unknown;
  readonly retriable: boolean;
  /** One line per problem auditrec named (422: `item N: …`). */
  readonly problems: string[];
  /** 403 (`forbidden`): the scope the call needs and the token lacks; null otherwise. */
  readonly scope: string | null;
}

export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  attempts?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  maxRetryAfterMs?: number;
}

export interface ClientOptions {
  baseUrl: string;
  token?: string;
  producer?: string;
  retry?: RetryOptions;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** The statuses of an audit (auditrec's state machine, but its initial "none"). */
export type AuditStatusName = "running" | "completed" | "failed";

/** One row of auditrec's `audits` table. */
export interface Audit {
  audit_id: string;
  status: AuditStatusName;
  project_id: string | null;
  workflow_instance_id: string | null;
  current_phase: string | null;
  pages_crawled: number | null;
  pages_total: number | null;
  started_at: string | null;
  /** A completion's time; `null` for a failed audit (see `failed_at`). */
  completed_at: string | null;
  /** When the failure was recorded, while the audit is failed. */
  failed_at: string | null;
  error_code: string | null;
  error_detail: string | null;
  failed_by: string | null;
  overturned: boolean;
  /** The audit's Cloudflare workflow; `null` for auditrec's default one. */
  workflow: string | null;
  /** When a stall verdict was recorded for the running audit (no progress), if one stands. */
  stalled_at: string | null;
  version: number;
  [column: string]: unknown;
}

export interface AuditStatus extends Audit {
  /** What an on-demand probe found, when this read probed. */
  reconciliation: Record<string, unknown> | null;
  note: string | null;
}

export interface AuditPage {
  audits: Audit[];
  next_cursor: string | null;
  /** The previous page's cursor; null on the first page. */
  prev_cursor: string | null;
  /** Every audit the filters select. */
  total: number | null;
}

export interface HistoryStep {
  event_id: string;
  type: string;
  occurred_at: string;
  producer: string;
  causation_id: string | null;
  before: string;
  after: string;
  rule: string;
  reason: string;
  data: Record<string, unknown>;
}

export interface AuditHistory {
  audit_id: string;
  status: string | null;
  events: HistoryStep[];
}

export interface AuditFilter {
  status?: AuditStatusName;
  projectId?: string;
  errorCode?: string;
  /** Started longer ago than this duration ("2h", "90m"), in any status. */
  olderThan?: string;
  /** Running audits started longer ago than this duration ("2h", "90m"). */
  runningLongerThan?: string;
  /** Only the audits whose decision the mass-failure brake holds (true) or the others. */
  held?: boolean;
  /** Only the audits of this Cloudflare workflow (of auditrec's default one: those naming none too). */
  workflow?: string;
  /** Only the running audits with a stall verdict recorded (true) or the others. */
  stalled?: boolean;
  /** An audit id, a workflow instance id or a project id (exactly), or a start URL's beginning. */
  q?: string;
  sort?: "started" | "ended" | "status" | "age";
  order?: "desc" | "asc";
  limit?: number;
  cursor?: string;
}

export declare class AuditrecClient {
  constructor(options: ClientOptions);
  readonly producer: string | undefined;
  readonly retry: Required<RetryOptions>;
  /** Publishes in one request (all or nothing); resolves to the events' ids. */
  publish(...events: (PublishedEvent | Built<PublishedType>)[]): Promise<string[]>;
  status(auditId: string, options?: { probe?: boolean }): Promise<AuditStatus>;
  audits(filter?: AuditFilter): Promise<AuditPage>;
  replay(auditId: string): Promise<AuditHistory>;
}

/** The outcome feed's entry types: the change of an audit's status or held decision. */
export type OutcomeType =
  | "audit.failed"
  | "audit.completed"
  | "audit.overturned"
  | "audit.restored"
  | "audit.failure_held"
  | "audit.failure_released"
  | "audit.failure_discarded";

export declare const OUTCOME_TYPES: readonly OutcomeType[];

/** One entry of the outcome feed: the same change has the same `id` on every delivery. */
export interface Outcome {
  readonly id: string;
  readonly type: OutcomeType;
  readonly audit_id: string;
  /** The audit's status after the change. */
  readonly status: AuditStatusName;
  /** For a failure, held or made: the classified cause. */
  readonly error_code: string | null;
  /** For a reconciler decision: the rule that fired. */
  readonly rule: string | null;
  /** For a reconciler decision: what asked for the probe (watchdog, on_demand, subscription). */
  readonly reconciled_by: string | null;
  /** Who made the change (`token:<name>`, `cli:<user>`, `workflow`, `reconciler`, `operator`). */
  readonly actor: string | null;
  /** ISO 8601: the causing event's occurred_at. */
  readonly decided_at: string;
  /** The causing event's id, in the audit's history. */
  readonly event_id: string;
}

export interface VerifyOptions {
  /** Seconds a delivery's webhook-timestamp may be from now, either way (default 300; more or less than standardwebhooks' fixed 300 is honoured). */
  tolerance?: number;
  /** Now, in milliseconds or as a Date (default Date.now()). */
  now?: number | Date;
}

/** A delivery refused: a missing header, a time out of tolerance, no matching signature, a body that is no entry. */
export declare class WebhookVerificationError extends Error {}

/**
 * Verifies a Standard Webhooks delivery of the outcome feed (`payload` the raw body, `secret`
 * the `whsec_…` secret), its signature with the `standardwebhooks` package, and resolves to its entry; rejects with a WebhookVerificationError
 * (answer 401), or a TypeError for a secret that is not `whsec_` and a base64 key.
 */
export declare function verifyWebhook(
  payload: string,
  headers: Record<string, string> | Headers,
  secret: string,
  options?: VerifyOptions,
): Promise<Outcome>;
