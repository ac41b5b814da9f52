// How long a session outlives its tab (issue 30): one this tab started
// without a name ends soon after the tab closes (a reload within the grace
// re-attaches); a shared or named one is kept (10 minutes). Chromium and a
// real tetherd (test/harness.mjs); every check of "still running" or "ended"
// is the server's own answer. And the leave warning (issue 49): leaving the
// page asks first only while that would end its session.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { SHELL, TIMEOUT, baseUrl, openTerminal, run, setup, shareLink, startServer, stopServer, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

/** `GET .../wait` until the process has exited (bounded), with the given headers. */
async function exitOf(url, id, headers = {}) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const info = await fetch(`${url}/v1/processes/${id}/wait?timeout_ms=5000`, { headers }).then((r) => r.json());
    if (info.status === "exited") return info;
  }
  assert.fail(`${id} did not exit within 30 s`);
}

/** The process as the server has it `ms` from now: still running, or its exit. */
async function statusAfter(url, id, ms, headers = {}) {
  return fetch(`${url}/v1/processes/${id}/wait?timeout_ms=${ms}`, { headers }).then((r) => r.json());
}

test("a session the tab started ends soon after the tab closes, and a reload within that time re-attaches", { timeout: 90_000 }, async () => {
  const page = await openTerminal(`cmd=${encodeURIComponent(SHELL)}&grace=5`);
  const id = await page.evaluate(() => window.tether.sessionId);
  assert.equal(await page.evaluate(() => window.tether.lifetime), "own");
  assert.match(await page.locator("#lifetime").textContent(), /ends 5 s after this tab closes/);
  await run(page, "echo before-reload-$((2*4))");
  await waitForText(page, /^before-reload-8$/);

  await page.reload();
  await page.waitForFunction((sid) => window.tether?.sessionId === sid && window.tether.status.startsWith("attached"), id, { timeout: TIMEOUT });
  await run(page, "echo after-reload-$((3*4))");
  await waitForText(page, /^after-reload-12$/);
  assert.equal(await page.evaluate(() => window.tether.lifetime), "own", "a reload still knows the session is its own");

  const closed = Date.now();
  await page.close();
  const exit = await exitOf(baseUrl, id);
  assert.equal(exit.reason, "unattached", JSON.stringify(exit));
  // Not at the close: after the grace (the timer starts when the tab's
  // connection goes).
  assert.ok(Date.now() - closed >= 4_000, `ended ${Date.now() - closed} ms after the tab closed`);
});

test("a shared session outlives the tab that shared it, and its link still works", { timeout: 90_000 }, async () => {
  const token = `e2e-${Math.random().toString(36).slice(2)}`;
  const secured = await startServer(["--token", token]);
  const auth = { Authorization: `Bearer ${token}` };
  try {
    const owner = await openTerminal(`token=${token}&cmd=${encodeURIComponent(SHELL)}&grace=2`, { url: secured.baseUrl });
    const id = await owner.evaluate(() => window.tether.sessionId);
    await run(owner, "echo shared-$((6*6))");
    await waitForText(owner, /^shared-36$/);
    await shareLink(owner);
    await owner.waitForFunction(() => window.tether.lifetime === "kept", null, { timeout: TIMEOUT });
    assert.match(await owner.locator("#lifetime").textContent(), /kept 10 min/);
    const link = await owner.evaluate(() => window.tether.shareUrl);
    assert.deepEqual(owner.problems, []);
    await owner.close();

    // Three times the grace later, still running.
    const later = await statusAfter(secured.baseUrl, id, 6_000, auth);
    assert.equal(later.status, "running", JSON.stringify(later));
    const [linkBase, linkFragment] = link.split("/#");
    const viewer = await openTerminal(linkFragment, { url: linkBase, prompt: false });
    await waitForText(viewer, /^shared-36$/);
    await viewer.close();
    await fetch(`${secured.baseUrl}/v1/processes/${id}?force=1`, { method: "DELETE", headers: auth });
  } finally {
    await stopServer(secured.server);
  }
});

test("a named session outlives its tab; the unnamed one the tab started first does not", { timeout: 90_000 }, async () => {
  const page = await openTerminal(`cmd=${encodeURIComponent(SHELL)}&grace=2`);
  const first = await page.evaluate(() => window.tether.sessionId);
  const name = `kept-${Math.random().toString(36).slice(2, 10)}`;
  await page.locator("#name").fill(name);
  await page.locator("#spawn button[type=submit]").click();
  await page.waitForFunction((old) => window.tether.sessionId !== old && window.tether.status.startsWith("attached"), first, { timeout: TIMEOUT });
  const named = await page.evaluate(() => window.tether.sessionId);
  assert.equal(await page.evaluate(() => window.tether.lifetime), "kept");
  const info = await fetch(`${baseUrl}/v1/processes/${name}`).then((r) => r.json());
  assert.deepEqual([info.id, info.name], [named, name]);
  assert.equal(await page.locator("#name").inputValue(), "", "the name box is cleared (a name is taken once)");
  await page.close();

  const ended = await exitOf(baseUrl, first);
  assert.equal(ended.reason, "unattached", JSON.stringify(ended));
  const later = await statusAfter(baseUrl, named, 6_000);
  assert.equal(later.status, "running", JSON.stringify(later));
  await fetch(`${baseUrl}/v1/processes/${named}?force=1`, { method: "DELETE" });
});

