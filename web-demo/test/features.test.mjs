// The terminal's everyday features (issue 49), each in Chromium against a
// real tetherd (test/harness.mjs): links, search, copy and bracketed paste,
// title and bell, Unicode 11 widths, the renderer, images, files, replay and
// the static files' compression. Preferences are in preferences.test.mjs,
// the toolbar's layout and the soft keys in layout.test.mjs, the keyboard,
// the screen reader mode and contrast in access.test.mjs. Every wait is on
// a condition or an event, bounded.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { SHELL, TIMEOUT, baseUrl, browser, openTerminal, run, screenshot, setup, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

/**
 * The viewport position of the centre of a cell: the `offset`th character of
 * the last buffer line matching `pattern` (which must be on screen), from
 * the screen's box and the terminal's size in cells.
 */
async function cellPoint(page, pattern, offset = 0) {
  const point = await page.evaluate(
    ([source, offset]) => {
      const term = window.tetherTerm;
      const buffer = term.buffer.active;
      const re = new RegExp(source);
      for (let y = buffer.length - 1; y >= 0; y--) {
        const match = re.exec(buffer.getLine(y).translateToString(true));
        if (!match) continue;
        const row = y - buffer.viewportY;
        if (row < 0 || row >= term.rows) return { error: `line ${y} is not on screen (viewport from ${buffer.viewportY})` };
        const box = document.querySelector("#terminal .xterm-screen").getBoundingClientRect();
        const width = box.width / term.cols;
        const height = box.height / term.rows;
        return { x: box.left + (match.index + offset + 0.5) * width, y: box.top + (row + 0.5) * height };
      }
      return { error: "no such line" };
    },
    [pattern.source, offset],
  );
  assert.ok(!point.error, `${pattern}: ${point.error}`);
  return point;
}

