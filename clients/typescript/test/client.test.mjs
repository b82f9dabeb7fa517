// The client against a real `auditrec serve`: publish, status, audits, replay with a bearer
// token; retries across a dropped connection and refusals never duplicate an event.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import {
  AuditrecClient,
  AuditrecError,
  auditCompleted,
  auditFailed,
  auditProgressed,
  auditStarted,
  buildEvent,
  eventIdFor,
  workflowInstanceAttached,
} from "../src/index.js";
import { startProxy } from "./proxy.mjs";
import { freePort, startServe, VIEWER } from "./serve.mjs";

const FAST = { attempts: 4, backoffMs: 20, maxBackoffMs: 100 };
let serve;

before(async () => {
  serve = await startServe();
});

after(async () => {
  await serve?.stop();
});

const newAuditId = () => `a-${randomUUID().slice(0, 12)}`;
const client = (baseUrl, options = {}) =>
  new AuditrecClient({ baseUrl, token: serve.token, producer: "worker", retry: FAST, ...options });

async function withProxy(body) {
  const proxy = await startProxy(serve.port);
  try {
    return await body(proxy);
  } finally {
    await proxy.close();
  }
}

test("publish, then read the status, the listing and the history", async () => {
  const auditId = newAuditId();
  const auditrec = client(serve.url);
  const started = new Date(Date.now() - 120_000);

  const ids = [
    ...(await auditrec.publish(auditStarted(auditId, { project_id: "p-ts", pages_total: 3 }, { occurredAt: started }))),
    ...(await auditrec.publish(
      workflowInstanceAttached(auditId, { workflow_instance_id: `wf-${auditId}` }),
      auditProgressed(auditId, { current_phase: "crawl", pages_crawled: 1 }),
    )),
    ...(await auditrec.publish(auditCompleted(auditId, { pages_crawled: 3 }))),
  ];
  const row = await auditrec.status(auditId);
  const page = await auditrec.audits({ status: "completed", projectId: "p-ts", limit: 1000 });
  const history = await auditrec.replay(auditId);

  assert.equal(row.status, "completed");
  assert.equal(row.pages_crawled, 3);
  assert.equal(row.workflow_instance_id, `wf-${auditId}`);
  assert.equal(row.version, 4);
  assert.ok(page.audits.some((a) => a.audit_id === auditId));
  const found = await auditrec.audits({ q: `wf-${auditId}`, held: false, sort: "ended", order: "asc" });
  assert.deepEqual(found.audits.map((a) => a.audit_id), [auditId]);
  assert.equal(found.total, 1);
  assert.equal(found.prev_cursor, null);
  assert.deepEqual(
    history.events.map((e) => e.type),
    ["AuditStarted", "WorkflowInstanceAttached", "AuditProgressed", "AuditCompleted"],
  );
  assert.equal(row.workflow, null); // the default workflow's
  assert.equal(row.stalled_at, null);
  const ofDefault = await auditrec.audits({ q: `wf-${auditId}`, workflow: "site-audit", stalled: false });
  assert.deepEqual(ofDefault.audits.map((a) => a.audit_id), [auditId]);
  const ofOther = await auditrec.audits({ q: `wf-${auditId}`, workflow: "keyword-research" });
  assert.equal(ofOther.total, 0);
  assert.deepEqual(history.events.map((e) => e.event_id), ids);
  assert.deepEqual([...new Set(history.events.map((e) => e.producer))], ["worker"]);
});

test("a failure published by the workflow fails the audit", async () => {
  const auditId = newAuditId();
  const auditrec = client(serve.url);
  await auditrec.publish(
    auditStarted(auditId, { project_id: "p" }),
    auditFailed(auditId, { error_code: "cpu_limit", error_detail: "Worker exceeded CPU time limit", failed_by: "workflow" }),
  );
  const row = await auditrec.status(auditId, { probe: false });
  assert.deepEqual([row.status, row.error_code, row.failed_by], ["failed", "cpu_limit", "workflow"]);
});

test("a publish retried after a dropped connection is recorded once", async () => {
  await withProxy(async (proxy) => {
    const auditId = newAuditId();
    proxy.drop(1);
    const auditrec = client(proxy.url);

    const [eventId] = await auditrec.publish(auditStarted(auditId, { project_id: "p" }));
    const history = await auditrec.replay(auditId);

    assert.equal(proxy.state.dropped.length, 1);
    assert.match(proxy.state.dropped[0], /^HTTP\/1\.1 202/);
    assert.deepEqual(history.events.map((e) => e.event_id), [eventId]);
    assert.equal((await auditrec.status(auditId, { probe: false })).version, 1);
  });
});

test("a refusal and a drop in a row are retried without a duplicate", async () => {
  await withProxy(async (proxy) => {
    const auditId = newAuditId();
    proxy.refuse(1, 503);
    proxy.drop(1);
    const auditrec = client(proxy.url);

    const ids = await auditrec.publish(
      auditStarted(auditId, { project_id: "p" }),
      auditProgressed(auditId, { pages_crawled: 1 }),
    );
    const history = await auditrec.replay(auditId);

    assert.equal(proxy.state.refused, 1);
    assert.equal(proxy.state.dropped.length, 1);
    assert.deepEqual(history.events.map((e) => e.event_id), ids);
  });
});

