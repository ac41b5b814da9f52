// Runs one call of a hostile case in a process of its own and prints what
// happened as one JSON line: how it ended, how long it took, how much its
// peak memory grew. `node hostile-client.js SPEC`, SPEC being JSON: `url`
// (the server's), `call` and `client` as in tests/hostile/cases.json, and
// `stop_after_ms`, when a call still running is stopped and reported as
// `running`. Run by hostile.test.ts, which imports its vocabulary (CALLS,
// CLIENT_KEYS).

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { TetherClient, TetherError, type AttachOptions } from "@tether/client";

const PROCESS_ID = "0123456789abcdef0123456789abcdef";

type Settings = Record<string, number>;

/** Every `client` setting of the list. */
export const CLIENT_KEYS = ["request_timeout_ms", "retry_budget_ms", "reconnect_budget_ms", "connect_timeout_ms", "max_answer_bytes", "window"];

function attachOptions(settings: Settings): AttachOptions {
  const options: AttachOptions = {};
  if (settings.window !== undefined) options.window = settings.window;
  if (settings.connect_timeout_ms !== undefined) options.connectTimeoutMs = settings.connect_timeout_ms;
  if (settings.reconnect_budget_ms !== undefined) options.reconnect = { budgetMs: settings.reconnect_budget_ms };
  return options;
}

/** Every `call` of the list. */
export const CALLS: Record<string, (client: TetherClient, settings: Settings) => Promise<unknown>> = {
  list: (client) => client.list(),
  get: (client) => client.get(PROCESS_ID),
  read_output: (client) => client.readOutput(PROCESS_ID),
  exec: (client) => client.exec("true"),
  async attach_read(client, settings) {
    const attachment = await client.attach(PROCESS_ID, attachOptions(settings));
    try {
      await attachment.stdout.readAll();
      await attachment.exit;
    } finally {
      attachment.close();
    }
  },
};

function clientOf(url: string, settings: Settings): TetherClient {
  const unknown = Object.keys(settings).filter((k) => !CLIENT_KEYS.includes(k));
  if (unknown.length > 0) throw new Error(`client settings this suite does not know: ${unknown.join(", ")}`);
  return new TetherClient({
    baseUrl: url,
    // A token given: no runtime entry of this machine is looked for.
    token: "hostile-test",
    ...(settings.retry_budget_ms === undefined ? {} : { retry: { budgetMs: settings.retry_budget_ms } }),
    ...(settings.request_timeout_ms === undefined ? {} : { requestTimeoutMs: settings.request_timeout_ms }),
    ...(settings.max_answer_bytes === undefined ? {} : { maxAnswerBytes: settings.max_answer_bytes }),
  });
}

/**
 * `VmRSS` (resident now) or `VmHWM` (the most resident since this program
 * started) in KiB. Not `process.resourceUsage().maxRSS`: Linux carries it
 * across `execve` from the process that spawned this one (the test runner).
 */
function statusKib(field: "VmRSS" | "VmHWM"): number {
  const line = readFileSync("/proc/self/status", "latin1").split("\n").find((l) => l.startsWith(`${field}:`));
  if (!line) throw new Error(`no ${field} in /proc/self/status`);
  return Number(line.split(/\s+/)[1]);
}

/** The error with its chain of causes. */
function text(error: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = error; e !== undefined && parts.length < 10; e = e instanceof Error ? e.cause : undefined) {
    parts.push(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
  }
  return parts.join(" <- ");
}

interface Spec {
  url: string;
  call: string;
  client: Settings;
  stop_after_ms: number;
}

async function main(spec: Spec): Promise<void> {
  const call = CALLS[spec.call];
  if (!call) throw new Error(`no call ${spec.call}`);
  const client = clientOf(spec.url, spec.client);
  const before = statusKib("VmRSS");
  const started = performance.now();
  let outcome: { outcome: string; error?: string } = { outcome: "success" };
  let stop: ReturnType<typeof setTimeout> | undefined;
  const running = new Promise<"running">((resolve) => (stop = setTimeout(() => resolve("running"), spec.stop_after_ms)));
  try {
    if ((await Promise.race([call(client, spec.client), running])) === "running") outcome = { outcome: "running" };
  } catch (e) {
    outcome = { outcome: e instanceof TetherError ? "error" : "foreign", error: text(e) };
  }
  clearTimeout(stop);
  const elapsedMs = performance.now() - started;
  const growthMib = Math.max(0, statusKib("VmHWM") - before) / 1024;
  process.stdout.write(`${JSON.stringify({ ...outcome, elapsed_ms: elapsedMs, growth_mib: growthMib })}\n`, () => process.exit(0));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  void main(JSON.parse(process.argv[2]!) as Spec);
}
