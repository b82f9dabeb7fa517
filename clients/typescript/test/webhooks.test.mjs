// verifyWebhook against deliveries signed by the official Standard Webhooks library (the
// Python `standardwebhooks` in auditrec's venv), their bodies written by auditrec's Outcome
// model: they verify; a changed body, another secret, a time out of tolerance, a missing
// header and a body that is no outcome entry are refused. The signatures are checked by the npm
// `standardwebhooks` package, which must load in a Worker: no Node built-ins.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { builtinModules, createRequire } from "node:module";
import { test } from "node:test";

import { OUTCOME_TYPES, verifyWebhook, WebhookVerificationError } from "../src/index.js";
import { newSecret, sign } from "./standardwebhooks.mjs";

const nowSeconds = () => Math.floor(Date.now() / 1000);
const failed = (auditId = `a-${randomUUID().slice(0, 12)}`) => ({
  id: `out_${randomUUID().replaceAll("-", "")}`,
  type: "audit.failed",
  audit_id: auditId,
  status: "failed",
  error_code: "instance_lost",
  rule: "instance_lost",
  reconciled_by: "watchdog",
  actor: "reconciler",
  decided_at: "2026-12-06T10:00:00.123456+00:00",
  event_id: randomUUID(),
});

async function refused(promise, pattern) {
  await assert.rejects(promise, (error) => error instanceof WebhookVerificationError && pattern.test(error.message));
}

test("a delivery signed by standardwebhooks verifies to the entry auditrec wrote", async () => {
  const secret = newSecret();
  const outcome = failed();
  const completed = { ...failed(), type: "audit.completed", status: "completed", error_code: null, rule: null, reconciled_by: null, actor: "workflow" };
  const [delivery, other] = sign(
    { secret, id: outcome.id, timestamp: nowSeconds(), outcome },
    { secret, id: completed.id, timestamp: nowSeconds(), outcome: completed },
  );

  const entry = await verifyWebhook(delivery.body, delivery.headers, secret);
  const fromHeaders = await verifyWebhook(other.body, new Headers(other.headers), secret);

  assert.deepEqual({ ...entry, decided_at: Date.parse(entry.decided_at) }, { ...outcome, decided_at: Date.parse(outcome.decided_at) });
  assert.deepEqual([fromHeaders.type, fromHeaders.status, fromHeaders.error_code, fromHeaders.actor], ["audit.completed", "completed", null, "workflow"]);
});

test("every outcome type verifies", async () => {
  const secret = newSecret();
  const deliveries = sign(...OUTCOME_TYPES.map((type) => ({ secret, id: `msg-${type}`, timestamp: nowSeconds(), outcome: { ...failed(), type } })));

  const types = await Promise.all(deliveries.map(async (d) => (await verifyWebhook(d.body, d.headers, secret)).type));

  assert.deepEqual(types, [...OUTCOME_TYPES]);
});

test("of several signatures (a secret being rotated), one that matches is enough", async () => {
  const secret = newSecret();
  const outcome = failed();
  const at = nowSeconds();
  const [old, current] = sign({ secret: newSecret(), id: outcome.id, timestamp: at, outcome }, { secret, id: outcome.id, timestamp: at, outcome });
  const signatures = `${old.headers["webhook-signature"]} v2,abc v1,not-base64! ${current.headers["webhook-signature"]}`;

  const entry = await verifyWebhook(current.body, { ...current.headers, "webhook-signature": signatures }, secret);

  assert.equal(entry.id, outcome.id);
  await refused(verifyWebhook(current.body, { ...current.headers, "webhook-signature": old.headers["webhook-signature"] }, secret), /no v1 signature matches/);
});

test("a changed body, another secret, or a signature moved to another message id is refused; a malformed secret is a TypeError", async () => {
  const secret = newSecret();
  const outcome = failed();
  const [delivery] = sign({ secret, id: outcome.id, timestamp: nowSeconds(), outcome });
  const tampered = delivery.body.replace('"failed"', '"completed"');
  assert.notEqual(tampered, delivery.body);

  await refused(verifyWebhook(tampered, delivery.headers, secret), /^webhook-signature: no v1 signature matches/);
  await refused(verifyWebhook(delivery.body, delivery.headers, newSecret()), /^webhook-signature: no v1 signature matches/);
  await refused(verifyWebhook(delivery.body, { ...delivery.headers, "webhook-id": "msg-other" }, secret), /^webhook-signature/);
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, "whsec_"), { name: "TypeError", message: /^secret: not whsec_/ });
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, "whsec_not base64!"), TypeError);
});

