// A Cloudflare Workflow that reports its audit to auditrec from its steps. A step may run
// again (a retry, a restart): ids derived from the instance and the step make every run
// publish the same event, which auditrec records once. wrangler: AUDITREC_URL (var),
// AUDITREC_TOKEN (secret), and a workflow binding AUDIT_WORKFLOW of class AuditWorkflow.
import { WorkflowEntrypoint } from "cloudflare:workers";
import { AuditrecClient, auditCompleted, auditProgressed, auditStarted, eventIdFor } from "auditrec-client";

export class AuditWorkflow extends WorkflowEntrypoint {
  async run(event, step) {
    const { auditId, projectId, urls } = event.payload;
    const auditrec = new AuditrecClient({ baseUrl: this.env.AUDITREC_URL, token: this.env.AUDITREC_TOKEN, producer: "audit-workflow" });
    const report = (name, build) =>
      step.do(`report ${name}`, async () => {
        await auditrec.publish(build({ eventId: await eventIdFor(event.instanceId, name) }));
      });

    await report("started", (o) => auditStarted(auditId, { project_id: projectId, workflow_instance_id: event.instanceId, pages_total: urls.length }, o));
    let crawled = 0;
    for (const url of urls) {
      crawled = await step.do(`crawl ${url}`, async () => ((await fetch(url)).ok ? crawled + 1 : crawled));
      await report(`progress ${url}`, (o) => auditProgressed(auditId, { current_phase: "crawl", pages_crawled: crawled }, o));
    }
    await report("completed", (o) => auditCompleted(auditId, { pages_crawled: crawled, pages_total: urls.length }, o));
    return { crawled };
  }
}

export default {
  async fetch(request, env) {
    const { auditId, projectId, urls } = await request.json();
    const instance = await env.AUDIT_WORKFLOW.create({ params: { auditId, projectId, urls } });
    return Response.json({ instance: instance.id }, { status: 202 });
  },
};
