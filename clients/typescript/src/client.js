// auditrec's HTTP API over fetch(): publish (POST /events), status (GET /audits/{id}),
// audits (GET /audits), replay (GET /audits/{id}/events). No dependencies: runs in Cloudflare
// Workers, Node >= 20 and browsers.
//
// Retried: a request that got no answer (connection refused or cut, timeout), 429 and
// 500/502/503/504, up to `retry.attempts` attempts in all, the wait doubling from
// `retry.backoffMs` up to `retry.maxBackoffMs` with jitter, and a Retry-After honoured up to
// `retry.maxRetryAfterMs`. Retrying a publish is safe: its events' ids are fixed before the
// first attempt, and auditrec applies an event_id once.
import { AuditrecError, errorFor } from "./errors.js";
import { AUDIT_ID_PATTERN, AUDIT_ID_RULE } from "./generated/schema.js";

const RETRIED = new Set([429, 500, 502, 503, 504]);
const DEFAULT_RETRY = Object.freeze({
  attempts: 5,
  backoffMs: 200,
  maxBackoffMs: 5000,
  maxRetryAfterMs: 30000,
});

function auditPath(auditId) {
  if (typeof auditId !== "string" || !AUDIT_ID_PATTERN.test(auditId)) {
    throw new AuditrecError(`audit_id: ${JSON.stringify(auditId)} ${AUDIT_ID_RULE}`, { kind: "invalid" });
  }
  return `/audits/${auditId}`;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class AuditrecClient {
  #base;
  #headers;
  #fetch;
  #timeoutMs;

  /**
   * @param {object} options
   * @param {string} options.baseUrl auditrec's API, e.g. "https://auditrec.example.com"
   * @param {string} [options.token] sent as `Authorization: Bearer` (AUDITREC_API_TOKENS)
   * @param {string} [options.producer] names this service in events that name none
   * @param {object} [options.retry] { attempts, backoffMs, maxBackoffMs, maxRetryAfterMs }
   * @param {number} [options.timeoutMs] per attempt (default 10 s)
   * @param {typeof fetch} [options.fetch] e.g. a service binding's fetch
   */
  constructor({ baseUrl, token, producer, retry = {}, timeoutMs = 10000, fetch: fetchImpl } = {}) {
    if (typeof baseUrl !== "string" || !/^https?:\/\//.test(baseUrl)) {
      throw new AuditrecError(`baseUrl: ${JSON.stringify(baseUrl)} is not an http(s) URL`, {
        kind: "invalid",
      });
    }
    this.#base = baseUrl.replace(/\/+$/, "");
    this.#headers = { accept: "application/json" };
    if (token) this.#headers.authorization = `Bearer ${token}`;
    // Workers refuse a fetch called on another `this` ("Illegal invocation"): bind it.
    this.#fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    this.#timeoutMs = timeoutMs;
    this.producer = producer;
    this.retry = Object.freeze({ ...DEFAULT_RETRY, ...retry });
    if (!(this.retry.attempts >= 1)) {
      throw new AuditrecError("retry.attempts: must be at least 1", { kind: "invalid" });
    }
  }

  /**
   * Publishes `events` in one request (all or nothing) and resolves to their event ids.
   * Build them with buildEvent() (or auditStarted(), …) so that their ids are fixed; a plain
   * object without an event_id is given one here, before the first attempt.
   */
  async publish(...events) {
    if (events.length === 0) {
      throw new AuditrecError("publish: no events given", { kind: "invalid" });
    }
    const body = events.map((event) => {
      const out = { ...event };
      out.event_id ??= crypto.randomUUID();
      if (out.producer === undefined && this.producer !== undefined) out.producer = this.producer;
      return out;
    });
    const answer = await this.#send("POST", "/events", body);
    const sent = body.map((e) => e.event_id);
    const ids = Array.isArray(answer?.event_ids) ? answer.event_ids.map(String) : null;
    if (ids === null || ids.join() !== sent.join()) {
      throw new AuditrecError(`POST /events accepted ${JSON.stringify(ids)}, not ${JSON.stringify(sent)}`, {
        kind: "api",
        status: 202,
      });
    }
    return sent;
  }

  /** The reconciled audit row; a running audit is probed on demand unless `probe` is false. */
  status(auditId, { probe = true } = {}) {
    return this.#send("GET", auditPath(auditId) + (probe ? "" : "?probe=false"));
  }

  /** One page of audits, newest first or by `sort`: `{ audits, next_cursor, prev_cursor, total }`. */
  audits({ status, projectId, errorCode, olderThan, runningLongerThan, held, workflow, stalled, q, sort, order, limit, cursor } = {}) {
    const query = new URLSearchParams();
    const given = {
      status,
      project_id: projectId,
      error_code: errorCode,
      older_than: olderThan,
      running_longer_than: runningLongerThan,
      held,
      workflow,
      stalled,
      q,
      sort,
      order,
      limit,
      cursor,
    };
    for (const [key, value] of Object.entries(given)) {
      if (value !== undefined && value !== null) query.set(key, String(value));
    }
    const text = query.toString();
    return this.#send("GET", text ? `/audits?${text}` : "/audits");
  }

  /** The audit's history: each event, the state before and after, the rule that fired. */
  replay(auditId) {
    return this.#send("GET", `${auditPath(auditId)}/events`);
  }

  async #send(method, path, body) {
    const { attempts } = this.retry;
    const headers = { ...this.#headers };
    if (body !== undefined) headers["content-type"] = "application/json";
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 1; ; attempt += 1) {
      let response;
      let text;
      try {
        response = await this.#fetch(this.#base + path, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
        text = await response.text();
      } catch (cause) {
        if (attempt >= attempts) {
          throw new AuditrecError(
            `${method} ${path}: no answer after ${attempts} attempt(s): ${cause?.cause?.message ?? cause?.message ?? cause}`,
            { kind: "unreachable", cause },
          );
        }
        await sleep(this.#delay(attempt, null));
        continue;
      }
      if (RETRIED.has(response.status) && attempt < attempts) {
        await sleep(this.#delay(attempt, response.headers.get("retry-after")));
        continue;
      }
      let json;
      try {
        json = text === "" ? null : JSON.parse(text);
      } catch {
        json = { detail: text.slice(0, 500) || response.statusText };
      }
      if (response.ok) return json;
      throw errorFor(response.status, json);
    }
  }

  #delay(attempt, retryAfter) {
    const { backoffMs, maxBackoffMs, maxRetryAfterMs } = this.retry;
    let wait = Math.min(maxBackoffMs, backoffMs * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
    const asked = Number(retryAfter);
    if (retryAfter !== null && Number.isFinite(asked)) wait = Math.max(wait, Math.min(asked * 1000, maxRetryAfterMs));
    return wait;
  }
}
