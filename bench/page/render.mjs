#!/usr/bin/env node
// How long a browser terminal page takes to show the end of a large output,
// and whether it answers a keystroke meanwhile (issue 49): tetherd's page
// (web-demo/dist) beside ttyd's, in the same Chromium (Debian's, driven by
// playwright-core from web-demo/node_modules), with the same viewport,
// shell and output, runs alternating between the two pages.
//
//   node bench/page/render.mjs [--ttyd PATH] [--tetherd PATH] [--runs N]
//                              [--quick] [--json FILE] [--only seq,ls-once,ls]
//
// Each run opens a new tab on a new shell (`bash --norc --noprofile -i`),
// types a command that writes the output and then a line only the shell's
// arithmetic makes (`echo render-$((40+2))-end`, so the typed command
// itself never matches), and times from the Enter key to the animation
// frame in which that line is in the terminal's buffer (xterm's buffer
// API: `window.tetherTerm` on tetherd's page, `window.term` on ttyd's).
// Meanwhile a Shift key is pressed every 100 ms (it sends nothing to the
// shell); for each, the page's own keydown listener measures how long the
// event waited for the page's main thread (`performance.now() -
// event.timeStamp`), and a PerformanceObserver lists the long tasks (main
// thread busy for more than 50 ms). Outputs:
//
//   seq       `seq 1 2000000` (14.9 MB)
//   ls-once   a colourful `ls -R` (GNU ls --color=always -C -w 120 of /usr,
//             a few MB), written beforehand to a file that the shell `cat`s
//   ls        the same repeated to about 50 MB
//
// A run fails, and says so, if the server ends or the page loses its
// connection (ttyd's page then starts a new shell: the output is gone).
//
// `--quick`: 200,000 numbers and one copy of the listing, one run (a check
// that the harness works, not a measurement). ttyd is not in Debian 12:
// build it from its public source (tsl0922/ttyd, cmake with Debian's
// libwebsockets-dev, libjson-c-dev, libuv1-dev) and pass its path; without
// `--ttyd` only tetherd's page is measured. Nothing here is asserted.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

const here = (p) => resolve(new URL(".", import.meta.url).pathname, p);
const { chromium } = createRequire(here("../../web-demo/package.json"))("playwright-core");

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const quick = args.includes("--quick");
const runs = Number(option("--runs", quick ? "1" : "3"));
const ttydBin = option("--ttyd", undefined);
const tetherdBin = option("--tetherd", here("../../target/release/tetherd"));
const jsonOut = option("--json", undefined);
const only = option("--only", undefined)?.split(",");
const webRoot = here("../../web-demo/dist");
const SHELL = ["bash", "--norc", "--noprofile", "-i"];
const VIEWPORT = { width: 1100, height: 700 };
const END = "render-42-end";
const END_COMMAND = "echo render-$((40+2))-end";
const RENDER_TIMEOUT_MS = 600_000;

// The listing: `ls -R` of /usr in colour, repeated to about 50 MB.
const scratch = mkdtempSync(join(tmpdir(), "page-render-"));
const listing = join(scratch, "ls-R.txt");
const smallListing = join(scratch, "ls-R-once.txt");
{
  const once = execFileSync("ls", ["-R", "--color=always", "-C", "-w", "120", "/usr"], {
    maxBuffer: 256 << 20,
    env: { ...process.env, LS_COLORS: "" },
  });
  writeFileSync(smallListing, once);
  const copies = quick ? 1 : Math.ceil((50 << 20) / once.length);
  writeFileSync(listing, Buffer.concat(Array(copies).fill(once)));
}
const workloads = [
  { name: "seq", command: `seq 1 ${quick ? 200000 : 2000000}; ${END_COMMAND}`, bytes: seqBytes(quick ? 200000 : 2000000) },
  { name: "ls", command: `cat ${listing}; ${END_COMMAND}`, bytes: statSync(listing).size },
];
if (!quick) workloads.splice(1, 0, { name: "ls-once", command: `cat ${smallListing}; ${END_COMMAND}`, bytes: statSync(smallListing).size });
if (only) workloads.splice(0, workloads.length, ...workloads.filter((w) => only.includes(w.name)));

