// A real `auditrec serve` (api, projector, reconciler) on SQLite in a temporary directory,
// behind a bearer token, spawned from the checkout's .venv (or $AUDITREC).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const AUDITREC = process.env.AUDITREC ?? fileURLToPath(new URL("../../../.venv/bin/auditrec", import.meta.url));
export const TOKEN = "worker-token-0123456789";
export const VIEWER = "viewer-token-0123456789"; // a token of scope read

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function healthy(url) {
  try {
    return (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) })).ok;
  } catch {
    return false;
  }
}

export async function startServe() {
  const dir = mkdtempSync(join(tmpdir(), "auditrec-ts-"));
  const port = await freePort();
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("AUDITREC_")));
  Object.assign(env, {
    AUDITREC_EVENT_LOG_URL: `sqlite:///${dir}/events.db`,
    AUDITREC_DATABASE_URL: `sqlite:///${dir}/audits.db`,
    AUDITREC_API_PORT: String(port),
    AUDITREC_METRICS_PORT: "0",
    AUDITREC_API_TOKENS: `${TOKEN},viewer:${VIEWER}:read`,
    AUDITREC_LOG_FORMAT: "json",
  });
  const init = spawnSync(AUDITREC, ["init"], { env, encoding: "utf8", timeout: 120_000 });
  if (init.status !== 0) throw new Error(`auditrec init failed: ${init.stderr ?? init.error}`);
  const log = join(dir, "serve.log");
  const out = openSync(log, "w");
  const child = spawn(AUDITREC, ["serve", "--only", "api,projector,reconciler"], {
    env,
    stdio: ["ignore", out, out],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  while (!(await healthy(url))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`serve did not answer /healthz: ${readFileSync(log, "utf8").slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    port,
    token: TOKEN,
    async stop() {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
