// Accessibility (issue 49): the toolbar and the panel without a mouse (the
// Tab order, a focus ring on every control, Escape closing the share box,
// Ctrl+Shift+E then Tab out of the terminal), the screen reader mode (xterm's
// accessibility tree), and contrast as WCAG AA asks (4.5:1 for text, 3:1
// for a field's edge and the focus ring) in both themes, measured on the
// colours Chromium computes. Chromium and a real tetherd
// (test/harness.mjs); every wait is on a condition, bounded.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { TIMEOUT, openTerminal, run, screenshot, setup, shareLink, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

/** What has the focus: its id (or class), whether it is the terminal's, and its outline. */
const focused = (page) =>
  page.evaluate(() => {
    const el = document.activeElement;
    const style = getComputedStyle(el);
    return {
      id: el === window.tetherTerm.textarea ? "terminal" : el.id || el.className || el.tagName,
      outline: `${style.outlineStyle} ${parseFloat(style.outlineWidth)}`,
      visible: el.matches(":focus-visible"),
    };
  });

/** Presses Tab (or Shift+Tab) until `id` has the focus, at most `limit` times; returns what had it on the way. */
async function tabTo(page, id, { back = false, limit = 40 } = {}) {
  const seen = [];
  for (let i = 0; i < limit; i++) {
    await page.keyboard.press(back ? "Shift+Tab" : "Tab");
    const now = await focused(page);
    seen.push(now);
    if (now.id === id) return seen;
  }
  assert.fail(`${id} never had the focus; it went ${seen.map((s) => s.id).join(", ")}`);
}

test("the keyboard alone: Tab reaches every control in order, each with a focus ring; share, search and end work from the keyboard; Ctrl+Shift+E then Tab leaves the terminal", { timeout: 90_000 }, async () => {
  const page = await openTerminal();
  // From the top of the page: a click on the brand, which takes no focus,
  // puts the browser's starting point for Tab there.
  const fromTheTop = () => page.locator(".brand").click();
  await fromTheTop();
  const toolbar = await tabTo(page, "terminal");
  assert.deepEqual(
    toolbar.map((f) => f.id),
    ["command", "name", "new", "end", "share-open", "search-input", "search-prev", "search-next", "terminal"],
  );
  for (const f of toolbar.slice(0, -1)) assert.deepEqual([f.id, f.outline, f.visible], [f.id, "solid 2", true]);

  // In the terminal Tab is the shell's; Ctrl+Shift+E then Shift+Tab leaves it backwards.
  await page.keyboard.press("Control+Shift+E");
  assert.equal(await page.evaluate(() => window.tether.keyboard.leaving), true);
  await page.keyboard.press("Shift+Tab");
  assert.equal((await focused(page)).id, "search-next");

  // Share: Enter opens the box on its first choice, Enter makes the link, Escape closes the box.
  await tabTo(page, "share-open", { back: true });
  await page.keyboard.press("Enter");
  await page.locator("#share").waitFor({ state: "visible", timeout: TIMEOUT });
  assert.equal(await page.getAttribute("#share-open", "aria-expanded"), "true");
  assert.equal((await focused(page)).id, "share-read");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => window.tether.shareUrl !== undefined, null, { timeout: TIMEOUT });
  assert.equal((await focused(page)).id, "share-url");
  await page.keyboard.press("Escape");
  await page.locator("#share").waitFor({ state: "hidden", timeout: TIMEOUT });
  assert.deepEqual([(await focused(page)).id, await page.getAttribute("#share-open", "aria-expanded")], ["share-open", "false"]);

  // Search: typed into, Escape back to the terminal, where keys go to the shell.
  await tabTo(page, "search-input");
  await page.keyboard.type("bash");
  await page.waitForFunction(() => window.tether.search.resultCount > 0, null, { timeout: TIMEOUT });
  await page.keyboard.press("Escape");
  assert.equal((await focused(page)).id, "terminal");
  await page.keyboard.type("echo keyboard-$((7*6))");
  await page.keyboard.press("Enter");
  await waitForText(page, /^keyboard-42$/);

  // A Tab alone stays in the terminal (the shell completes: `ech` becomes `echo`);
  // Ctrl+Shift+E then Tab goes on to the side panel, whose controls all take the focus, with a ring.
  await page.keyboard.type("ech");
  await page.keyboard.press("Tab");
  await waitForText(page, /[#$] echo$/);
  assert.equal((await focused(page)).id, "terminal");
  await page.keyboard.press("Control+U");
  await page.keyboard.press("Control+Shift+E");
  await page.keyboard.press("Tab");
  assert.equal((await focused(page)).id, "refresh");
  const panel = await tabTo(page, "prefs-reset");
  for (const id of ["bell-notify", "download", "pref-fontSize", "pref-fontFamily", "pref-theme", "pref-cursorStyle", "pref-scrollback", "pref-renderer", "pref-softKeys", "pref-cursorBlink", "pref-copyOnSelect", "pref-screenReaderMode", "pref-leaveAlert", "prefs-reset"]) {
    const f = panel.find((p) => p.id === id);
    assert.ok(f, `${id} is not in the Tab order: ${panel.map((p) => p.id).join(", ")}`);
    assert.deepEqual([f.outline, f.visible], ["solid 2", true], id);
  }

  // End: from the top again, Tab to it and press Space.
  await fromTheTop();
  await tabTo(page, "end");
  await screenshot(page, "focus-end");
  await page.keyboard.press("Space");
  await page.waitForFunction(() => window.tether.exit !== undefined, null, { timeout: TIMEOUT });
  assert.equal(await page.evaluate(() => window.tether.exit.reason), "killed");
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("screen reader mode: xterm's accessibility tree holds the terminal's text, from the URL or the panel", { timeout: 60_000 }, async () => {
  const tree = (page) => page.evaluate(() => document.querySelector("#terminal .xterm-accessibility-tree")?.textContent ?? null);
  const plain = await openTerminal();
  assert.equal(await tree(plain), null, "no tree unless asked for");
  // Turned on from the panel.
  await plain.locator("#pref-screenReaderMode").check();
  await run(plain, "echo read-aloud-$((5*5))");
  await plain.waitForFunction(() => /read-aloud-25/.test(document.querySelector("#terminal .xterm-accessibility-tree")?.textContent ?? ""), null, { timeout: TIMEOUT });
  await plain.close();

  const page = await openTerminal(undefined, { query: "screenReaderMode=1" });
  await run(page, "echo spoken-$((6*7))");
  await page.waitForFunction(() => /spoken-42/.test(document.querySelector("#terminal .xterm-accessibility-tree")?.textContent ?? ""), null, { timeout: TIMEOUT });
  // A row of the tree per row of the screen, as a list a reader can walk.
  const shape = await page.evaluate(() => {
    const root = document.querySelector("#terminal .xterm-accessibility-tree");
    return { role: root.getAttribute("role"), rows: root.querySelectorAll(":scope > [role=listitem]").length, screen: window.tetherTerm.rows };
  });
  assert.equal(shape.role, "list");
  assert.equal(shape.rows, shape.screen, JSON.stringify(shape));
  assert.deepEqual(page.problems, []);
  await page.close();
});

/** WCAG's contrast ratio of two sRGB colours ([r, g, b], 0 to 255). */
function ratio(a, b) {
  const lum = (c) =>
    c
      .map((v) => v / 255)
      .map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4))
      .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}
const hex = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));

