// Type-level tests of the declarations (`npx tsc -p .`, run by `make lint`): what a publisher
// writes compiles, what auditrec would refuse does not (each @ts-expect-error must be an error).
import {
  AuditrecClient,
  AuditrecError,
  type AuditStatus,
  type Built,
  type PublishedEvent,
  auditCompleted,
  auditFailed,
  auditStarted,
  buildEvent,
  eventIdFor,
  OUTCOME_TYPES,
  type Outcome,
  type OutcomeType,
  SCHEMA_VERSIONS,
  verifyWebhook,
  WebhookVerificationError,
} from "auditrec-client";

export async function publisher(env: { AUDITREC_URL: string; AUDITREC_TOKEN: string }): Promise<void> {
  const auditrec = new AuditrecClient({ baseUrl: env.AUDITREC_URL, token: env.AUDITREC_TOKEN, retry: { attempts: 3 } });
  const started: Built<"AuditStarted"> = auditStarted("a-1", { project_id: "p", pages_total: 3, workflow: "keyword-research" }, {
    eventId: await eventIdFor("wf-1", "started"),
  });
  const id: string = started.event_id;
  const ids: string[] = await auditrec.publish(
    started,
    auditCompleted("a-1"),
    auditFailed("a-1", { error_code: "oom", error_detail: "x", failed_by: "workflow" }),
    buildEvent("AuditProgressed", "a-1", { current_phase: "crawl", pages_crawled: 1 }),
  );
  const raw: PublishedEvent = { type: "WorkflowInstanceAttached", audit_id: "a-1", data: { workflow_instance_id: "wf-1" } };
  await auditrec.publish(raw);
  const row: AuditStatus = await auditrec.status("a-1", { probe: false });
  const status: "running" | "completed" | "failed" = row.status;
  const page = await auditrec.audits({ status: "failed", olderThan: "2h", limit: 10 });
  const next: string | null = page.next_cursor;
  const found = await auditrec.audits({ q: "wf-1", held: true, sort: "ended", order: "asc" });
  const back: string | null = found.prev_cursor;
  const total: number | null = found.total;
  const stalled = await auditrec.audits({ workflow: "keyword-research", stalled: true });
  const since: string | null = stalled.audits[0].stalled_at;
  const workflow: string | null = stalled.audits[0].workflow;
  // @ts-expect-error: no such sort
  await auditrec.audits({ sort: "name" });
  const history = await auditrec.replay("a-1");
  const types: string[] = history.events.map((e) => e.type);
  const version: number = SCHEMA_VERSIONS.AuditFailed;
  try {
    await auditrec.audits();
  } catch (error) {
    if (error instanceof AuditrecError && error.retriable) console.log(error.kind, error.status, error.problems);
  }
  console.log(id, ids, status, next, back, total, types, version);

  // @ts-expect-error project_id is required
  auditStarted("a-1", {});
  // @ts-expect-error an error code auditrec does not know
  auditFailed("a-1", { error_code: "boom", error_detail: "x", failed_by: "workflow" });
  // @ts-expect-error a failure a publisher never reports: an operator's is auditrec's to write
  auditFailed("a-1", { error_code: "oom", error_detail: "x", failed_by: "operator" });
  // @ts-expect-error a field AuditProgressed does not have
  buildEvent("AuditProgressed", "a-1", { progress: 1 });
  // @ts-expect-error not a published type
  buildEvent("WorkflowStatusObserved", "a-1", {});
  // @ts-expect-error counts are numbers
  buildEvent("AuditCompleted", "a-1", { pages_crawled: "many" });
  // @ts-expect-error a status the table never has
  await auditrec.audits({ status: "lost" });
}

export async function receiver(request: Request, env: { AUDITREC_WEBHOOK_SECRET: string }): Promise<Response> {
  let outcome: Outcome;
  try {
    outcome = await verifyWebhook(await request.text(), request.headers, env.AUDITREC_WEBHOOK_SECRET, { tolerance: 60 });
  } catch (error) {
    if (error instanceof WebhookVerificationError) return new Response(error.message, { status: 401 });
    throw error;
  }
  const type: OutcomeType = outcome.type;
  const code: string | null = outcome.error_code;
  const known: readonly OutcomeType[] = OUTCOME_TYPES;
  await verifyWebhook("{}", { "webhook-id": "m", "webhook-timestamp": "1", "webhook-signature": "v1,x" }, "whsec_x", { now: new Date() });
  // @ts-expect-error not an outcome type
  const unknown: OutcomeType = "audit.started";
  // @ts-expect-error the raw body, not its parsed JSON
  await verifyWebhook({}, request.headers, env.AUDITREC_WEBHOOK_SECRET);
  console.log(type, code, known, unknown);
  return new Response(null, { status: 204 });
}