function seqBytes(n) {
  let total = 0;
  for (let digits = 1, low = 1; low <= n; digits++, low *= 10) total += (Math.min(n, low * 10 - 1) - low + 1) * (digits + 1);
  return total;
}

function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

async function startTetherd() {
  const child = spawn(tetherdBin, ["--listen", "127.0.0.1:0", "--web-root", webRoot, "--no-token"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: "warn,tether_server::server=info" },
  });
  const base = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("tetherd printed no 'listening on' line within 10 s")), 10_000);
    child.once("exit", (code) => fail(new Error(`tetherd exited with ${code}`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const match = /tetherd listening on (https?:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        ok(match[1].replace(/\/$/, ""));
      }
    });
  });
  return { name: "tetherd", child, url: `${base}/#cmd=${encodeURIComponent(SHELL.join(" "))}` };
}

async function startTtyd() {
  const port = await freePort();
  const child = spawn(ttydBin, ["-p", String(port), "-i", "127.0.0.1", "-W", ...SHELL], { stdio: ["ignore", "ignore", "ignore"] });
  const url = `http://127.0.0.1:${port}/`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`ttyd exited with ${child.exitCode}`);
    const ok = await fetch(url).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error("ttyd did not answer within 10 s");
    await new Promise((r) => setTimeout(r, 50));
  }
  return { name: "ttyd", child, url };
}

function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  return exited.finally(() => clearTimeout(timer));
}

// In the page: the terminal, whichever page this is.
const TERM = "(window.tetherTerm ?? window.term)";

/** Whether one of the last lines of the buffer starts with `text`. */
function lastLinesStartWith(text) {
  const term = window.tetherTerm ?? window.term;
  if (!term) return false;
  const buffer = term.buffer.active;
  for (let y = buffer.length - 1; y >= Math.max(0, buffer.length - term.rows - 2); y--) {
    if ((buffer.getLine(y)?.translateToString(true) ?? "").startsWith(text)) return true;
  }
  return false;
}

/** Whether the cursor's line ends with `text` (the command typed). */
function cursorLineEndsWith(text) {
  const term = window.tetherTerm ?? window.term;
  const buffer = term.buffer.active;
  return (buffer.getLine(buffer.baseY + buffer.cursorY)?.translateToString(true) ?? "").trimEnd().endsWith(text);
}

function installProbes() {
  const probes = { keyDelays: [], longTasks: [] };
  document.addEventListener("keydown", (e) => e.key === "Shift" && probes.keyDelays.push(performance.now() - e.timeStamp), true);
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) probes.longTasks.push(entry.duration);
  }).observe({ type: "longtask" });
  window.renderProbes = probes;
}

const percentile = (values, p) => {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};
const round = (v) => (v === null ? null : Math.round(v));

