// Preferences (issue 49, src/preferences.ts and src/settings.ts): from the
// URL, kept per browser in localStorage (the URL winning over what is
// kept), changed from the side panel, and the theme following the
// system's colour scheme. Read from xterm's options, the page's computed
// styles and what the terminal holds. Chromium and a real tetherd
// (test/harness.mjs); every wait is on a condition, bounded.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { SHELL, TIMEOUT, baseUrl, openTerminal, run, setup, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

const FRAGMENT = `cmd=${encodeURIComponent(SHELL)}`;

/** Loads the page again in the same tab (same localStorage), on a new shell, with this query. */
async function reopen(page, query = "") {
  // Through a blank page: a URL that differs from this one only in its
  // fragment would not load the page again.
  await page.goto("about:blank");
  await page.goto(`${baseUrl}/${query ? `?${query}` : ""}#${FRAGMENT}`);
  await page.waitForFunction(() => window.tether?.status.startsWith("attached"), null, { timeout: TIMEOUT });
  await waitForText(page, /[#$] ?$/);
}

/** What the terminal and the page show of the preferences. */
const shown = (page) =>
  page.evaluate(() => {
    const o = window.tetherTerm.options;
    return {
      fontSize: o.fontSize,
      fontFamily: o.fontFamily,
      cursorStyle: o.cursorStyle,
      cursorBlink: o.cursorBlink,
      scrollback: o.scrollback,
      screenReaderMode: o.screenReaderMode,
      background: o.theme.background,
      light: document.documentElement.classList.contains("light"),
      renderer: window.tether.renderer.active,
    };
  });

const stored = (page) => page.evaluate(() => localStorage.getItem("tether.preferences"));

test("preferences from the URL: fontSize and theme, in the query or the fragment; a bad value is ignored and said", { timeout: 60_000 }, async () => {
  const page = await openTerminal(undefined, { query: "fontSize=20&theme=light" });
  const prefs = await page.evaluate(() => ({
    fontSize: window.tetherTerm.options.fontSize,
    background: window.tetherTerm.options.theme.background,
    light: document.documentElement.classList.contains("light"),
    header: getComputedStyle(document.querySelector("header")).backgroundColor,
  }));
  assert.deepEqual(prefs, { fontSize: 20, background: "#fbfbfc", light: true, header: "rgb(236, 238, 242)" });
  assert.deepEqual(page.problems, []);
  await page.close();

  // The fragment wins over the query; a value not understood is ignored.
  const other = await openTerminal(`fontSize=11&theme=sepia&${FRAGMENT}`, { query: "fontSize=20" });
  assert.equal(await other.evaluate(() => window.tetherTerm.options.fontSize), 11);
  assert.equal(await other.evaluate(() => document.documentElement.classList.contains("light")), false);
  assert.equal(await other.locator("#prefs-info").textContent(), "not understood, ignored: theme=sepia");
  await other.close();
});

test("font, cursor and scrollback from the URL take effect, are kept for the next load without the URL, and the URL wins over what is kept", { timeout: 90_000 }, async () => {
  const query = "fontFamily=DejaVu%20Sans%20Mono&cursorStyle=bar&cursorBlink=0&scrollback=300&fontSize=17";
  const page = await openTerminal(undefined, { query });
  const expected = { fontSize: 17, fontFamily: "DejaVu Sans Mono, monospace", cursorStyle: "bar", cursorBlink: false, scrollback: 300, screenReaderMode: false, background: "#1b1d23", light: false, renderer: "webgl" };
  assert.deepEqual(await shown(page), expected);
  // The scrollback is what the terminal keeps: 300 lines above the screen, no more.
  await run(page, "seq 1 2000");
  await waitForText(page, /^2000$/);
  const lines = await page.evaluate(() => [window.tetherTerm.buffer.active.length, window.tetherTerm.rows]);
  assert.equal(lines[0], lines[1] + 300, `buffer ${lines[0]} lines, screen ${lines[1]}`);

  // Kept: the next load without a preference in the URL has them.
  assert.deepEqual(JSON.parse(await stored(page)), { fontSize: "17", fontFamily: "DejaVu Sans Mono", cursorStyle: "bar", cursorBlink: "0", scrollback: "300" });
  await reopen(page);
  assert.deepEqual(await shown(page), expected);

  // The URL wins over what is kept, and is kept in turn.
  await reopen(page, "cursorStyle=underline");
  assert.equal((await shown(page)).cursorStyle, "underline");
  assert.equal((await shown(page)).fontSize, 17);
  assert.equal(JSON.parse(await stored(page)).cursorStyle, "underline");
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("what localStorage holds that is not a preference is ignored: garbage, a wrong shape, out-of-range values, CSS in a font", { timeout: 90_000 }, async () => {
  const page = await openTerminal();
  const defaults = await shown(page);
  assert.deepEqual(defaults, { fontSize: 14, fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace", cursorStyle: "block", cursorBlink: true, scrollback: 5000, screenReaderMode: false, background: "#1b1d23", light: false, renderer: "webgl" });
  for (const garbage of ["{not json", "[1,2]", "null", '"fontSize"', "42"]) {
    await page.evaluate((text) => localStorage.setItem("tether.preferences", text), garbage);
    await reopen(page);
    assert.deepEqual(await shown(page), defaults, garbage);
  }
  // One good value among bad ones: it alone applies.
  await page.evaluate(() =>
    localStorage.setItem(
      "tether.preferences",
      JSON.stringify({ fontSize: "999", cursorStyle: "<b>", scrollback: "-1", fontFamily: "x;}body{display:none", theme: "sepia", cursorBlink: 0, renderer: "canvas2", screenReaderMode: "0", softKeys: "sometimes", cursorWidth: "3" }),
    ),
  );
  await reopen(page);
  assert.deepEqual(await shown(page), defaults);
  assert.equal(await page.locator("#prefs-info").isVisible(), false, "what was stored is not the URL's to complain of");
  await page.evaluate(() => localStorage.setItem("tether.preferences", JSON.stringify({ fontSize: "999", cursorStyle: "underline" })));
  await reopen(page);
  assert.deepEqual(await shown(page), { ...defaults, cursorStyle: "underline" });
  // The page types and shows output as ever.
  await run(page, "echo still-$((6*7))");
  await waitForText(page, /^still-42$/);

  // From the URL, CSS in a font is refused and said.
  await reopen(page, "fontFamily=" + encodeURIComponent("x;}body{display:none"));
  assert.equal((await shown(page)).fontFamily, defaults.fontFamily);
  assert.match(await page.locator("#prefs-info").textContent(), /ignored: fontFamily=x;\}body\{display:none/);
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).display), "flex");
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("the panel changes preferences at once, keeps them over a reload (taking them out of the URL), and resets them", { timeout: 90_000 }, async () => {
  const page = await openTerminal(undefined, { query: "fontSize=20" });
  assert.equal(await page.locator("#pref-fontSize").inputValue(), "20");
  const cols = await page.evaluate(() => window.tetherTerm.cols);

  // A number: committed by Enter (a change event).
  await page.locator("#pref-fontSize").fill("12");
  await page.locator("#pref-fontSize").press("Enter");
  await page.waitForFunction(() => window.tetherTerm.options.fontSize === 12, null, { timeout: TIMEOUT });
  // A smaller font, more columns in the same box, and the session is told.
  await page.waitForFunction((before) => window.tetherTerm.cols > before, cols, { timeout: TIMEOUT });
  assert.doesNotMatch(page.url(), /fontSize/, "the URL would win over the panel at the next load");
  await page.locator("#pref-theme").selectOption("light");
  await page.locator("#pref-cursorStyle").selectOption("underline");
  await page.locator("#pref-scrollback").fill("100000");
  await page.locator("#pref-scrollback").press("Enter");
  await page.locator("#pref-renderer").selectOption("dom");
  await page.locator("#pref-cursorBlink").uncheck();
  const changed = { fontSize: 12, cursorStyle: "underline", cursorBlink: false, scrollback: 100000, background: "#fbfbfc", light: true, renderer: "dom" };
  const picked = (s) => Object.fromEntries(Object.keys(changed).map((k) => [k, s[k]]));
  await page.waitForFunction(() => window.tether.renderer.active === "dom", null, { timeout: TIMEOUT });
  assert.deepEqual(picked(await shown(page)), changed);
  assert.equal(await page.evaluate(() => getComputedStyle(document.querySelector("header")).backgroundColor), "rgb(236, 238, 242)");
  // The DOM renderer draws text in the page.
  await run(page, "echo panel-dom-$((5*5))");
  await page.waitForFunction(() => /panel-dom-25/.test(document.querySelector("#terminal .xterm-rows")?.textContent ?? ""), null, { timeout: TIMEOUT });

  // Out of range, or not a font: said on the control, and nothing changes.
  await page.locator("#pref-scrollback").fill("100001");
  await page.locator("#pref-scrollback").press("Enter");
  await page.locator("#pref-fontFamily").fill("x; color: red");
  await page.locator("#pref-fontFamily").press("Enter");
  assert.equal(await page.getAttribute("#pref-scrollback", "aria-invalid"), "true");
  assert.equal(await page.getAttribute("#pref-fontFamily", "aria-invalid"), "true");
  assert.deepEqual(picked(await shown(page)), changed);

  await reopen(page);
  assert.deepEqual(picked(await shown(page)), changed);
  assert.equal(await page.locator("#pref-theme").inputValue(), "light");

  // Reset: the defaults, nothing kept, nothing in the URL.
  await reopen(page, "cursorStyle=bar");
  await page.locator("#prefs-reset").click();
  await page.waitForFunction(() => window.tether.renderer.active === "webgl", null, { timeout: TIMEOUT });
  assert.deepEqual(picked(await shown(page)), { fontSize: 14, cursorStyle: "block", cursorBlink: true, scrollback: 5000, background: "#1b1d23", light: false, renderer: "webgl" });
  assert.equal(await stored(page), null);
  assert.doesNotMatch(page.url(), /cursorStyle/);
  assert.equal(await page.locator("#pref-fontSize").inputValue(), "14");
  await reopen(page);
  assert.equal((await shown(page)).cursorStyle, "block");
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("the theme follows the system's colour scheme by default, also when it changes; theme=dark or light holds", { timeout: 60_000 }, async () => {
  const colours = (page) =>
    page.evaluate(() => ({
      light: document.documentElement.classList.contains("light"),
      background: window.tetherTerm.options.theme.background,
      page: getComputedStyle(document.documentElement).backgroundColor,
    }));
  const light = { light: true, background: "#fbfbfc", page: "rgb(251, 251, 252)" };
  const dark = { light: false, background: "#1b1d23", page: "rgb(27, 29, 35)" };
  const page = await openTerminal(undefined, { context: { colorScheme: "light" } });
  assert.deepEqual(await colours(page), light);
  await page.emulateMedia({ colorScheme: "dark" });
  await page.waitForFunction(() => !document.documentElement.classList.contains("light"), null, { timeout: TIMEOUT });
  assert.deepEqual(await colours(page), dark);
  await page.close();

  const fixed = await openTerminal(undefined, { query: "theme=dark", context: { colorScheme: "light" } });
  assert.deepEqual(await colours(fixed), dark);
  await fixed.emulateMedia({ colorScheme: "dark" });
  await fixed.emulateMedia({ colorScheme: "light" });
  // Still dark after the system changed twice (the second change ends lighter).
  await fixed.waitForFunction(() => matchMedia("(prefers-color-scheme: light)").matches, null, { timeout: TIMEOUT });
  assert.deepEqual(await colours(fixed), dark);
  await fixed.close();
});
