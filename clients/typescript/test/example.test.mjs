// The example Worker (examples/workflow-worker.js) runs its Workflow against a real serve:
// the audit is started, progressed per page and completed; and a second run of every step
// (as after a restart) publishes the same events, recorded once.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { register } from "node:module";
import { after, before, test } from "node:test";

import { AuditrecClient } from "../src/index.js";
import { startServe } from "./serve.mjs";

register("./workers/hooks.mjs", import.meta.url);
const { AuditWorkflow, default: worker } = await import("../examples/workflow-worker.js");

let serve;
before(async () => {
  serve = await startServe();
});
after(async () => {
  await serve?.stop();
});

// A Workflow's step API as far as the example uses it: each step runs its callback.
function steps() {
  const names = [];
  return { names, do: async (name, callback) => (names.push(name), callback()) };
}

test("the example workflow reports start, progress and completion, each once", async () => {
  const auditId = `a-${randomUUID().slice(0, 12)}`;
  const urls = [`${serve.url}/healthz`, `${serve.url}/healthz?page=2`];
  const env = { AUDITREC_URL: serve.url, AUDITREC_TOKEN: serve.token };
  const event = { payload: { auditId, projectId: "p-worker", urls }, instanceId: `wf-${auditId}`, timestamp: new Date() };

  // when the workflow runs, and then every step of it runs again
  const first = steps();
  const result = await new AuditWorkflow({}, env).run(event, first);
  await new AuditWorkflow({}, env).run(event, steps());

  // then the audit is completed with its pages, and its history holds each event once
  const auditrec = new AuditrecClient({ baseUrl: serve.url, token: serve.token });
  const row = await auditrec.status(auditId, { probe: false });
  const history = await auditrec.replay(auditId);
  assert.deepEqual(result, { crawled: 2 });
  assert.deepEqual([row.status, row.pages_crawled, row.workflow_instance_id], ["completed", 2, `wf-${auditId}`]);
  assert.deepEqual(
    history.events.map((e) => [e.type, e.producer]),
    [
      ["AuditStarted", "audit-workflow"],
      ["AuditProgressed", "audit-workflow"],
      ["AuditProgressed", "audit-workflow"],
      ["AuditCompleted", "audit-workflow"],
    ],
  );
  assert.equal(first.names.filter((n) => n.startsWith("report ")).length, 4);
});

test("the example's fetch handler creates a workflow instance with the request's params", async () => {
  const created = [];
  const env = { AUDIT_WORKFLOW: { create: async (options) => (created.push(options), { id: "inst-1" }) } };
  const body = { auditId: "a-1", projectId: "p", urls: ["https://example.com/"] };

  const response = await worker.fetch(new Request("https://worker.example/", { method: "POST", body: JSON.stringify(body) }), env);

  assert.equal(response.status, 202);
  assert.deepEqual(await response.json(), { instance: "inst-1" });
  assert.deepEqual(created, [{ params: body }]);
});