/**
 * Leaves the page (beforeunload runs, as for closing the tab); resolves with
 * the dialogs it showed, each accepted. By navigating away: this Chromium
 * (156, headless) runs no beforeunload for `page.close({ runBeforeUnload: true })`,
 * while a navigation shows the dialog as closing the tab does.
 */
async function leave(page) {
  const dialogs = [];
  const onDialog = (dialog) => {
    dialogs.push(dialog.type());
    void dialog.accept();
  };
  page.on("dialog", onDialog);
  await page.goto("about:blank");
  page.off("dialog", onDialog);
  await page.close();
  return dialogs;
}

test("closing the tab asks first only while that would end its session: not for a named, shared, attached-only or exited one, nor with disableLeaveAlert", { timeout: 120_000 }, async () => {
  // An unnamed session this tab started: closing ends it, so the browser asks.
  const own = await openTerminal();
  // The browser asks only a page that was used (a click, a key).
  await run(own, "echo typed-$((1+1))");
  await waitForText(own, /^typed-2$/);
  const ownId = await own.evaluate(() => window.tether.sessionId);
  const asked = own.waitForEvent("dialog", { timeout: TIMEOUT });
  const leaving = own.goto("about:blank").then(
    () => "left",
    (e) => e.message,
  );
  const dialog = await asked;
  assert.equal(dialog.type(), "beforeunload");
  // Staying: the tab and its session go on.
  await dialog.dismiss();
  assert.match(await leaving, /ERR_ABORTED/);
  await run(own, "echo stayed-$((2+2))");
  await waitForText(own, /^stayed-4$/);
  assert.equal(await own.evaluate(() => window.tether.leave.asked), 1);
  assert.deepEqual(await leave(own), ["beforeunload"]);
  await fetch(`${baseUrl}/v1/processes/${ownId}?force=1`, { method: "DELETE" });

  // Turned off as ttyd's is.
  const off = await openTerminal(undefined, { query: "disableLeaveAlert=1" });
  await run(off, "echo typed-$((1+2))");
  await waitForText(off, /^typed-3$/);
  assert.equal(await off.evaluate(() => window.tether.lifetime), "own");
  assert.deepEqual(await leave(off), []);

  // After the session exited there is nothing to lose.
  const exited = await openTerminal();
  await run(exited, "exit 0");
  await exited.waitForFunction(() => window.tether.exit !== undefined, null, { timeout: TIMEOUT });
  assert.deepEqual(await leave(exited), []);

  // A named session is kept 10 minutes.
  const named = await openTerminal();
  const name = `leave-${Math.random().toString(36).slice(2, 10)}`;
  await named.locator("#name").fill(name);
  await named.locator("#name").press("Enter");
  await named.waitForFunction(() => window.tether.lifetime === "kept" && window.tether.status.startsWith("attached"), null, { timeout: TIMEOUT });
  await run(named, "echo typed-$((2+3))");
  await waitForText(named, /^typed-5$/);
  assert.deepEqual(await leave(named), []);
  await fetch(`${baseUrl}/v1/processes/${name}?force=1`, { method: "DELETE" });

  // A session some other client started: this tab only attached to it.
  const spawned = await fetch(`${baseUrl}/v1/processes`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command: SHELL, tty: true }),
  }).then((r) => r.json());
  const attached = await openTerminal(`session=${spawned.id}`);
  await run(attached, "echo typed-$((3+3))");
  await waitForText(attached, /^typed-6$/);
  assert.equal(await attached.evaluate(() => window.tether.lifetime), undefined);
  assert.deepEqual(await leave(attached), []);
  await fetch(`${baseUrl}/v1/processes/${spawned.id}?force=1`, { method: "DELETE" });

  // Shared: kept 10 minutes once the link is made.
  const token = `leave-${Math.random().toString(36).slice(2)}`;
  const secured = await startServer(["--token", token]);
  try {
    const owner = await openTerminal(`token=${token}&cmd=${encodeURIComponent(SHELL)}`, { url: secured.baseUrl });
    const id = await owner.evaluate(() => window.tether.sessionId);
    await run(owner, "echo typed-$((3+4))");
    await waitForText(owner, /^typed-7$/);
    await shareLink(owner);
    await owner.waitForFunction(() => window.tether.lifetime === "kept", null, { timeout: TIMEOUT });
    assert.deepEqual(await leave(owner), []);
    await fetch(`${secured.baseUrl}/v1/processes/${id}?force=1`, { method: "DELETE", headers: { Authorization: `Bearer ${token}` } });
  } finally {
    await stopServer(secured.server);
  }
});
