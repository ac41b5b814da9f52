// What the browser tests share: Debian's Chromium (never a downloaded
// browser) driving the page served by a real tetherd, read through xterm's
// buffer API (window.tether.text()). Every wait is a bounded wait on a
// condition; nothing sleeps to synchronise.
//
//   TETHERD_BIN   tetherd to run (default ../target/debug/tetherd)
//   CHROMIUM_BIN  browser to drive (default /usr/bin/chromium)
//
// `setup` (a file's `before`) starts the shared tetherd and the browser,
// `teardown` (its `after`) ends them; `server`, `baseUrl` and `browser` are
// live bindings, set by `setup`.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { connect, createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const webDemo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const tetherd = resolve(webDemo, process.env.TETHERD_BIN ?? "../target/debug/tetherd");
export const webRoot = resolve(webDemo, "dist");
export const artifacts = resolve(webDemo, "test-artifacts");
// A shell without rc files, so prompts and output are the same everywhere.
export const SHELL = "bash --norc --noprofile -i";
export const TIMEOUT = 20_000;

export let server;
export let baseUrl;
export let browser;

export async function setup() {
  assert.ok(existsSync(tetherd), `tetherd not found at ${tetherd}: build it (cargo build -p tether-server) or set TETHERD_BIN`);
  assert.ok(existsSync(resolve(webRoot, "index.html")), `no ${webRoot}/index.html: run npm run build first`);
  mkdirSync(artifacts, { recursive: true });

  ({ server, baseUrl } = await startServer([]));

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
}

export async function teardown() {
  await browser?.close();
  await stopServer(server);
}

// Starts tetherd on an ephemeral port; resolves with the URL it prints
// (and, when it generated a token, the `open:` URL with it). Tests that
// are not about tokens run with --no-token (tetherd would generate one).
export async function startServer(extraArgs, { tokenless = !extraArgs.includes("--token"), env = {} } = {}) {
  const tokenArgs = tokenless ? ["--no-token"] : [];
  const child = spawn(tetherd, ["--listen", "127.0.0.1:0", "--web-root", webRoot, ...tokenArgs, ...extraArgs], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn", ...env },
  });
  let openUrl;
  const opened = new Promise((resolveOpen) => {
    openUrl = resolveOpen;
  });
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("tetherd printed no 'listening on' line within 10 s")), 10_000);
    child.once("exit", (code) => reject(new Error(`tetherd exited early with ${code}`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const match = /tetherd listening on (https?:\/\/[^\s]+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1].replace(/\/$/, ""));
      }
      const open = /^open: (\S+)/.exec(line);
      if (open) openUrl(open[1]);
    });
  });
  return { server: child, baseUrl: url, opened };
}

export async function stopServer(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  // Shutdown gives sessions a grace period; past a bound, stop it anyway.
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}

// Opens the page on a new shell (or the given fragment) and waits for a
// prompt. Every console error, uncaught exception and failed request of the
// page is collected in `page.problems`.
// `query` (without the `?`) goes before the fragment, as ttyd's preferences do.
// The page follows the system's colour scheme (theme=system): the tests'
// browser is dark unless a test asks otherwise (`context: { colorScheme }`);
// `context` also takes isMobile, hasTouch and the rest of newContext's options.
// `init` runs in the page before its own scripts (page.addInitScript).
export async function openTerminal(fragment = `cmd=${encodeURIComponent(SHELL)}`, { url = baseUrl, query, viewport = { width: 1100, height: 700 }, onDialog, prompt = true, ignoreHTTPSErrors = false, permissions = [], context = {}, init } = {}) {
  const page = await browser.newPage({ viewport, ignoreHTTPSErrors, permissions, colorScheme: "dark", ...context });
  if (init) await page.addInitScript(init);
  page.problems = [];
  page.on("pageerror", (e) => {
    console.error("page error:", e);
    page.problems.push(`page error: ${e.message}`);
  });
  page.on("console", (m) => m.type() === "error" && page.problems.push(`console error: ${m.text()}`));
  page.on("response", (r) => r.status() >= 400 && page.problems.push(`${r.status()} ${r.url()}`));
  page.on("requestfailed", (r) => page.problems.push(`failed ${r.url()}: ${r.failure()?.errorText}`));
  if (onDialog) page.on("dialog", onDialog);
  await page.goto(`${url}/${query ? `?${query}` : ""}#${fragment}`);
  await page.waitForFunction(() => window.tether?.status.startsWith("attached"), null, { timeout: TIMEOUT });
  // The prompt (`bash-5.2# `) ends the last line.
  if (prompt) await waitForText(page, /[#$] ?$/);
  return page;
}

// Waits until the terminal's text (scrollback and screen) matches `pattern`.
export async function waitForText(page, pattern, timeout = TIMEOUT) {
  try {
    await page.waitForFunction(
      ([source, flags]) => new RegExp(source, flags).test(window.tether.text()),
      [pattern.source, pattern.flags.includes("m") ? pattern.flags : `${pattern.flags}m`],
      { timeout, polling: 50 },
    );
  } catch (e) {
    const text = await page.evaluate(() => window.tether.text()).catch(() => "(page gone)");
    throw new Error(`terminal never matched ${pattern}:\n${text.trimEnd().split("\n").slice(-15).join("\n")}\n${e.message}`);
  }
}

export async function run(page, command) {
  await page.locator("#terminal").click();
  await page.keyboard.type(command);
  await page.keyboard.press("Enter");
}

// Makes a share link as a person does: "share" opens the box (unless it is
// open), then the kind of link. Resolves when the link is shown.
export async function shareLink(page, { write = false } = {}) {
  const before = await page.evaluate(() => window.tether.shareUrl);
  if (await page.locator("#share").isHidden()) await page.locator("#share-open").click();
  await page.locator(write ? "#share-write" : "#share-read").click();
  await page.waitForFunction((old) => window.tether.shareUrl !== undefined && window.tether.shareUrl !== old, before, { timeout: TIMEOUT });
  return page.evaluate(() => window.tether.shareUrl);
}

export const count = (text, pattern) => (text.match(new RegExp(pattern.source, "gm")) ?? []).length;
export const screenshot = (page, name) => page.screenshot({ path: resolve(artifacts, `${name}.png`) });

// A TCP proxy to tetherd whose connections the test can cut.
export async function startProxy(targetPort) {
  const pairs = new Set();
  let refusing = false;
  const server = createServer((client) => {
    if (refusing) return client.destroy();
    const upstream = connect(Number(targetPort), "127.0.0.1");
    const pair = [client, upstream];
    pairs.add(pair);
    const end = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    for (const socket of pair) socket.on("error", end).on("close", end);
    client.pipe(upstream).pipe(client);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    cut() {
      refusing = true;
      for (const [client, upstream] of pairs) {
        client.resetAndDestroy();
        upstream.destroy();
      }
    },
    restore() {
      refusing = false;
    },
    close: () => new Promise((r) => server.close(r)),
  };
}