test("refusals beyond the attempts reject as unavailable", async () => {
  await withProxy(async (proxy) => {
    proxy.refuse(3, 429);
    const auditrec = client(proxy.url, { retry: { attempts: 3, backoffMs: 0 } });
    await assert.rejects(auditrec.publish(auditStarted(newAuditId(), { project_id: "p" })), (error) => {
      assert.ok(error instanceof AuditrecError);
      assert.equal(error.kind, "unavailable");
      assert.equal(error.status, 429);
      assert.equal(error.retriable, true);
      return true;
    });
    assert.equal(proxy.state.refused, 3);
  });
});

test("an invalid event is refused naming it, not retried, and nothing is published", async () => {
  const auditId = newAuditId();
  const auditrec = client(serve.url);
  const bad = { type: "AuditProgressed", audit_id: auditId, data: { pages_crawled: "many" } };

  await assert.rejects(auditrec.publish(auditStarted(auditId, { project_id: "p" }), bad), (error) => {
    assert.equal(error.kind, "invalid");
    assert.equal(error.status, 422);
    assert.equal(error.retriable, false);
    assert.ok(error.problems.some((p) => p.startsWith("item 1: ") && p.includes("pages_crawled")), error.problems);
    return true;
  });
  await assert.rejects(auditrec.status(auditId, { probe: false }), { kind: "not_found", status: 404 });
});

test("without the token the server refuses", async () => {
  const auditrec = new AuditrecClient({ baseUrl: serve.url, retry: FAST });
  await assert.rejects(auditrec.audits(), { kind: "unauthorized", status: 401 });
});

test("a token without the scope is forbidden, naming the scope it lacks", async () => {
  const auditrec = new AuditrecClient({ baseUrl: serve.url, token: VIEWER, retry: FAST });
  assert.ok(Array.isArray((await auditrec.audits()).audits)); // read: allowed
  await assert.rejects(auditrec.publish(auditStarted(newAuditId(), { project_id: "p" })), (error) => {
    assert.equal(error.kind, "forbidden");
    assert.equal(error.status, 403);
    assert.equal(error.retriable, false);
    assert.equal(error.scope, "publish");
    assert.match(error.message, /^auditrec answered 403 forbidden \(the token lacks scope publish\): /);
    assert.match(error.message, /'viewer' has scope read/);
    return true;
  });
});

test("nothing listening rejects as unreachable after the attempts", async () => {
  const port = await freePort();
  const auditrec = new AuditrecClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { attempts: 2, backoffMs: 0 } });
  await assert.rejects(auditrec.publish(auditStarted("a-1", { project_id: "p" })), (error) => {
    assert.equal(error.kind, "unreachable");
    assert.equal(error.retriable, true);
    assert.match(error.message, /no answer after 2 attempt/);
    return true;
  });
});

test("an event's id and time are fixed when it is built", () => {
  const event = auditProgressed("a-1", { pages_crawled: 1 }, { occurredAt: "2026-12-01T09:00:00+01:00" });
  assert.equal(event.occurred_at, "2026-12-01T09:00:00+01:00");
  assert.match(event.event_id, /^[0-9a-f-]{36}$/);
  assert.ok(Object.isFrozen(event));
  assert.notEqual(auditProgressed("a-1", {}).event_id, event.event_id);
  assert.equal(buildEvent("AuditFailed", "a-1", { error_code: "oom", error_detail: "x", failed_by: "workflow" }).schema_version, 2);
});

test("eventIdFor gives the same version 5 UUID as Python's uuid5 for the same parts", async () => {
  // python: uuid.uuid5(uuid.UUID("3c5a4e7e-1d0b-5f6c-8a9e-2b7d4c1f0e93"), "wf:started")
  assert.equal(await eventIdFor("wf", "started"), "757b5bd4-ff0d-5298-965c-e2a6ea25c736");
  assert.notEqual(await eventIdFor("wf", "completed"), await eventIdFor("wf", "started"));
});

for (const [what, build, named] of [
  ["an audit id auditrec refuses", () => auditStarted("a 1", { project_id: "p" }), /^audit_id: /],
  ["a time without an offset", () => auditStarted("a-1", { project_id: "p" }, { occurredAt: "2026-12-01T09:00:00" }), /^occurred_at: /],
  ["an event id that is not a UUID", () => auditCompleted("a-1", {}, { eventId: "nope" }), /^event_id: /],
  ["an unknown type", () => buildEvent("AuditExploded", "a-1", {}), /^type: /],
  ["a failure claimed for the reconciler", () => auditFailed("a-1", { error_code: "oom", error_detail: "x", failed_by: "reconciler" }), /^data\.failed_by: /],
  ["a failure claimed for an operator", () => auditFailed("a-1", { error_code: "oom", error_detail: "x", failed_by: "operator" }), /^data\.failed_by: "operator" is auditrec's to write/],
]) {
  test(`building an event refuses ${what}, naming the field`, () => {
    assert.throws(build, (error) => error instanceof AuditrecError && error.kind === "invalid" && named.test(error.message));
  });
}
