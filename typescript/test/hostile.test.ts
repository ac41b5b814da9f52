// The client against servers that lie (issue 48): every case of the shared
// list tests/hostile/cases.json, against the fake server of
// hostile-server.ts. Each call runs in a process of its own
// (hostile-client.ts), which measures its wall time and the growth of its
// peak memory; this process runs the fake server and checks what the case
// expects. A case whose act, call, client setting or expectation this
// suite does not know fails: the list is never skipped in part.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { closedPort, repoRoot } from "./harness.js";
import { CALLS, CLIENT_KEYS } from "./hostile-client.js";
import { ACTS, HostileServer } from "./hostile-server.js";

interface Case {
  id: string;
  description: string;
  act: string;
  call: string;
  client?: Record<string, number>;
  expect: { outcome: string; error_contains?: string[]; deadline_ms: number; memory_mb?: number; requests_max?: number };
}

interface Result {
  outcome: string;
  error?: string;
  elapsed_ms: number;
  growth_mib: number;
}

const document = JSON.parse(readFileSync(resolve(repoRoot, "tests/hostile/cases.json"), "utf8")) as { format: number; cases: Case[] };
const CHILD = resolve(dirname(fileURLToPath(import.meta.url)), "hostile-client.js");
const KNOWN_ACTS = new Set([...Object.keys(ACTS), "tcp_refused"]);
const EXPECT_KEYS = new Set(["outcome", "error_contains", "deadline_ms", "memory_mb", "requests_max"]);
/** Each outcome of the list, and the outcomes of a call that meet it. */
const OUTCOMES: Record<string, string[]> = { error: ["error"], bounded: ["error", "running"] };
/** Allowed on top of a case's deadline for its process to start and report, before it is killed. */
const STARTUP_SLACK_MS = 20_000;

/** What in `c` this suite has no handler for. */
function unhandled(c: Case): string[] {
  const missing: string[] = [];
  if (!KNOWN_ACTS.has(c.act)) missing.push(`act ${JSON.stringify(c.act)}`);
  if (!(c.call in CALLS)) missing.push(`call ${JSON.stringify(c.call)}`);
  for (const k of Object.keys(c.client ?? {})) if (!CLIENT_KEYS.includes(k)) missing.push(`client setting ${JSON.stringify(k)}`);
  for (const k of Object.keys(c.expect ?? {})) if (!EXPECT_KEYS.has(k)) missing.push(`expectation ${JSON.stringify(k)}`);
  if (!Object.hasOwn(OUTCOMES, c.expect?.outcome ?? "")) missing.push(`outcome ${JSON.stringify(c.expect?.outcome)}`);
  return missing;
}

test("the hostile list holds nothing this suite cannot run", () => {
  assert.equal(document.format, 1, "a format this suite does not read");
  const ids = document.cases.map((c) => c.id);
  assert.equal(new Set(ids).size, ids.length, "case ids repeat");
  const problems = document.cases.filter((c) => unhandled(c).length > 0).map((c) => `${c.id}: ${unhandled(c).join(", ")}`);
  assert.deepEqual(problems, [], "cases this suite has no handler for");
});

/** Runs the case's call in a process of its own against `url`; kills it past twice the deadline. */
function runCall(url: string, c: Case): Promise<Result> {
  const spec = JSON.stringify({ url, call: c.call, client: c.client ?? {}, stop_after_ms: c.expect.deadline_ms });
  return new Promise((resolveResult, reject) => {
    const child = spawn(process.execPath, [CHILD, spec], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const limit = 2 * c.expect.deadline_ms + STARTUP_SLACK_MS;
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${c.id}: the call did not end within ${limit} ms (killed)`));
    }, limit);
    child.on("exit", (code) => {
      clearTimeout(timer);
      const line = out.trim().split("\n").pop();
      if (code !== 0 || !line) return reject(new Error(`${c.id}: the call's process failed (${code}):\n${err}`));
      resolveResult(JSON.parse(line) as Result);
    });
  });
}

for (const c of document.cases) {
  test(`hostile case ${c.id}`, { timeout: 2 * (c.expect?.deadline_ms ?? 0) + 2 * STARTUP_SLACK_MS }, async () => {
    assert.deepEqual(unhandled(c), [], `${c.id}: this suite has no handler for these`);
    const server = c.act === "tcp_refused" ? undefined : await new HostileServer(c.act).start();
    let result: Result;
    try {
      result = await runCall(server?.url ?? `http://127.0.0.1:${await closedPort()}`, c);
    } finally {
      await server?.stop();
    }
    const where = `${c.id} (${c.description})`;
    assert.ok(OUTCOMES[c.expect.outcome]!.includes(result.outcome), `${where}: ${JSON.stringify(result)}`);
    if (result.outcome === "error") {
      for (const needle of c.expect.error_contains ?? []) {
        assert.ok(result.error!.toLowerCase().includes(needle.toLowerCase()), `${where}: no ${JSON.stringify(needle)} in ${result.error}`);
      }
      assert.ok(result.elapsed_ms < c.expect.deadline_ms, `${where}: took ${Math.round(result.elapsed_ms)} ms: ${JSON.stringify(result)}`);
    }
    if (c.expect.memory_mb !== undefined) {
      assert.ok(result.growth_mib < c.expect.memory_mb, `${where}: peak memory grew ${result.growth_mib.toFixed(0)} MiB`);
    }
    if (c.expect.requests_max !== undefined) {
      assert.ok(server !== undefined && server.requests <= c.expect.requests_max, `${where}: ${server?.requests} requests`);
    }
  });
}
