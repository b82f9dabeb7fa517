// Module resolution hook: `cloudflare:workers` is the stand-in next to this file.
const SHIM = new URL("./cloudflare-workers.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier === "cloudflare:workers") return { url: SHIM, shortCircuit: true };
  return next(specifier, context);
}
