// End-to-end: the page in Chromium against a real tetherd (test/harness.mjs):
// typing, sizes, floods, reloads and second tabs, cuts, UTF-8, exits,
// tokens, share links, screens, numbered input.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  SHELL,
  TIMEOUT,
  baseUrl,
  browser,
  count,
  openTerminal,
  run,
  screenshot,
  setup,
  shareLink,
  startProxy,
  startServer,
  stopServer,
  teardown,
  waitForText,
} from "./harness.mjs";

before(setup);
after(teardown);

test("types a command and sees its output", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, "echo $((6*7))");
  // The command line shows `$((6*7))`; only the output is a bare 42.
  await waitForText(page, /^42$/);
  const info = await page.evaluate(() => ({ id: window.tether.sessionId, hash: location.hash }));
  assert.match(info.hash, new RegExp(`session=${info.id}`));
  // A paste goes through xterm (bracketed, as bash asks) like typing does.
  await page.evaluate(() => window.tetherTerm.paste("echo pasted-$((4*4))"));
  await page.keyboard.press("Enter");
  await waitForText(page, /^pasted-16$/);
  // A picture of a session for the README (docs/web-demo.png is a copy).
  await run(page, "printf '\\033[1;32mtether\\033[0m \\033[33m─┼─ héllo ✓\\033[0m\\n'; ls --color=always /usr");
  await waitForText(page, /^tether ─┼─ héllo ✓$/);
  await waitForText(page, /^bin\b/);
  await screenshot(page, "session");
  await page.close();
});

test("the PTY follows the viewport size", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  for (const viewport of [{ width: 900, height: 500 }, { width: 1200, height: 800 }]) {
    const before = await page.evaluate(() => [window.tetherTerm.cols, window.tetherTerm.rows]);
    await page.setViewportSize(viewport);
    await page.waitForFunction(
      ([c, r]) => window.tetherTerm.cols !== c || window.tetherTerm.rows !== r,
      before,
      { timeout: TIMEOUT },
    );
    const [cols, rows] = await page.evaluate(() => [window.tetherTerm.cols, window.tetherTerm.rows]);
    // `size-RxC` appears only in the output, never on the command line.
    await run(page, "echo size-$(stty size | tr ' ' x)");
    await waitForText(page, new RegExp(`^size-${rows}x${cols}$`));
  }
  await page.close();
});

test("the page fits its window: the header never scrolls away, the terminal fits its box", { timeout: 60_000 }, async () => {
  // Two sizes, the smaller one making the header wrap onto two lines.
  for (const viewport of [{ width: 1100, height: 700 }, { width: 600, height: 400 }]) {
    const page = await openTerminal(undefined, { viewport });
    await run(page, "seq 1 300");
    await waitForText(page, /^300$/);
    // Wheel over the header and over the terminal, and ask the window to scroll.
    await page.mouse.move(20, 10);
    await page.mouse.wheel(0, 2000);
    await page.mouse.move(viewport.width / 3, viewport.height - 40);
    await page.mouse.wheel(0, 2000);
    await page.evaluate(() => window.scrollTo(0, 10_000));
    const box = await page.evaluate(() => {
      const rect = (selector) => document.querySelector(selector).getBoundingClientRect();
      return {
        innerHeight: window.innerHeight,
        scrollHeight: document.documentElement.scrollHeight,
        scrollY: window.scrollY,
        headerTop: rect("header").top,
        terminalBottom: rect("#terminal").bottom,
        xtermBottom: rect(".xterm-screen").bottom,
      };
    });
    const where = JSON.stringify({ viewport, box });
    assert.equal(box.scrollHeight, box.innerHeight, `the page is taller than its window: ${where}`);
    assert.equal(box.scrollY, 0, where);
    assert.equal(box.headerTop, 0, where);
    assert.ok(box.xtermBottom <= box.terminalBottom + 0.5, `the terminal overflows its box: ${where}`);
    assert.ok(box.terminalBottom <= box.innerHeight, where);
    assert.deepEqual(page.problems, []);
    await page.close();
  }
});