test("a time more than the tolerance old or ahead is refused, within it accepted", async () => {
  const secret = newSecret();
  const outcome = failed();
  const at = nowSeconds();
  const [delivery] = sign({ secret, id: outcome.id, timestamp: at, outcome });
  const [old] = sign({ secret, id: outcome.id, timestamp: at - 301, outcome });

  await refused(verifyWebhook(old.body, old.headers, secret, { now: at * 1000 }), /^webhook-timestamp: 301 s old, more than 300 s/);
  await refused(verifyWebhook(delivery.body, delivery.headers, secret, { now: (at - 301) * 1000 }), /^webhook-timestamp: 301 s ahead/);
  await refused(verifyWebhook(delivery.body, delivery.headers, secret, { now: new Date((at + 61) * 1000), tolerance: 60 }), /61 s old, more than 60 s/);
  assert.equal((await verifyWebhook(old.body, old.headers, secret, { now: at * 1000, tolerance: 600 })).id, outcome.id);
  await refused(verifyWebhook(delivery.body, { ...delivery.headers, "webhook-timestamp": "12.5" }, secret), /webhook-timestamp: "12.5" is not unix seconds/);
});

test("a missing header is refused, naming it; header names are matched in any case", async () => {
  const secret = newSecret();
  const outcome = failed();
  const [delivery] = sign({ secret, id: outcome.id, timestamp: nowSeconds(), outcome });

  for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
    const { [name]: _, ...rest } = delivery.headers;
    await refused(verifyWebhook(delivery.body, rest, secret), new RegExp(`^missing header ${name}$`));
  }
  const upper = Object.fromEntries(Object.entries(delivery.headers).map(([k, v]) => [k.toUpperCase(), v]));
  assert.equal((await verifyWebhook(delivery.body, upper, secret)).id, outcome.id);
});

test("a signed body that is no outcome entry is refused, naming the field", async () => {
  const secret = newSecret();
  const at = nowSeconds();
  const bodies = [
    [JSON.stringify({ ...failed(), type: "audit.vanished" }), /^body\.type: "audit\.vanished" is not one of audit\.failed, /],
    [JSON.stringify({ ...failed(), event_id: "e-1" }), /^body\.event_id: "e-1" is not a UUID/],
    [JSON.stringify({ ...failed(), decided_at: undefined }), /^body\.decided_at: missing/],
    [JSON.stringify({ ...failed(), error_code: 7 }), /^body\.error_code: 7 is not a string or null/],
    ["[1, 2]", /^body: not a JSON object/],
    ["not json", /^body: not JSON/],
  ];
  const deliveries = sign(...bodies.map(([body], i) => ({ secret, id: `msg-${i}`, timestamp: at, body })));

  for (const [i, delivery] of deliveries.entries()) {
    await refused(verifyWebhook(delivery.body, delivery.headers, secret), bodies[i][1]);
  }
});

// What a Worker without `nodejs_compat` cannot load: a Node built-in, or a package not in the
// lock file's runtime dependencies. Followed from the entry of `standardwebhooks` through every
// require() it makes, as a bundler would.
test("standardwebhooks and what it requires need no Node built-ins, only runtime dependencies in the lock file", () => {
  const here = new URL("../", import.meta.url);
  const lock = JSON.parse(readFileSync(new URL("package-lock.json", here), "utf8"));
  const runtime = new Set(Object.entries(lock.packages).filter(([path, p]) => path.startsWith("node_modules/") && !p.dev).map(([path]) => path.slice("node_modules/".length)));
  assert.deepEqual(lock.packages[""].dependencies, { standardwebhooks: "1.1.1" });
  assert.ok(runtime.has("standardwebhooks"));

  const seen = new Map();
  const visit = (file) => {
    if (seen.has(file)) return;
    const source = readFileSync(file, "utf8");
    const specifiers = [...source.matchAll(/\brequire\(\s*["']([^"']+)["']\s*\)|\bimport\s*(?:[^"';]*?\bfrom\s*)?["']([^"']+)["']/g)].map((m) => m[1] ?? m[2]);
    seen.set(file, specifiers);
    for (const specifier of specifiers) {
      const name = specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : specifier.split("/")[0];
      assert.ok(!specifier.startsWith("node:") && !builtinModules.includes(name), `${file} requires the Node built-in ${specifier}`);
      if (!specifier.startsWith(".")) assert.ok(runtime.has(name), `${file} requires ${specifier}, not a runtime dependency in package-lock.json`);
      visit(createRequire(file).resolve(specifier));
    }
    assert.doesNotMatch(source, /\b(?:Buffer|process|global)\s*\.\s*\w/, `${file} uses a Node global`);
  };
  visit(createRequire(new URL("src/webhooks.js", here)).resolve("standardwebhooks"));

  const packages = new Set([...seen.keys()].map((file) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file)[1]));
  assert.deepEqual([...packages].sort(), ["@stablelib/base64", "fast-sha256", "standardwebhooks"]);
});
