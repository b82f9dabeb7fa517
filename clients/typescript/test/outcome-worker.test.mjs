// The example outcome Worker (examples/outcome-worker.js) on an in-memory D1 and queue batch:
// an entry delivered twice, by the queue or as a webhook signed by standardwebhooks, updates
// the product's row once; a delivery whose signature does not match is answered 401.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import worker from "../examples/outcome-worker.js";
import { newSecret, sign } from "./standardwebhooks.mjs";

// D1 as far as the example uses it: prepare(sql).bind(...).run() of an
// `UPDATE audits SET a = ?, ... WHERE b = ? AND c IS NOT ?` on rows kept in memory, keyed by id.
function fakeD1(rows) {
  const changes = [];
  const prepare = (sql) => ({
    bind: (...args) => ({
      async run() {
        const match = /^UPDATE audits SET (.+) WHERE (.+)$/.exec(sql);
        assert.ok(match, `the fake runs UPDATE audits only: ${sql}`);
        const sets = match[1].split(", ").map((s) => /^(\w+) = \?$/.exec(s)[1]);
        const conditions = match[2].split(" AND ").map((c) => /^(\w+) (=|IS NOT) \?$/.exec(c).slice(1));
        assert.equal(args.length, sets.length + conditions.length, "one argument per ?");
        const where = args.slice(sets.length);
        let changed = 0;
        for (const row of rows) {
          if (conditions.every(([column, op], i) => (op === "=" ? row[column] === where[i] : row[column] !== where[i]))) {
            sets.forEach((column, i) => (row[column] = args[i]));
            changed++;
          }
        }
        changes.push(changed);
        return { success: true, meta: { changes: changed } };
      },
    }),
  });
  return { prepare, changes };
}

function batchOf(...bodies) {
  const acked = [];
  const retried = [];
  const messages = bodies.map((body, i) => ({
    id: `m-${i}`,
    body,
    ack: () => acked.push(i),
    retry: () => retried.push(i),
  }));
  return { queue: "auditrec-outcomes", messages, acked, retried };
}

const outcome = (auditId, type = "audit.failed") => ({
  id: `out_${randomUUID().replaceAll("-", "")}`,
  type,
  audit_id: auditId,
  status: type === "audit.failed" ? "failed" : "completed",
  error_code: type === "audit.failed" ? "oom" : null,
  rule: null,
  reconciled_by: null,
  actor: "workflow",
  decided_at: new Date().toISOString(),
  event_id: randomUUID(),
});

test("an entry the queue delivers twice updates the row once, and every message is acked", async () => {
  const rows = [
    { id: "a-1", status: "running", error_code: null, outcome_id: null },
    { id: "a-2", status: "running", error_code: null, outcome_id: null },
  ];
  const db = fakeD1(rows);
  const failed = outcome("a-1");
  const batch = batchOf(failed, failed);

  await worker.queue(batch, { DB: db });
  const again = batchOf(failed);
  await worker.queue(again, { DB: db });

  assert.deepEqual(db.changes, [1, 0, 0]);
  assert.deepEqual(rows, [
    { id: "a-1", status: "failed", error_code: "oom", outcome_id: failed.id },
    { id: "a-2", status: "running", error_code: null, outcome_id: null },
  ]);
  assert.deepEqual([batch.acked, batch.retried, again.acked], [[0, 1], [], [0]]);
});

test("a message whose update fails is retried, not acked", async () => {
  const broken = { prepare: () => ({ bind: () => ({ run: async () => Promise.reject(new Error("D1_ERROR: no such table: audits")) }) }) };
  const batch = batchOf(outcome("a-1"));

  await worker.queue(batch, { DB: broken });

  assert.deepEqual([batch.acked, batch.retried], [[], [0]]);
});

test("a signed webhook updates the row once however often it comes; a bad signature is 401 and changes nothing", async () => {
  const secret = newSecret();
  const rows = [{ id: "a-9", status: "running", error_code: null, outcome_id: null }];
  const db = fakeD1(rows);
  const env = { DB: db, AUDITREC_WEBHOOK_SECRET: secret };
  const completed = outcome("a-9", "audit.completed");
  const [delivery] = sign({ secret, id: completed.id, timestamp: Math.floor(Date.now() / 1000), outcome: completed });
  const post = (body, headers) => worker.fetch(new Request("https://worker.example/outcomes", { method: "POST", body, headers }), env);

  const forged = await post(delivery.body.replace('"completed"', '"failed"'), delivery.headers);
  const unsigned = await post(delivery.body, {});
  assert.equal(forged.status, 401);
  assert.match(await forged.text(), /no v1 signature matches/);
  assert.equal(unsigned.status, 401);
  assert.match(await unsigned.text(), /missing header webhook-id/);
  assert.deepEqual([db.changes, rows[0].status], [[], "running"]);

  const first = await post(delivery.body, delivery.headers);
  const second = await post(delivery.body, delivery.headers);

  assert.deepEqual([first.status, second.status], [204, 204]);
  assert.deepEqual(rows, [{ id: "a-9", status: "completed", error_code: null, outcome_id: completed.id }]);
  assert.deepEqual(db.changes, [1, 0]);
});