test("a flood of output arrives whole while the tab stays responsive", { timeout: 120_000 }, async (t) => {
  const page = await openTerminal();
  await run(page, "seq 1 200000");
  // Sample how long the page takes to answer while the output streams in.
  let done = false;
  let slowest = 0;
  const probe = (async () => {
    while (!done) {
      const start = performance.now();
      await page.evaluate(() => 1);
      slowest = Math.max(slowest, performance.now() - start);
      await new Promise((r) => setTimeout(r, 50)); // sampling interval, not synchronisation
    }
  })();
  try {
    await waitForText(page, /^200000$/, 90_000);
  } finally {
    done = true;
    await probe;
  }
  t.diagnostic(`slowest answer during the flood: ${slowest.toFixed(0)} ms`);
  assert.ok(slowest < 2000, `page took ${slowest.toFixed(0)} ms to answer during the flood`);
  // The last lines are in order, so nothing in between was repeated.
  const tail = await page.evaluate(() => window.tether.text());
  assert.match(tail, /^199998\n199999\n200000$/m);

  // An endless flood: the shell must still take Ctrl-C promptly.
  await run(page, "yes tether-flood");
  await waitForText(page, /^tether-flood$/);
  await page.keyboard.press("Control+C");
  await run(page, "echo after-$((40+2))");
  await waitForText(page, /^after-42$/, 30_000);
  // Through both floods the page never held more than the credit window of
  // output it had not yet written: the server honours the window, and
  // xterm's write callbacks grant it back.
  const flow = await page.evaluate(() => ({ window: window.tether.window, ...window.tether.attachment.stats().stdout }));
  t.diagnostic(`flow: ${JSON.stringify(flow)}`);
  assert.ok(flow.received > 1_000_000, `received ${flow.received}`);
  assert.ok(flow.maxBuffered <= flow.window, `${flow.maxBuffered} bytes buffered, window ${flow.window}`);
  await page.close();
});

test("reloading and a second tab re-attach with the history replayed", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, "echo replay-$((2+3))");
  await waitForText(page, /^replay-5$/);
  const id = await page.evaluate(() => window.tether.sessionId);

  await page.reload();
  await page.waitForFunction((sid) => window.tether?.sessionId === sid && window.tether.status.startsWith("attached"), id, { timeout: TIMEOUT });
  await waitForText(page, /^replay-5$/);

  // A second tab (its own new shell) joins the first session from the list.
  const second = await openTerminal();
  await second.locator("#refresh").click();
  await second.locator(`button[data-session="${id}"]`).click({ timeout: TIMEOUT });
  await second.waitForFunction((sid) => window.tether.sessionId === sid && window.tether.status.startsWith("attached"), id, { timeout: TIMEOUT });
  await waitForText(second, /^replay-5$/);
  // The screen was reset on switching: it starts with the first session's
  // history, not with what the second tab's own shell had printed.
  assert.match(await second.evaluate(() => window.tether.text()), /^bash-[\d.]+[#$] echo replay-/);
  // Both tabs type into the same shell and both see the result.
  await run(second, "echo shared-$((3*3))");
  await waitForText(page, /^shared-9$/);
  await waitForText(second, /^shared-9$/);
  await second.close();
  await page.close();
});

