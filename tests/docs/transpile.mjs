// Transpiles one TypeScript doc block to an ES module beside it (.mjs), with
// the TypeScript client's own compiler (typescript/node_modules): types are
// stripped, not checked; the block is run as a reader would run it.
import { readFileSync, writeFileSync } from "node:fs";
import ts from "typescript";

const [source] = process.argv.slice(2);
const out = ts.transpileModule(readFileSync(source, "utf8"), {
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  fileName: source,
  reportDiagnostics: true,
});
for (const d of out.diagnostics ?? []) {
  console.error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
}
if ((out.diagnostics ?? []).length) process.exit(1);
writeFileSync(source.replace(/\.ts$/, ".mjs"), out.outputText);
