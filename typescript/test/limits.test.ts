// Resource limits and usage (issue 31) through the TypeScript client against
// a real tetherd: `limits` in the spawn request, reason `oom`, the bill.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { TetherClient } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let client: TetherClient;

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(() => server?.stop());

const HOG = "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n";

test("a memory limit ends a hog with reason oom, and the process object carries limits and usage", async () => {
  const process = await client.spawn({ argv: ["python3", "-c", HOG], limits: { memory_bytes: 64 << 20, pids: 32 } });
  assert.deepEqual(process.limits, { memory_bytes: 64 << 20, pids: 32 });
  const exited = await within(20_000, client.wait(process.id, { timeoutMs: 20_000 }), "wait");
  assert.deepEqual([exited.reason, exited.exit_code], ["oom", 137]);
  assert.ok(exited.usage, "usage at exit");
  assert.ok(exited.usage.memory_peak_bytes > 32 << 20 && exited.usage.memory_peak_bytes <= 65 << 20, `${exited.usage.memory_peak_bytes}`);
  assert.ok(exited.usage.cpu_user_s + exited.usage.cpu_system_s > 0);
});
