// The page across an in-place handover (issue 43): the server becomes a
// new binary under the same pid while a shell is open in the page. The
// page is closed with 1012, reconnects by itself, and the same shell takes
// keystrokes again; its screen is what it was, nothing shown twice.
// Chromium and a real tetherd (test/harness.mjs).

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { baseUrl, count, openTerminal, run, setup, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

/** The server's handover count, or -1 while a call finds no server (a
 * connection kept from the old binary is closed). */
async function handovers() {
  try {
    return (await fetch(`${baseUrl}/v1/admin/server`).then((r) => r.json())).handovers;
  } catch {
    return -1;
  }
}

test("a shell in the page carries on through two handovers: same process, same screen, keystrokes reach it once", { timeout: 90_000 }, async () => {
  const page = await openTerminal();
  await run(page, "echo before-$((20+1))");
  await waitForText(page, /^before-21$/);
  const ids = await fetch(`${baseUrl}/v1/processes`).then((r) => r.json());
  assert.equal(ids.length, 1);
  const [shell] = ids;
  for (let round = 1; round <= 2; round++) {
    const ask = () => fetch(`${baseUrl}/v1/admin/upgrade`, { method: "POST", body: "{}" });
    const answer = await ask().catch(ask);
    assert.equal(answer.status, 202, await answer.text());
    const deadline = Date.now() + 20_000;
    while ((await handovers()) < round) assert.ok(Date.now() < deadline, "the new binary did not serve in time");
    // Typed after the handover: the page has reconnected to the same shell.
    await run(page, `echo after-${round}-$((40+2))`);
    await waitForText(page, new RegExp(`^after-${round}-42$`, "m"));
  }
  const status = await fetch(`${baseUrl}/v1/processes/${shell.id}`).then((r) => r.json());
  assert.equal(status.pid, shell.pid);
  assert.equal(status.status, "running");
  const text = await page.evaluate(() => {
    const buffer = window.tetherTerm.buffer.active;
    const lines = [];
    for (let y = 0; y < buffer.length; y++) lines.push(buffer.getLine(y).translateToString(true));
    return lines.join("\n");
  });
  // Nothing was written twice into the terminal by the resumes.
  assert.equal(count(text, /^before-21$/), 1, text);
  assert.equal(count(text, /^after-1-42$/), 1, text);
  await page.close();
});
