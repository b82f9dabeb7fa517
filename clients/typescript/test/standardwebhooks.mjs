// Deliveries signed by the official Standard Webhooks library (the Python `standardwebhooks`
// in auditrec's venv, next to $AUDITREC), their bodies written by auditrec's Outcome model.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";

import { AUDITREC } from "./serve.mjs";

const PYTHON = join(dirname(AUDITREC), "python");

// Each delivery: {secret, id, timestamp, outcome (the Outcome model's fields) or body}, signed
// by standardwebhooks; out: the body as auditrec writes it and its webhook-signature.
const SIGN = `
import json, sys
from datetime import datetime, timezone
from standardwebhooks import Webhook
from statemachine.outcomes import Outcome

out = []
for d in json.load(sys.stdin):
    body = Outcome.model_validate(d["outcome"]).model_dump_json() if "outcome" in d else d["body"]
    at = datetime.fromtimestamp(d["timestamp"], timezone.utc)
    out.append({"body": body, "signature": Webhook(d["secret"]).sign(d["id"], at, body)})
print(json.dumps(out))
`;

export function sign(...deliveries) {
  const run = spawnSync(PYTHON, ["-c", SIGN], { input: JSON.stringify(deliveries), encoding: "utf8", timeout: 60_000 });
  assert.equal(run.status, 0, `python signing failed: ${run.stderr ?? run.error}`);
  return JSON.parse(run.stdout).map((signed, i) => ({
    body: signed.body,
    headers: { "webhook-id": deliveries[i].id, "webhook-timestamp": String(deliveries[i].timestamp), "webhook-signature": signed.signature },
  }));
}

export const newSecret = () => `whsec_${randomBytes(32).toString("base64")}`;