test("links: a URL and an OSC 8 hyperlink open in a new tab without an opener; a javascript: link opens nothing", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  const context = page.context();
  let dialogs = 0;
  page.on("dialog", (dialog) => {
    dialogs++;
    void dialog.dismiss();
  });
  // URLs of the test's own tetherd, so the new tab loads something real.
  const webUrl = `${baseUrl}/healthz?via=web-link`;
  const oscUrl = `${baseUrl}/healthz?via=osc-8`;
  await run(page, `printf 'web: %s\\n' '${webUrl}'`);
  // OSC 8: ESC ] 8 ; ; URL ST text ESC ] 8 ; ; ST (ST = ESC \).
  await run(page, `printf '\\033]8;;%s\\033\\\\osc8-label\\033]8;;\\033\\\\\\n' '${oscUrl}'`);
  await run(page, `printf '\\033]8;;javascript:window.tetherPwned=1\\033\\\\js-label\\033]8;;\\033\\\\\\n'`);
  await waitForText(page, /^js-label$/);
  await waitForText(page, /^osc8-label$/);
  await waitForText(page, /^web: http/);

  // Hovering a link makes it one (the pointer cursor), clicking opens a tab.
  const clickLink = async (pattern, offset, url) => {
    const point = await cellPoint(page, pattern, offset);
    await page.mouse.move(point.x, point.y);
    await page.waitForFunction(() => document.querySelector("#terminal .xterm-cursor-pointer") !== null, null, { timeout: TIMEOUT });
    const opened = context.waitForEvent("page", { timeout: TIMEOUT });
    await page.mouse.down();
    await page.mouse.up();
    const tab = await opened;
    await tab.waitForURL(url, { timeout: TIMEOUT });
    // noopener and noreferrer: the new tab cannot reach this one, nor learn its URL.
    assert.deepEqual(await tab.evaluate(() => [window.opener, document.referrer]), [null, ""]);
    await tab.close();
    // Off the link again, so the next hover starts from no link.
    await page.mouse.move(1, 1);
    await page.waitForFunction(() => document.querySelector("#terminal .xterm-cursor-pointer") === null, null, { timeout: TIMEOUT });
  };
  await clickLink(/^web: http/, 8, webUrl);

  // The OSC 8 link's text says nothing of where it goes: hovering shows it.
  const label = await cellPoint(page, /^osc8-label$/, 2);
  await page.mouse.move(label.x, label.y);
  await page.locator(".link-tip").waitFor({ state: "visible", timeout: TIMEOUT });
  assert.equal(await page.locator(".link-tip").textContent(), oscUrl);
  await clickLink(/^osc8-label$/, 2, oscUrl);
  await page.locator(".link-tip").waitFor({ state: "hidden", timeout: TIMEOUT });

  // The javascript: link is no link: no pointer, and a click opens nothing
  // and runs nothing. The next tab to open is the web link clicked after it.
  const js = await cellPoint(page, /^js-label$/, 2);
  await page.mouse.move(js.x, js.y);
  await page.mouse.down();
  await page.mouse.up();
  // xterm offers only http(s) OSC 8 links; the page's handler, which opens
  // them, refuses the rest on its own too (given them through xterm's API).
  const hostile = ["javascript:window.tetherPwned=1", " JavaScript:window.tetherPwned=2", "data:text/html,<script>opener.tetherPwned=3</script>", "file:///etc/passwd", "vbscript:x", "not a url"];
  await page.evaluate((uris) => {
    for (const uri of uris) window.tetherTerm.options.linkHandler.activate(new MouseEvent("click"), uri, { start: { x: 1, y: 1 }, end: { x: 2, y: 1 } });
  }, hostile);
  assert.deepEqual(await page.evaluate(() => window.tether.links.refused), hostile);
  const next = context.waitForEvent("page", { timeout: TIMEOUT });
  const web = await cellPoint(page, /^web: http/, 8);
  await page.mouse.move(web.x, web.y);
  await page.waitForFunction(() => document.querySelector("#terminal .xterm-cursor-pointer") !== null, null, { timeout: TIMEOUT });
  await page.mouse.down();
  await page.mouse.up();
  const tab = await next;
  await tab.waitForURL(webUrl, { timeout: TIMEOUT });
  await tab.close();
  assert.equal(await page.evaluate(() => window.tetherPwned), undefined);
  assert.equal(dialogs, 0);
  assert.deepEqual(await page.evaluate(() => window.tether.links.opened), [webUrl, oscUrl, webUrl]);
  assert.equal(context.pages().length, 1);
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("search: Ctrl+Shift+F finds a line far up the scrollback, scrolls to it, and steps between matches", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  await run(page, 'for i in $(seq 1 500); do echo "row $i of 500"; done');
  await waitForText(page, /^row 500 of 500$/);
  // From the terminal, the shortcut goes to the search field, not to bash.
  await page.keyboard.press("Control+Shift+F");
  assert.equal(await page.evaluate(() => document.activeElement?.id), "search-input");
  await page.keyboard.type("row 17 of");
  await page.waitForFunction(() => window.tether.search.resultCount === 1, null, { timeout: TIMEOUT });
  const found = await page.evaluate(() => {
    const term = window.tetherTerm;
    const buffer = term.buffer.active;
    let line = -1;
    for (let y = 0; y < buffer.length; y++) if (buffer.getLine(y).translateToString(true) === "row 17 of 500") line = y;
    return { line, viewportY: buffer.viewportY, baseY: buffer.baseY, rows: term.rows, selection: term.getSelection(), count: document.getElementById("search-count").textContent };
  });
  // The match is selected and in view, far above the bottom.
  assert.equal(found.selection, "row 17 of");
  assert.ok(found.line >= found.viewportY && found.line < found.viewportY + found.rows, JSON.stringify(found));
  assert.ok(found.viewportY < found.baseY - found.rows, `did not scroll up: ${JSON.stringify(found)}`);
  assert.equal(found.count, "1/1");
  await screenshot(page, "search");

  // 50 matches (7, 17, ..., 497): Enter and the buttons step through them.
  await page.locator("#search-input").fill("7 of 500");
  await page.waitForFunction(() => window.tether.search.resultCount === 50, null, { timeout: TIMEOUT });
  const first = await page.evaluate(() => window.tether.search.resultIndex);
  await page.keyboard.press("Enter");
  await page.waitForFunction((i) => window.tether.search.resultIndex === (i + 1) % 50, first, { timeout: TIMEOUT });
  await page.locator("#search-prev").click();
  await page.waitForFunction((i) => window.tether.search.resultIndex === i, first, { timeout: TIMEOUT });
  await page.locator("#search-next").click();
  await page.waitForFunction((i) => window.tether.search.resultIndex === (i + 1) % 50, first, { timeout: TIMEOUT });
  assert.match(await page.locator("#search-count").textContent(), /^\d+\/50$/);
  // The current match is the selection (and has the active-match decoration).
  assert.equal(await page.evaluate(() => window.tetherTerm.getSelection()), "7 of 500");
  // Escape: back to the terminal, which types again.
  await page.locator("#search-input").press("Escape");
  assert.equal(await page.evaluate(() => document.activeElement?.classList.contains("xterm-helper-textarea")), true);
  await page.keyboard.type("echo typed-after-search\n");
  await waitForText(page, /^typed-after-search$/);
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("copy on select, and a paste reaches a program in bracketed-paste mode as ESC[200~ ... ESC[201~", { timeout: 60_000 }, async () => {
  const page = await openTerminal(undefined, { permissions: ["clipboard-read", "clipboard-write"] });
  await run(page, "echo copy-me-$((3*3))");
  await waitForText(page, /^copy-me-9$/);
  // A double click selects the word; the selection goes to the clipboard.
  const word = await cellPoint(page, /^copy-me-9$/, 3);
  await page.mouse.dblclick(word.x, word.y);
  await page.waitForFunction(() => window.tether.copy.copied === "copy-me-9", null, { timeout: TIMEOUT });
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "copy-me-9");

  // A program that asked for bracketed paste (ESC[?2004h) and shows what it
  // reads (cat -v: ESC as ^[), without the terminal's echo.
  await run(page, "stty -echo; printf '\\033[?2004h'; echo READY; cat -v");
  await waitForText(page, /^READY$/);
  // The browser's own paste (Ctrl+Shift+V), handled by xterm.
  await page.keyboard.press("Control+Shift+V");
  await page.keyboard.press("Enter");
  await waitForText(page, /^\^\[\[200~copy-me-9\^\[\[201~$/);
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("a program's title becomes the tab's; the bell flashes, and while the tab is hidden marks the title and notifies", { timeout: 60_000 }, async () => {
  const page = await openTerminal(undefined, { permissions: ["notifications"] });
  assert.equal(await page.title(), "tether · browser terminal");
  await run(page, "printf '\\033]0;my title\\007'; echo titled");
  await waitForText(page, /^titled$/);
  await page.waitForFunction(() => document.title === "my title · tether", null, { timeout: TIMEOUT });

  // The flash is brief: watch for the class from before the bell rings.
  await page.evaluate(() => {
    const pane = document.getElementById("terminal-pane");
    window.bellSeen = false;
    new MutationObserver(() => {
      if (pane.classList.contains("bell")) window.bellSeen = true;
    }).observe(pane, { attributes: true, attributeFilter: ["class"] });
  });
  await run(page, "printf '\\007'; echo rang");
  await waitForText(page, /^rang$/);
  await page.waitForFunction(() => window.bellSeen === true, null, { timeout: TIMEOUT });
  assert.deepEqual(await page.evaluate(() => window.tether.attention), { title: "my title", bells: 1, notifications: 0 });

  // Ask for notifications (the checkbox asks the browser; granted here),
  // then hide the tab, as the browser says it does.
  await page.locator("#bell-notify").check();
  await page.waitForFunction(() => Notification.permission === "granted" && document.getElementById("bell-notify").checked, null, { timeout: TIMEOUT });
  await page.evaluate(() => {
    Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
    document.dispatchEvent(new Event("visibilitychange"));
  });
  await run(page, "printf '\\007'; echo rang-hidden");
  await page.waitForFunction(() => window.tether.attention.notifications === 1, null, { timeout: TIMEOUT });
  assert.equal(await page.title(), "🔔 my title · tether");
  // Shown again: the mark goes.
  await page.evaluate(() => {
    delete document.hidden;
    delete document.visibilityState;
    document.dispatchEvent(new Event("visibilitychange"));
  });
  await page.waitForFunction(() => document.title === "my title · tether", null, { timeout: TIMEOUT });

  // A new session starts from the page's own title.
  await page.locator("#command").fill(SHELL);
  await page.locator("#spawn button[type=submit]").click();
  await page.waitForFunction(() => document.title === "tether · browser terminal", null, { timeout: TIMEOUT });
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("Unicode 11 widths: an emoji takes two cells", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  // U+1F600, one cell wide in xterm's default (Unicode 6) table.
  await run(page, "printf 'emoji:\\xf0\\x9f\\x98\\x80|\\n'");
  await waitForText(page, /^emoji:😀\|$/);
  const cells = await page.evaluate(() => {
    const buffer = window.tetherTerm.buffer.active;
    for (let y = buffer.length - 1; y >= 0; y--) {
      const line = buffer.getLine(y);
      if (line.translateToString(true) === "emoji:😀|") {
        return { version: window.tetherTerm.unicode.activeVersion, width: line.getCell(6).getWidth(), after: line.getCell(8).getChars() };
      }
    }
  });
  assert.deepEqual(cells, { version: "11", width: 2, after: "|" });
  // The cursor after one emoji at the start of a line is in column 2.
  const x = await page.evaluate(() => new Promise((resolve) => window.tetherTerm.write("\r\n😀", () => resolve(window.tetherTerm.buffer.active.cursorX))));
  assert.equal(x, 2);
  await page.close();
});

test("the renderer: WebGL by default, DOM when the URL asks, and DOM after the WebGL context is lost", { timeout: 90_000 }, async (t) => {
  const page = await openTerminal();
  // As JSON: what is undefined is left out.
  const renderer = (p) => p.evaluate(() => JSON.parse(JSON.stringify(window.tether.renderer)));
  const state = await page.evaluate(() => ({
    renderer: JSON.parse(JSON.stringify(window.tether.renderer)),
    info: document.getElementById("renderer-info").textContent,
    canvases: document.querySelectorAll("#terminal .xterm-screen canvas").length,
    rows: document.querySelectorAll("#terminal .xterm-rows").length,
    gl: (() => {
      const gl = document.createElement("canvas").getContext("webgl2");
      const debug = gl?.getExtension("WEBGL_debug_renderer_info");
      return gl ? gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER) : null;
    })(),
  }));
  t.diagnostic(`this Chromium's WebGL2: ${state.gl}`);
  // This Chromium (headless, --disable-gpu) has WebGL2 through SwiftShader.
  // Where it has none, the page must say it fell back.
  if (state.gl === null) {
    assert.equal(state.renderer.active, "dom");
    assert.match(state.info, /renderer: DOM \(WebGL is not available/);
  } else {
    assert.deepEqual(state.renderer, { wanted: "webgl", active: "webgl" });
    assert.equal(state.info, "renderer: WebGL");
    assert.ok(state.canvases >= 1, JSON.stringify(state));
    assert.equal(state.rows, 0, "the DOM renderer's rows are gone");
    // The context lost for good: the terminal goes on with the DOM renderer.
    await page.evaluate(() => {
      for (const canvas of document.querySelectorAll("#terminal .xterm-screen canvas:not(.xterm-link-layer)")) {
        canvas.getContext("webgl2")?.getExtension("WEBGL_lose_context")?.loseContext();
      }
    });
    await page.waitForFunction(() => window.tether.renderer.active === "dom", null, { timeout: TIMEOUT });
    assert.deepEqual(await renderer(page), { wanted: "webgl", active: "dom", fallback: "the WebGL context was lost" });
    assert.match(await page.locator("#renderer-info").textContent(), /renderer: DOM \(the WebGL context was lost\)/);
    await run(page, "echo drawn-by-dom-$((2*21))");
    await page.waitForFunction(() => /drawn-by-dom-42/.test(document.querySelector("#terminal .xterm-rows")?.textContent ?? ""), null, { timeout: TIMEOUT });
  }
  await page.close();

  // ttyd's way: the preference in the query string.
  const dom = await openTerminal(undefined, { query: "renderer=dom" });
  assert.deepEqual(await renderer(dom), { wanted: "dom", active: "dom" });
  assert.equal(await dom.locator("#renderer-info").textContent(), "renderer: DOM");
  await run(dom, "echo drawn-by-dom-$((3*3))");
  // What the DOM renderer draws is text in the page.
  await dom.waitForFunction(() => /drawn-by-dom-9/.test(document.querySelector("#terminal .xterm-rows")?.textContent ?? ""), null, { timeout: TIMEOUT });
  assert.deepEqual(dom.problems, []);
  await dom.close();
});

test("images: a SIXEL image shows in the cells after it; one over the pixel limit is dropped", { timeout: 60_000 }, async () => {
  const page = await openTerminal();
  // Two sixel bands of 20 red pixels: 20x12 pixels, below the line "small".
  await run(page, "echo small; printf '\\033Pq#0;2;100;0;0#0!20~-#0!20~\\033\\\\'; echo; echo after-small");
  await waitForText(page, /^after-small$/);
  // 3000 pixels wide, 700 bands of 6 rows: 12.6 million pixels, over the
  // page's limit (2048x2048), in a sequence of only 7 kB.
  await run(page, "echo large; s=$(printf '#0!3000~-%.0s' $(seq 700)); printf \"\\033Pq#0;2;0;100;0$s\\033\\\\\"; echo; echo after-large");
  await waitForText(page, /^after-large$/);
  const shown = await page.evaluate(() => {
    const buffer = window.tetherTerm.buffer.active;
    const lineOf = (text) => {
      for (let y = buffer.length - 1; y >= 0; y--) if (buffer.getLine(y).translateToString(true) === text) return y;
      return -1;
    };
    const images = window.tether.images;
    const size = (canvas) => (canvas ? [canvas.width, canvas.height] : null);
    return {
      small: size(images.getImageAtBufferCell(0, lineOf("small") + 1)),
      large: size(images.getImageAtBufferCell(0, lineOf("large") + 1)),
      limit: images.storageLimit,
      usage: images.storageUsage,
    };
  });
  assert.deepEqual(shown.small, [20, 12], JSON.stringify(shown));
  assert.equal(shown.large, null, JSON.stringify(shown));
  assert.equal(shown.limit, 32);
  // Only the small image is stored (20x12 RGBA).
  assert.ok(shown.usage > 0 && shown.usage < 0.01, JSON.stringify(shown));
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("files: a file dropped on the terminal lands in the session's directory, after its cd; download saves a file the session sees", { timeout: 60_000 }, async () => {
  const page = await openTerminal(undefined, { prompt: false });
  await run(page, "mkdir -p /tmp/page-files-$$ && cd /tmp/page-files-$$ && echo in-$$");
  await waitForText(page, /^in-\d+$/);
  await page.waitForFunction(() => !document.getElementById("download").disabled, null, { timeout: TIMEOUT });
  // A drop as the browser makes one: a DataTransfer holding a File.
  await page.evaluate(() => {
    const data = new DataTransfer();
    data.items.add(new File(["dropped-content\n"], "dropped.txt"));
    const pane = document.getElementById("terminal-pane");
    pane.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
  });
  await page.waitForFunction(() => window.tether.files.uploaded.includes("dropped.txt") || window.tether.files.error, null, { timeout: TIMEOUT });
  assert.equal(await page.evaluate(() => window.tether.files.error), "");
  await run(page, "cat dropped.txt");
  await waitForText(page, /^dropped-content$/);

  // Download: the page asks which file, the browser saves it.
  page.once("dialog", (dialog) => void dialog.accept("dropped.txt"));
  const saved = page.waitForEvent("download", { timeout: TIMEOUT });
  await page.click("#download");
  const download = await saved;
  assert.equal(download.suggestedFilename(), "dropped.txt");
  const { readFile } = await import("node:fs/promises");
  assert.equal(await readFile(await download.path(), "utf8"), "dropped-content\n");
  assert.deepEqual(await page.evaluate(() => window.tether.files.downloaded), ["dropped.txt"]);

  // A file the session cannot see: the error is said, nothing is saved.
  page.once("dialog", (dialog) => void dialog.accept("no-such-file"));
  await page.click("#download");
  await page.waitForFunction(() => /no-such-file/.test(window.tether.files.error), null, { timeout: TIMEOUT });
  await run(page, "cd / && rm -rf /tmp/page-files-*");
  await page.close();
});

test("replay: #replay=ID plays a finished session from its recording, starts at &t=, and steps with play and the slider", { timeout: 60_000 }, async () => {
  const spawned = await fetch(`${baseUrl}/v1/processes`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command: "echo replay-one; sleep 0.8; echo replay-two", tty: true }),
  }).then((r) => r.json());
  const exited = await fetch(`${baseUrl}/v1/processes/${spawned.id}/wait?timeout_ms=10000`).then((r) => r.json());
  assert.equal(exited.status, "exited");
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  // Between the two lines: the first shown, the second not yet.
  await page.goto(`${baseUrl}/#replay=${spawned.id}&t=0.4`);
  await page.waitForFunction(() => window.tether?.replay?.duration > 0.7, null, { timeout: TIMEOUT });
  await waitForText(page, /^replay-one\r?$/);
  assert.ok(!/replay-two/.test(await page.evaluate(() => window.tether.text())), "the second line before its time");
  const state = await page.evaluate(() => ({ ...window.tether.replay }));
  assert.equal(state.playing, false);
  assert.ok(Math.abs(state.position - 0.4) < 0.01, `${state.position}`);
  // Play at 4x: the rest comes, and the replay stops at its end.
  await page.selectOption("#replay-speed", "4");
  await page.click("#replay-play");
  await waitForText(page, /^replay-two\r?$/);
  await page.waitForFunction(() => window.tether.replay.playing === false, null, { timeout: TIMEOUT });
  // The slider back to the start: the terminal redrawn from nothing (the
  // first line may have been written in the first millisecond, time 0).
  await page.$eval("#replay-position", (slider) => {
    slider.value = "0";
    slider.dispatchEvent(new Event("input"));
  });
  await page.waitForFunction(() => !/replay-two/.test(window.tether.text()), null, { timeout: TIMEOUT });
  // A link to this moment.
  await page.$eval("#replay-position", (slider) => {
    slider.value = "0.5";
    slider.dispatchEvent(new Event("input"));
  });
  await page.click("#replay-link");
  assert.match(page.url(), /[#&]t=0\.50/);
  await screenshot(page, "replay");
  await page.close();
});

test("replay follows a running session: what it writes after the page opened the replay comes on, and its exit ends the replay", { timeout: 60_000 }, async () => {
  const spawned = await fetch(`${baseUrl}/v1/processes`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command: 'echo follow-before; read line; echo "follow-after-$line"; read line', tty: true }),
  }).then((r) => r.json());
  const stdin = async (text) => {
    const response = await fetch(`${baseUrl}/v1/processes/${spawned.id}/stdin`, { method: "POST", body: text });
    assert.equal(response.status, 204);
  };
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  await page.goto(`${baseUrl}/#replay=${spawned.id}`);
  await waitForText(page, /^follow-before\r?$/);
  // Played to the end of what was written, the recording still open.
  await page.waitForFunction(() => window.tether.replay.live && window.tether.replay.playing, null, { timeout: TIMEOUT });
  assert.match(await page.textContent("#replay-time"), /live/);
  assert.ok(!/follow-after/.test(await page.evaluate(() => window.tether.text())), "the line before it was written");
  // Written after the page opened the replay: it comes on.
  await stdin("late\n");
  await waitForText(page, /^follow-after-late\r?$/);
  // The exit ends the recording, and the replay stops at its end.
  await stdin("bye\n");
  await page.waitForFunction(() => !window.tether.replay.live && !window.tether.replay.playing, null, { timeout: TIMEOUT });
  const state = await page.evaluate(() => ({ ...window.tether.replay }));
  assert.ok(Math.abs(state.position - state.duration) < 0.01, `${state.position} of ${state.duration}`);
  assert.doesNotMatch(await page.textContent("#replay-time"), /live/);
  await page.close();
});

test("static files: the page's script and styles come brotli-compressed (Vary: Accept-Encoding), and the page runs from them", { timeout: 60_000 }, async () => {
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  const served = new Map();
  page.on("response", (response) => {
    const headers = response.headers();
    served.set(new URL(response.url()).pathname, { encoding: headers["content-encoding"], vary: headers.vary });
  });
  await page.goto(`${baseUrl}/#cmd=${encodeURIComponent(SHELL)}`);
  // The script ran from the bytes the browser decoded: a shell's prompt.
  await waitForText(page, /[#$] ?$/);
  for (const file of ["/app.js", "/style.css", "/xterm.css"]) {
    assert.deepEqual(served.get(file), { encoding: "br", vary: "accept-encoding" }, file);
  }
  // What was sent is the build's copy, far smaller than the script.
  const script = await page.evaluate(() => performance.getEntriesByName(new URL("/app.js", location.href).href)[0]?.toJSON());
  assert.ok(script && script.encodedBodySize * 3 < script.decodedBodySize, JSON.stringify(script));
  await page.close();
});
