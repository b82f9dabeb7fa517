// A Cloudflare Worker that keeps a product's own `audits` table (D1) up to date from auditrec's
// outcome feed, whichever way it comes: from a Cloudflare Queue (`queue`) or as a signed
// webhook (`fetch`). An entry may come more than once, always with the same id: the update
// writes it only when the row does not hold that id already. wrangler: a D1 binding DB, a
// queue consumer of the outcome queue, and AUDITREC_WEBHOOK_SECRET (secret, `whsec_…`).
import { verifyWebhook, WebhookVerificationError } from "auditrec-client";

// Keyed by the entry's id: a redelivery of the entry the row holds changes nothing. (An older
// entry delivered again after a newer one would be written again: keep each applied id in a
// table of its own when that matters.)
const APPLY = "UPDATE audits SET status = ?, error_code = ?, outcome_id = ? WHERE id = ? AND outcome_id IS NOT ?";

/** Applies one entry; resolves to whether the row changed. */
async function apply(db, outcome) {
  const result = await db
    .prepare(APPLY)
    .bind(outcome.status, outcome.error_code, outcome.id, outcome.audit_id, outcome.id)
    .run();
  return result.meta.changes > 0;
}

export default {
  async queue(batch, env) {
    for (const message of batch.messages) {
      try {
        await apply(env.DB, message.body);
        message.ack();
      } catch (error) {
        console.error(`outcome ${message.body?.id}: ${error}`);
        message.retry();
      }
    }
  },

  async fetch(request, env) {
    if (request.method !== "POST") return new Response("POST an outcome\n", { status: 405 });
    let outcome;
    try {
      outcome = await verifyWebhook(await request.text(), request.headers, env.AUDITREC_WEBHOOK_SECRET);
    } catch (error) {
      if (error instanceof WebhookVerificationError) return new Response(`${error.message}\n`, { status: 401 });
      throw error;
    }
    await apply(env.DB, outcome);
    return new Response(null, { status: 204 });
  },
};
