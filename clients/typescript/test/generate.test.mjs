// The type generator: JSON Schema as pydantic writes it → TypeScript, and a clear refusal of
// what it does not understand (rather than a wrong type).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { generate } from "../scripts/generate-types.mjs";

function schemaDir(schema) {
  const dir = mkdtempSync(join(tmpdir(), "auditrec-gen-"));
  mkdirSync(join(dir, "publish"));
  writeFileSync(join(dir, "publish", "Thing.json"), JSON.stringify(schema));
  writeFileSync(
    join(dir, "index.json"),
    JSON.stringify({ public: ["Thing"], types: { Thing: { schema_version: 3, schemas: { publish: { file: "publish/Thing.json" } } } } }),
  );
  return dir;
}

test("objects, optional and nullable fields, enums, refs, maps and docs become TypeScript", () => {
  const dir = schemaDir({
    $id: "https://auditrec.dev/schemas/v3/publish/Thing.json",
    title: "Thing",
    description: "A thing.",
    type: "object",
    additionalProperties: false,
    required: ["type", "data"],
    properties: {
      type: { const: "Thing", type: "string" },
      audit_id: { type: "string", pattern: "^[a-z0-9-]{2,64}$" },
      data: { $ref: "#/$defs/ThingData" },
      tags: { type: "array", items: { anyOf: [{ type: "string" }, { type: "null" }] } },
    },
    $defs: {
      ThingData: {
        type: "object",
        required: ["kind"],
        properties: {
          kind: { enum: ["a", "b"], type: "string", description: "Which.", examples: ["a"] },
          count: { anyOf: [{ type: "integer" }, { type: "null" }], default: null },
          extra: { type: "object", additionalProperties: { type: "number" } },
        },
      },
    },
  });
  try {
    const files = generate(dir);
    const dts = files["events.d.ts"];
    assert.match(dts, /\/\*\*\n \* A thing\.\n \*\/\nexport interface Thing \{/);
    assert.match(dts, /  type: "Thing";/);
    assert.match(dts, /  data: ThingData;/);
    assert.match(dts, /  tags\?: \(string \| null\)\[\];/);
    assert.match(dts, /   \* Which\.\n   \* @example "a"\n   \*\/\n  kind: "a" \| "b";/);
    assert.match(dts, /  count\?: number \| null;/);
    assert.match(dts, /  extra\?: \{\n    \[key: string\]: number;\n  \};/);
    assert.match(dts, /export type PublishedEvent = Thing;/);
    assert.match(files["schema.js"], /"Thing": 3/);
    assert.match(files["schema.js"], /v3\/publish\/Thing\.json/);
    assert.match(files["schema.js"], /AUDIT_ID_PATTERN = new RegExp\("\^\[a-z0-9-\]\{2,64\}\$"\)/);
    assert.match(files["schema.js"], /AUDIT_ID_RULE = "must be 2-64 characters of \[a-z0-9-\]"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("an audit-id pattern it cannot put in words stops it, naming the schema", () => {
  const dir = schemaDir({
    title: "Thing",
    type: "object",
    properties: { audit_id: { type: "string", pattern: "^a+$" } },
  });
  try {
    assert.throws(() => generate(dir), /publish\/Thing\.json: audit_id pattern "\^a\+\$" is not/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a keyword it does not understand stops it, naming the schema and the keyword", () => {
  const dir = schemaDir({ title: "Thing", type: "object", properties: { x: { not: { type: "string" } } } });
  try {
    assert.throws(() => generate(dir), /publish\/Thing\.json\.x: unsupported keyword not/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