/**
 * Every piece of text on the page that is shown and not disabled (WCAG
 * exempts inactive controls), with its colour and the colour under it
 * (the backgrounds of it and its ancestors, blended), and every field's
 * edge and the focus ring with what is around them. In the page: runs there.
 */
function measure() {
  const parse = (css) => {
    const parts = css.match(/[\d.]+/g).map(Number);
    return [parts[0], parts[1], parts[2], parts[3] ?? 1];
  };
  const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat(1);
  const under = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const bg = parse(getComputedStyle(e).backgroundColor);
      if (bg[3] > 0) layers.push(bg);
      if (bg[3] >= 1) break;
    }
    return layers.reverse().reduce((c, layer) => over(layer, c), [255, 255, 255, 1]);
  };
  const opacity = (el) => {
    let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o;
  };
  const name = (el) => el.id || el.dataset.key || el.dataset.modifier || el.dataset.text || `${el.tagName.toLowerCase()} "${el.textContent.trim().slice(0, 24)}"`;
  const shown = (el) => el.checkVisibility({ visibilityProperty: true, opacityProperty: true }) && !el.closest(".visually-hidden");
  const texts = [];
  const add = (el, what, color, background) => {
    const fg = parse(color);
    fg[3] *= opacity(el);
    texts.push({ el: `${name(el)}${what}`, fg: over(fg, background).slice(0, 3), bg: background.slice(0, 3) });
  };
  for (const el of document.querySelectorAll("body *")) {
    if (!shown(el) || el.closest("#terminal, script, style") || el.closest(":disabled")) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim() !== "");
    if (own) add(el, "", getComputedStyle(el).color, under(el));
    if ((el instanceof HTMLInputElement && el.type !== "checkbox") || el instanceof HTMLSelectElement) {
      if (el.value !== "") add(el, " (value)", getComputedStyle(el).color, under(el));
      else if (el.placeholder) add(el, " (placeholder)", getComputedStyle(el, "::placeholder").color, under(el));
    }
  }
  const edges = [];
  for (const el of document.querySelectorAll("input:not([type=checkbox]), select")) {
    if (!shown(el) || el.disabled) continue;
    edges.push({ el: `${name(el)} edge`, fg: parse(getComputedStyle(el).borderTopColor).slice(0, 3), bg: under(el.parentElement).slice(0, 3) });
  }
  // The focus ring, on the toolbar and the side panel.
  const ring = document.createElement("button");
  for (const where of [document.querySelector("header"), document.querySelector(".settings")]) {
    where.append(ring);
    ring.focus({ focusVisible: true });
    edges.push({ el: `focus ring in ${where.tagName.toLowerCase()}`, fg: parse(getComputedStyle(ring).outlineColor).slice(0, 3), bg: under(where).slice(0, 3) });
    ring.remove();
  }
  return { texts, edges, theme: window.tetherTerm.options.theme };
}

