// Builds the page into dist/ (npm run build), or with --tests compiles the
// TypeScript tests into test-dist/ for node's built-in test runner.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync } from "node:fs";

const here = (p) => new URL(p, import.meta.url).pathname;

if (process.argv.includes("--tests")) {
  rmSync(here("test-dist"), { recursive: true, force: true });
  await build({
    entryPoints: [here("test/vectors.test.ts"), here("test/client.test.ts")],
    outdir: here("test-dist"),
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node18",
    // node: built-ins stay imports; the protocol and @msgpack/msgpack are bundled.
    external: ["node:*"],
    logLevel: "warning",
  });
} else {
  const dist = here("dist");
  rmSync(dist, { recursive: true, force: true });
  mkdirSync(dist, { recursive: true });
  await build({
    entryPoints: [here("src/main.ts")],
    outfile: `${dist}/app.js`,
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    sourcemap: true,
    logLevel: "warning",
  });
  cpSync(here("index.html"), `${dist}/index.html`);
  cpSync(here("style.css"), `${dist}/style.css`);
  cpSync(here("node_modules/@xterm/xterm/css/xterm.css"), `${dist}/xterm.css`);
  console.log(`built ${dist}`);
}
