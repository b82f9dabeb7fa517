// Parses an AsyncAPI document (a file, or standard input) with the AsyncAPI parser and prints
// its diagnostics as JSON: {"valid": bool, "diagnostics": [{severity, code, message, path}],
// "messages": [ids], "channels": [addresses], "operations": [ids]}. Exit 1 when invalid.
// Severity: 0 error, 1 warning, 2 information, 3 hint.
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";

const source = process.argv[2] && process.argv[2] !== "-" ? process.argv[2] : 0;
const text = readFileSync(source, "utf8");
const { document, diagnostics } = await new Parser().parse(text);
const out = {
  valid: document !== undefined && !diagnostics.some((d) => d.severity === 0),
  diagnostics: diagnostics.map((d) => ({
    severity: d.severity,
    code: d.code,
    message: d.message,
    path: d.path,
  })),
};
if (document !== undefined) {
  out.version = document.version();
  out.messages = document.allMessages().all().map((m) => m.id());
  out.channels = document.channels().all().map((c) => c.address());
  out.operations = document.operations().all().map((o) => ({
    id: o.id(),
    action: o.action(),
    channels: o.channels().all().map((c) => c.address()),
    messages: o.messages().all().map((m) => m.id()),
  }));
}
process.stdout.write(JSON.stringify(out, null, 2) + "\n");
process.exit(out.valid ? 0 : 1);
