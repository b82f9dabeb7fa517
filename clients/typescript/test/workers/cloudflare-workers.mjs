// What the example needs of the Workers runtime's `cloudflare:workers` module, for running it
// under Node: WorkflowEntrypoint keeps the context and the environment, as the runtime's does.
export class WorkflowEntrypoint {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
  }
}
