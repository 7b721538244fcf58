#!/usr/bin/env node
// Runs npm json-schema-diff (the package directory is argv[2], as
// `scripts/tools json-schema-diff` prints it) over a batch of schema pairs:
// stdin is a JSON array of {"source": schema, "destination": schema}, and
// stdout one JSON line per pair, in order: {"added": bool, "removed": bool}
// (values the destination accepts that the source did not, and the other
// way), or {"error": message} when the tool cannot compare the pair.
"use strict";

const path = process.argv[2];
if (!path) {
  process.stderr.write("usage: json_schema_diff.js PACKAGE_DIR < pairs.json\n");
  process.exit(2);
}
const jsonSchemaDiff = require(path);

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", async () => {
  const pairs = JSON.parse(input);
  for (const pair of pairs) {
    let line;
    try {
      const result = await jsonSchemaDiff.diffSchemas({
        sourceSchema: pair.source,
        destinationSchema: pair.destination,
      });
      line = { added: result.additionsFound, removed: result.removalsFound };
    } catch (e) {
      line = { error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(line) + "\n");
  }
});
