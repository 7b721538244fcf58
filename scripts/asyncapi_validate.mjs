// Validates AsyncAPI documents with the official parser (@asyncapi/parser,
// installed by `scripts/tools asyncapi-parser`) and prints, for each file,
// every diagnostic of any severity as one JSON array on stdout:
//
//   ASYNCAPI_PARSER_DIR="$(scripts/tools asyncapi-parser)" \
//     node scripts/asyncapi_validate.mjs doc.json [more.json ...]
//
// Output: {"<file>": [{"code", "severity", "message", "path"}], ...}. The
// exit status is 0 when every file was read, whatever the diagnostics say:
// the caller judges them (the tests want none at all).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const dir = process.env.ASYNCAPI_PARSER_DIR;
if (!dir) {
  console.error("ASYNCAPI_PARSER_DIR is not set: set it to what `scripts/tools asyncapi-parser` prints");
  process.exit(2);
}
const require = createRequire(path.join(dir, "package.json"));
const { Parser } = require("@asyncapi/parser");

// Spectral's severities, by number.
const severities = ["error", "warning", "info", "hint"];

const parser = new Parser();
const out = {};
for (const file of process.argv.slice(2)) {
  const { diagnostics } = await parser.parse(readFileSync(file, "utf8"), { source: path.resolve(file) });
  out[file] = diagnostics.map((d) => ({
    code: String(d.code),
    severity: severities[d.severity] ?? String(d.severity),
    message: d.message,
    path: d.path.join("/"),
  }));
}
process.stdout.write(JSON.stringify(out, null, 2) + "\n");