async function runOnce(browser, server, workload) {
  const page = await browser.newPage({ viewport: VIEWPORT });
  const logged = [];
  page.on("console", (message) => logged.push(message.text()));
  try {
    await page.goto(server.url);
    // A prompt: the shell is up and the page attached.
    await page.waitForFunction(
      () => {
        const term = window.tetherTerm ?? window.term;
        if (!term) return false;
        const b = term.buffer.active;
        return /[#$]$/.test((b.getLine(b.baseY + b.cursorY)?.translateToString(true) ?? "").trimEnd());
      },
      null,
      { timeout: 30_000, polling: 50 },
    );
    // tetherd's page says which renderer it uses; ttyd's logs it.
    const renderer = await page.evaluate(() => window.tether?.renderer?.active ?? null) ?? (logged.some((l) => /WebGL renderer loaded/.test(l)) ? "webgl" : "not webgl");
    await page.evaluate(`${TERM}.focus()`);
    await page.evaluate(installProbes);
    await page.keyboard.type(workload.command);
    // The command is on its line: from here, only the output is timed.
    await page.waitForFunction(cursorLineEndsWith, END_COMMAND, { timeout: 10_000, polling: 50 });
    const started = performance.now();
    await page.keyboard.press("Enter");
    let done = false;
    // A server that ends, or a page that loses its connection (ttyd's then
    // starts a new shell: the output is gone), fails the run at once.
    let serverEnded;
    let connectionLost;
    const failed = new Promise((_, fail) => {
      serverEnded = (code, signal) => fail(new Error(`${server.name} ended during the run (${signal ?? code})`));
      server.child.once("exit", serverEnded);
      connectionLost = (message) => /connection closed/.test(message.text()) && fail(new Error(`the page lost its connection: ${message.text()}`));
      page.on("console", connectionLost);
    });
    const shown = Promise.race([
      page.waitForFunction(lastLinesStartWith, END, { timeout: RENDER_TIMEOUT_MS, polling: "raf" }).then(() => performance.now() - started),
      failed,
    ]).finally(() => {
      done = true;
      server.child.off("exit", serverEnded);
      page.off("console", connectionLost);
    });
    shown.catch(() => {});
    const pressTimes = [];
    while (!done) {
      const at = performance.now();
      await page.keyboard.press("Shift");
      pressTimes.push(performance.now() - at);
      if (!done) await new Promise((r) => setTimeout(r, 100));
    }
    const ms = await shown.catch((e) => e);
    if (ms instanceof Error) {
      return { page: server.name, workload: workload.name, bytes: workload.bytes, renderer, failed: ms.message, after_ms: Math.round(performance.now() - started) };
    }
    const probes = await page.evaluate(() => window.renderProbes);
    const dropped = await page.evaluate(() => /bytes of output were dropped/.test(window.tether?.text?.() ?? ""));
    return {
      page: server.name,
      workload: workload.name,
      bytes: workload.bytes,
      renderer,
      ms: Math.round(ms),
      mb_per_s: Math.round((workload.bytes / 1e6 / (ms / 1000)) * 10) / 10,
      pressed: pressTimes.length,
      keys: probes.keyDelays.length,
      key_delay_p50_ms: round(percentile(probes.keyDelays, 50)),
      key_delay_max_ms: round(percentile(probes.keyDelays, 100)),
      key_press_p50_ms: round(percentile(pressTimes, 50)),
      key_press_max_ms: round(percentile(pressTimes, 100)),
      long_tasks: probes.longTasks.length,
      longest_task_ms: round(percentile(probes.longTasks, 100)),
      dropped,
    };
  } finally {
    await page.close();
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const servers = [await startTetherd()];
if (ttydBin) servers.push(await startTtyd());
else console.error("no --ttyd: measuring tetherd's page only");
const results = [];
try {
  for (let run = 1; run <= runs; run++) {
    for (const workload of workloads) {
      // Alternate which page goes first.
      const order = run % 2 ? servers : [...servers].reverse();
      for (const server of order) {
        const result = { run, ...(await runOnce(browser, server, workload)) };
        results.push(result);
        console.log(JSON.stringify(result));
      }
    }
  }
} finally {
  await browser.close();
  await Promise.all(servers.map((s) => stop(s.child)));
  rmSync(scratch, { recursive: true, force: true });
}

// The medians per page and output.
console.log("\n| output | page | runs | median ms | MB/s | key wait p50 / max ms | longest task ms |");
console.log("|---|---|---|---|---|---|---|");
for (const workload of workloads) {
  for (const server of servers) {
    const all = results.filter((r) => r.page === server.name && r.workload === workload.name);
    const mine = all.filter((r) => !r.failed);
    if (mine.length < all.length) {
      const failures = all.filter((r) => r.failed).map((r) => `${r.failed} after ${r.after_ms} ms`);
      console.log(`| ${workload.name} | ${server.name} | ${all.length - mine.length} failed | ${[...new Set(failures)].join("; ")} | | | |`);
      if (mine.length === 0) continue;
    }
    const median = (key) => round(percentile(mine.map((r) => r[key]), 50));
    const max = (key) => round(percentile(mine.map((r) => r[key]), 100));
    const mb = (workload.bytes / 1e6).toFixed(1);
    console.log(
      `| ${workload.name} (${mb} MB) | ${server.name} | ${mine.length} | ${median("ms")} | ${(workload.bytes / 1e3 / median("ms")).toFixed(1)} | ${median("key_delay_p50_ms")} / ${max("key_delay_max_ms")} | ${max("longest_task_ms")} |`,
    );
  }
}
if (jsonOut) writeFileSync(jsonOut, `${JSON.stringify(results, null, 2)}\n`);