test("a dropped connection resumes without repeating or losing output", { timeout: 90_000 }, async () => {
  // The page talks to tetherd through a TCP proxy that the test can cut,
  // as a network failure would: both sockets die mid-stream.
  const proxy = await startProxy(new URL(baseUrl).port);
  try {
    const page = await openTerminal(undefined, { url: proxy.url });
    await run(page, "for i in $(seq 1 40); do echo line-$i; sleep 0.05; done");
    await waitForText(page, /^line-5$/);
    proxy.cut(); // and refuse new connections until restore()
    await page.waitForFunction(() => window.tether.status.startsWith("disconnected"), null, { timeout: TIMEOUT });
    // Typed while disconnected: queued, sent after the reconnect.
    await run(page, "echo queued-$((9*9))");
    proxy.restore();
    await page.waitForFunction(() => window.tether.status.startsWith("reconnected"), null, { timeout: TIMEOUT });
    await waitForText(page, /^queued-81$/);
    const text = await page.evaluate(() => window.tether.text());
    // Matched anywhere, not as whole lines: the terminal echoes the keys
    // typed during the loop wherever the loop's output happens to be.
    const lines = text.match(/line-\d+/g);
    assert.deepEqual(lines, Array.from({ length: 40 }, (_, i) => `line-${i + 1}`), "every line once, in order");
    assert.equal(count(text, /^queued-81$/), 1);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("UTF-8 split across frames, wide characters and colours render", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  // The two halves of U+2500 are written 200 ms apart, so they travel in
  // separate frames; xterm must join them into one character.
  await run(page, "printf '\\xe2\\x94'; sleep 0.2; printf '\\x80\\n'");
  await waitForText(page, /^─$/);
  await run(page, "printf 'wide:\\xe6\\x97\\xa5\\xe6\\x9c\\xac\\n'");
  await waitForText(page, /^wide:日本$/);
  await run(page, "printf '\\033[31mRED\\033[0m plain\\n'");
  await waitForText(page, /^RED plain$/);
  const cells = await page.evaluate(() => {
    const buffer = window.tetherTerm.buffer.active;
    const find = (re) => {
      for (let y = buffer.length - 1; y >= 0; y--) if (re.test(buffer.getLine(y).translateToString(true))) return buffer.getLine(y);
    };
    const red = find(/^RED plain$/);
    const wide = find(/^wide:日本$/);
    const r = red.getCell(0);
    const p = red.getCell(4);
    return {
      redFg: r.getFgColor(),
      redPalette: r.isFgPalette(),
      plainDefault: p.isFgDefault(),
      wideWidth: wide.getCell(5).getWidth(),
    };
  });
  assert.deepEqual(cells, { redFg: 1, redPalette: true, plainDefault: true, wideWidth: 2 });
  await screenshot(page, "web-demo");
  await page.close();
});

test("exit shows the exit code and reason", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, "exit 3");
  await page.waitForFunction(() => window.tether.exit !== undefined, null, { timeout: TIMEOUT });
  const exit = await page.evaluate(() => window.tether.exit);
  assert.equal(exit.exit_code, 3);
  assert.equal(exit.reason, "exit");
  await page.locator("#exit").waitFor({ state: "visible", timeout: TIMEOUT });
  assert.match(await page.locator("#exit").textContent(), /code 3 \(reason: exit\)/);
  await waitForText(page, /exited with code 3/);
  await screenshot(page, "exit");
  await page.close();
});

test("a token comes from the fragment or, on 401, from a prompt", { timeout: 60_000 }, async () => {
  // A server of its own that requires a token made up for this run.
  const token = `e2e-${Math.random().toString(36).slice(2)}`;
  const secured = await startServer(["--token", token]);
  try {
    const unauthorised = await fetch(`${secured.baseUrl}/v1/processes`);
    assert.equal(unauthorised.status, 401);

    const page = await openTerminal(`token=${token}&cmd=${encodeURIComponent(SHELL)}`, { url: secured.baseUrl });
    await run(page, "echo token-$((1+2))");
    await waitForText(page, /^token-3$/);
    await page.close();

    const prompts = [];
    const prompted = await openTerminal(`cmd=${encodeURIComponent(SHELL)}`, {
      url: secured.baseUrl,
      onDialog: (dialog) => {
        prompts.push(dialog.message());
        void dialog.accept(token);
      },
    });
    await run(prompted, "echo prompted-$((2+2))");
    await waitForText(prompted, /^prompted-4$/);
    assert.equal(prompts.length, 1, prompts.join("; "));
    const id = await prompted.evaluate(() => window.tether.sessionId);
    await prompted.close();

    // Attaching by #session= without a token: the WebSocket upgrade is
    // refused, the client learns why (401) over HTTP and the page asks.
    const attached = await openTerminal(`session=${id}`, {
      url: secured.baseUrl,
      onDialog: (dialog) => void dialog.accept(token),
    });
    await waitForText(attached, /^prompted-4$/);
    await attached.close();
  } finally {
    await stopServer(secured.server);
  }
});