// The palette entries a program uses as a background, or for text meant to
// be barely seen (README.md, "Contrast"): not held to 4.5:1.
const EXEMPT = { dark: ["black"], light: ["brightWhite"] };
const PALETTE = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white", "brightBlack", "brightRed", "brightGreen", "brightYellow", "brightBlue", "brightMagenta", "brightCyan", "brightWhite"];

for (const theme of ["dark", "light"]) {
  test(`contrast in the ${theme} theme: every text 4.5:1, every field's edge and the focus ring 3:1, the terminal's palette 4.5:1 on its background`, { timeout: 60_000 }, async (t) => {
    const page = await openTerminal(undefined, { query: `theme=${theme}&softKeys=on` });
    // What the page shows besides the toolbar: a search's count, the share box with a link, the exit banner.
    await page.locator("#search-input").fill("bash");
    await page.waitForFunction(() => window.tether.search.resultCount > 0, null, { timeout: TIMEOUT });
    await shareLink(page);
    const first = await page.evaluate(measure);
    await run(page, "exit 3");
    await page.locator("#exit").waitFor({ state: "visible", timeout: TIMEOUT });
    const second = await page.evaluate(measure);
    // The page's own notice in the terminal: bright black (a palette entry held to 4.5:1), not dim.
    await waitForText(page, /^\[Process exited with code 3/);
    const notice = await page.evaluate(() => {
      const buffer = window.tetherTerm.buffer.active;
      for (let y = buffer.length - 1; y >= 0; y--) {
        const line = buffer.getLine(y);
        if (!line.translateToString(true).startsWith("[Process exited")) continue;
        const cell = line.getCell(1);
        return { palette: cell.isFgPalette(), colour: cell.getFgColor(), dim: cell.isDim() };
      }
      return null;
    });
    assert.deepEqual(notice, { palette: true, colour: 8, dim: 0 });
    // A held soft key (Ctrl), drawn as pressed.
    await page.locator('#softkeys [data-modifier="ctrl"]').click();
    assert.equal(await page.getAttribute('#softkeys [data-modifier="ctrl"]', "aria-pressed"), "true");
    const third = await page.evaluate(measure);
    await screenshot(page, `contrast-${theme}`);

    const texts = [...first.texts, ...second.texts, ...third.texts].map((m) => ({ ...m, ratio: ratio(m.fg, m.bg) }));
    const edges = first.edges.map((m) => ({ ...m, ratio: ratio(m.fg, m.bg) }));
    for (const id of ["status", "lifetime", "share-read", "search-count", "exit", "new", "refresh", "escape", "prefs-reset"]) assert.ok(texts.some((m) => m.el.startsWith(id)), `${id} was not measured`);
    const low = texts.filter((m) => m.ratio < 4.5);
    assert.deepEqual(low, [], `text under 4.5:1 in the ${theme} theme`);
    assert.deepEqual(edges.filter((m) => m.ratio < 3), [], `edges under 3:1 in the ${theme} theme`);

    // The terminal: its default colours, and the 16 a program picks from, on its background.
    const palette = first.theme;
    const background = hex(palette.background);
    const colours = [["foreground", ratio(hex(palette.foreground), background)], ...PALETTE.map((name) => [name, ratio(hex(palette[name]), background)])];
    for (const [name, r] of colours) if (!EXEMPT[theme].includes(name)) assert.ok(r >= 4.5, `${name} is ${r.toFixed(2)}:1 on the terminal's background`);

    const min = (list) => list.reduce((a, b) => (b.ratio < a.ratio ? b : a));
    const lowestText = min(texts);
    const lowestEdge = min(edges);
    const lowestColour = colours.filter(([name]) => !EXEMPT[theme].includes(name)).reduce((a, b) => (b[1] < a[1] ? b : a));
    t.diagnostic(`${theme}: ${texts.length} texts, lowest ${lowestText.ratio.toFixed(2)}:1 (${lowestText.el}); edges lowest ${lowestEdge.ratio.toFixed(2)}:1 (${lowestEdge.el}); terminal foreground ${colours[0][1].toFixed(2)}:1, palette lowest ${lowestColour[1].toFixed(2)}:1 (${lowestColour[0]})`);
    assert.deepEqual(page.problems, []);
    await page.close();
  });
}