test("the page loads with a favicon and no console error or failed request", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, "echo loaded-$((5*5))");
  await waitForText(page, /^loaded-25$/);
  assert.deepEqual(page.problems, []);
  // The icon the page links, and /favicon.ico for clients that just ask.
  const icon = await page.evaluate(() => document.querySelector("link[rel=icon]")?.href);
  for (const url of [icon, `${baseUrl}/favicon.ico`]) {
    const response = await fetch(url);
    assert.equal(response.status, 200, url);
    assert.match(response.headers.get("content-type") ?? "", /^image\//, url);
  }
  await page.close();
});

test("the first paint says the session is starting, until its first output", { timeout: 60_000 }, async () => {
  // A command that prints nothing until it is given a line.
  const page = await openTerminal(`cmd=${encodeURIComponent("read -r line; echo got-$line; exec " + SHELL)}`, { prompt: false });
  const starting = page.locator("#starting");
  assert.ok(await starting.isVisible(), "the starting notice is shown while there is no output");
  assert.match(await starting.textContent(), /starting read -r line/);
  await page.locator("#terminal").click();
  await page.keyboard.type("now");
  await page.keyboard.press("Enter");
  await waitForText(page, /^got-now$/);
  await starting.waitFor({ state: "hidden", timeout: TIMEOUT });
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("the command box runs a shell command line", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  assert.match(await page.locator("#command").getAttribute("placeholder"), /shell command line/);
  const first = await page.evaluate(() => window.tether.sessionId);
  // `||` and `$((...))` only work in a shell: an argv would look for a
  // program named `tether-no-such-program ||`.
  await page.locator("#command").fill("tether-no-such-program || echo fallback-$((40+2)); sleep 30");
  await page.locator("#spawn button[type=submit]").click();
  await page.waitForFunction((id) => window.tether.sessionId && window.tether.sessionId !== id, first, { timeout: TIMEOUT });
  await waitForText(page, /^fallback-42$/);
  const status = await page.evaluate(() => window.tether.status);
  assert.match(status, /tether-no-such-program \|\| echo fallback/);
  await page.close();
});

test("the end-session control kills the session from the page", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, "echo before-end");
  await waitForText(page, /^before-end$/);
  const id = await page.evaluate(() => window.tether.sessionId);
  const end = page.locator("#end");
  assert.equal(await end.isEnabled(), true);
  await end.click();
  await page.waitForFunction(() => window.tether.exit !== undefined, null, { timeout: TIMEOUT });
  const exit = await page.evaluate(() => window.tether.exit);
  assert.equal(exit.reason, "killed");
  await page.locator("#exit").waitFor({ state: "visible", timeout: TIMEOUT });
  assert.match(await page.locator("#exit").textContent(), /reason: killed/);
  assert.equal(await end.isEnabled(), false);
  // Nothing of it runs on the server any more.
  const response = await fetch(`${baseUrl}/v1/processes/${id}`);
  if (response.status === 200) assert.equal((await response.json()).status, "exited");
  else assert.equal(response.status, 404);
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("an EventSource resumes after a cut connection with no gap and no repeat", { timeout: 90_000 }, async () => {
  // GET /v1/processes/{id}/output as Server-Sent Events, through a proxy the
  // test cuts mid-stream: the browser's own EventSource reconnects with
  // Last-Event-ID, and the server resumes at exactly that offset.
  const proxy = await startProxy(new URL(baseUrl).port);
  try {
    const spawned = await fetch(`${baseUrl}/v1/processes`, {
      method: "POST",
      body: JSON.stringify({ command: "for i in $(seq 1 60); do echo line-$i; sleep 0.03; done; printf '\\377'" }),
      body: JSON.stringify({
        command: "for i in $(seq 1 30); do echo line-$i; done; read go; for i in $(seq 31 60); do echo line-$i; sleep 0.02; done; printf '\\377'",
        stdin: true,
      }),
    }).then((r) => r.json());
    const page = await browser.newPage();
    // Any document of the proxy's origin will do.
    await page.goto(`${proxy.url}/healthz`);
    await page.evaluate((id) => {
      window.seen = { text: "", opens: 0, exit: null };
      const es = new EventSource(`/v1/processes/${id}/output?follow=1`);
      window.es = es;
      es.onopen = () => window.seen.opens++;
      es.addEventListener("stdout", (e) => (window.seen.text += atob(e.data)));
      es.addEventListener("exit", (e) => {
        window.seen.exit = JSON.parse(e.data);
        es.close();
      });
    }, spawned.id);
    await page.waitForFunction(() => /line-5\n/.test(window.seen.text), null, { timeout: TIMEOUT });
    proxy.cut();
    // The browser notices and retries (refused until restore()).
    await page.waitForFunction(() => /line-30\n/.test(window.seen.text), null, { timeout: TIMEOUT });
    proxy.cut();
    // The program prints on while the browser is cut off and retrying.
    const go = await fetch(`${baseUrl}/v1/processes/${spawned.id}/stdin`, { method: "POST", body: "go\n" });
    assert.equal(go.status, 204);
    await page.waitForFunction(() => window.es.readyState === EventSource.CONNECTING, null, { timeout: TIMEOUT });
    proxy.restore();
    await page.waitForFunction(() => window.seen.exit !== null, null, { timeout: TIMEOUT });
    const seen = await page.evaluate(() => window.seen);
    const expected = Array.from({ length: 60 }, (_, i) => `line-${i + 1}\n`).join("") + "\xff";
    assert.equal(seen.text, expected, "every byte once, in order");
    assert.ok(seen.opens >= 2, `reconnected (${seen.opens} opens)`);
    assert.equal(seen.exit.status, "exited");
    assert.equal(seen.exit.stdout_bytes, expected.length);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("with no token flag tetherd prints a URL that opens the terminal, and requires the token", { timeout: 60_000 }, async () => {
  const runtime = mkdtempSync(join(tmpdir(), "tether-e2e-xdg-"));
  const secured = await startServer([], { tokenless: false, env: { XDG_RUNTIME_DIR: runtime } });
  try {
    assert.equal((await fetch(`${secured.baseUrl}/v1/processes`)).status, 401);
    const opened = await secured.opened;
    const [url, fragment] = opened.split("/#");
    assert.equal(url, secured.baseUrl);
    assert.match(fragment, /^token=[A-Za-z0-9_-]{40,}$/);
    // The generated token is in this server's own runtime entry, readable
    // by this user only.
    const servers = join(runtime, "tether", "servers");
    const entries = readdirSync(servers).filter((name) => name.endsWith(".json"));
    assert.equal(entries.length, 1, `${entries}`);
    const entry = join(servers, entries[0]);
    assert.equal(statSync(entry).mode & 0o777, 0o600);
    const { url: entryUrl, token } = JSON.parse(readFileSync(entry, "utf8"));
    assert.equal(entryUrl, secured.baseUrl);
    assert.equal(`token=${token}`, fragment);
    const page = await openTerminal(`${fragment}&cmd=${encodeURIComponent(SHELL)}`, { url });
    await run(page, "echo generated-$((8*8))");
    await waitForText(page, /^generated-64$/);
    assert.deepEqual(page.problems, []);
    await page.close();
  } finally {
    await stopServer(secured.server);
    rmSync(runtime, { recursive: true, force: true });
  }
});

test("over HTTPS (tetherd's own TLS) the page runs a shell", { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "tether-e2e-tls-"));
  const openssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1");
  const secured = await startServer(["--tls-cert", join(dir, "cert.pem"), "--tls-key", join(dir, "key.pem")]);
  try {
    assert.match(secured.baseUrl, /^https:\/\//);
    // Certificate errors are ignored in this test's browser context only.
    const page = await openTerminal(`cmd=${encodeURIComponent(SHELL)}`, { url: secured.baseUrl, ignoreHTTPSErrors: true });
    await run(page, "echo over-tls-$((9*9))");
    await waitForText(page, /^over-tls-81$/);
    assert.deepEqual(page.problems, []);
    await page.close();
  } finally {
    await stopServer(secured.server);
    rmSync(dir, { recursive: true, force: true });
  }
});

test("share links: read-only shows the live session and typing changes nothing; interactive types", { timeout: 90_000 }, async () => {
  const token = `e2e-${Math.random().toString(36).slice(2)}`;
  const secured = await startServer(["--token", token]);
  try {
    const owner = await openTerminal(`token=${token}&cmd=${encodeURIComponent(SHELL)}`, { url: secured.baseUrl });
    await run(owner, "echo before-$((1+1))");
    await waitForText(owner, /^before-2$/);

    const readLink = await shareLink(owner);
    assert.ok(!readLink.includes("?"), readLink);
    assert.equal(await owner.locator("#share-url").inputValue(), readLink);
    const [readBase, readFragment] = readLink.split("/#");
    const reader = await openTerminal(readFragment, { url: readBase });
    await waitForText(reader, /^before-2$/);
    // That session alone: no command box, no session list, no share or end.
    for (const id of ["#spawn", "aside", "#end", "#share-open"]) assert.equal(await reader.locator(id).isVisible(), false, id);
    assert.match(await reader.locator("#mode").textContent(), /read-only/);
    // Typing on the read-only page changes nothing...
    await run(reader, "echo typed-by-reader");
    // ...while the owner's output shows up there live.
    await run(owner, "echo after-$((3+4))");
    await waitForText(reader, /^after-7$/);
    await waitForText(owner, /^after-7$/);
    for (const page of [owner, reader]) assert.equal(count(await page.evaluate(() => window.tether.text()), /typed-by-reader/), 0);

    const writeLink = await shareLink(owner, { write: true });
    const [writeBase, writeFragment] = writeLink.split("/#");
    const guest = await openTerminal(writeFragment, { url: writeBase });
    assert.match(await guest.locator("#mode").textContent(), /interactive/);
    assert.equal(await guest.locator("#spawn").isVisible(), false);
    await run(guest, "echo from-guest-$((5+5))");
    await waitForText(owner, /^from-guest-10$/);
    await waitForText(reader, /^from-guest-10$/);
    await screenshot(reader, "share-read-only");
    for (const page of [owner, reader, guest]) {
      assert.deepEqual(page.problems, []);
      await page.close();
    }
  } finally {
    await stopServer(secured.server);
  }
});

// Issue 14: the screen, not a byte soup. vim's start (the switch to the
// alternate screen, its terminal queries) is long evicted when the page
// reloads; the page must show vim's screen, as the server's emulator has it,
// and nothing the terminal answered on any reload or second tab may reach
// the shell.
test("a reload during vim shows vim's screen and types nothing into the session", { timeout: 120_000 }, async () => {
  const spawned = await fetch(`${baseUrl}/v1/processes`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command: SHELL, tty: true, retain_bytes: 8192 }),
  }).then((r) => r.json());
  const id = spawned.id;
  const page = await openTerminal(`session=${id}`);
  await run(page, "vim -u NONE -N -i NONE -n /etc/services");
  await waitForText(page, /"\/etc\/services"/);
  // Redraws until far more than the retention has been written since vim started.
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press(i % 2 ? "g" : "G");
    if (i % 2) await page.keyboard.press("g");
  }
  await page.keyboard.type(":echo 'marker-' . (6*7)\n");
  await waitForText(page, /marker-42/);
  const status = await fetch(`${baseUrl}/v1/processes/${id}`).then((r) => r.json());
  assert.ok(status.stdout_bytes > 4 * 8192, `only ${status.stdout_bytes} bytes written`);

  // The rows the page shows equal the server's screen (after the page's own
  // resize, if any, has been redrawn by vim).
  const visible = () =>
    page.evaluate(() => {
      const b = window.tetherTerm.buffer.active;
      const rows = [];
      // Blanks vim wrote and cells never written look alike: trim both.
      for (let y = b.baseY; y < b.baseY + window.tetherTerm.rows; y++) rows.push((b.getLine(y)?.translateToString(true) ?? "").replace(/ +$/, ""));
      return { type: b.type, text: rows.join("\n") + "\n" };
    });
  const sameAsServer = async (p) => {
    const deadline = Date.now() + TIMEOUT;
    let last;
    while (Date.now() < deadline) {
      const server = await fetch(`${baseUrl}/v1/processes/${id}/screen`).then((r) => r.text());
      last = { page: await visible.call(null, p), server };
      if (last.page.text === server) return last;
      await new Promise((r) => setTimeout(r, 100)); // polling a condition, bounded
    }
    assert.fail(`page never showed the server's screen:\n${JSON.stringify(last, null, 1)}`);
  };
  for (let reload = 0; reload < 2; reload++) {
    await page.reload();
    await page.waitForFunction((sid) => window.tether?.sessionId === sid && window.tether.status.startsWith("attached"), id, { timeout: TIMEOUT });
    const shown = await sameAsServer(page);
    assert.equal(shown.page.type, "alternate", "vim's alternate screen is restored");
    assert.match(shown.page.text, /marker-42|services/);
  }
  const second = await openTerminal(`session=${id}`, { prompt: false });
  await waitForText(second, /services/);
  await second.close();

  // :q works, and the shell received exactly what was typed: a stray reply
  // (ESC[2R, ESC[?...c, colours) would precede this line and break it.
  await page.locator("#terminal").click();
  await page.keyboard.type(":q!\n");
  await waitForText(page, /[#$] ?$/);
  await run(page, "true; echo \"status=$? clean-$((6*7))\"");
  await waitForText(page, /^status=0 clean-42$/);
  const text = await page.evaluate(() => window.tether.text());
  assert.doesNotMatch(text, /\d+;\d+R|rgb:|\[\?\d+(;\d+)*c/, "no terminal reply reached the shell");
  await page.close();
});

test("keys typed while the connection is cut, again and again, arrive once each and in order", { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "tether-keys-"));
  const file = join(dir, "keys");
  const proxy = await startProxy(new URL(baseUrl).port);
  try {
    // A raw terminal: every key goes to the file as typed, nothing echoed.
    const command = `stty raw -echo; echo READY; exec cat > ${file}`;
    const page = await openTerminal(`cmd=${encodeURIComponent(command)}`, { url: proxy.url, prompt: false });
    await waitForText(page, /READY/);
    await page.locator("#terminal").click();
    const keys = Array.from({ length: 60 }, (_, i) => `k${String(i).padStart(2, "0")}.`).join("");
    const typing = page.keyboard.type(keys, { delay: 15 });
    const size = () => (existsSync(file) ? statSync(file).size : 0);
    // Cut while keys are on their way, three times: each time the page
    // says it is reconnecting, keeps what is typed, and sends it once back.
    for (const after of [40, 100, 160]) {
      await within(TIMEOUT, async () => size() >= after);
      proxy.cut();
      await page.waitForFunction(() => window.tether.status.startsWith("disconnected"), null, { timeout: TIMEOUT });
      proxy.restore();
      await page.waitForFunction(() => window.tether.status.startsWith("reconnected"), null, { timeout: TIMEOUT });
    }
    await typing;
    await within(TIMEOUT, async () => size() >= keys.length);
    assert.equal(readFileSync(file, "utf8"), keys, "every key once, in order");
    await page.close();
  } finally {
    await proxy.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

// Polls `condition` every 20 ms until it holds; fails after `ms`.
async function within(ms, condition) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms: ${condition}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
