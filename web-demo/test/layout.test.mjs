// The page's layout (issue 49): the toolbar in one row at 800 and 1100 px
// wide, the page on a phone (390x844, touch) with its soft keys, and what
// those keys send, as a program in the session reads it. Chromium and a
// real tetherd (test/harness.mjs); every wait is on a condition, bounded.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { TIMEOUT, openTerminal, run, screenshot, setup, shareLink, teardown, waitForText } from "./harness.mjs";

before(setup);
after(teardown);

const PHONE = { viewport: { width: 390, height: 844 }, context: { isMobile: true, hasTouch: true } };

/** The toolbar's box and what is laid out in it (the share box floats below it). */
const toolbar = (page) =>
  page.evaluate(() => {
    const header = document.querySelector("header");
    const box = header.getBoundingClientRect();
    const items = [...header.children]
      .filter((el) => getComputedStyle(el).display !== "none" && el.getClientRects().length > 0)
      .map((el) => {
        const r = el.getBoundingClientRect();
        return { id: el.id || el.className, left: r.left, right: r.right, top: r.top, bottom: r.bottom };
      });
    const share = document.getElementById("share").getBoundingClientRect();
    return {
      height: box.height,
      right: box.right,
      buttonHeight: document.querySelector("#end").getBoundingClientRect().height,
      scrollWidth: header.scrollWidth,
      clientWidth: header.clientWidth,
      share: { left: share.left, right: share.right, width: share.width },
      innerWidth: window.innerWidth,
      items,
    };
  });

for (const width of [800, 1100]) {
  test(`the toolbar is one row at ${width} px, with the search count and a share link shown`, { timeout: 60_000 }, async (t) => {
    const page = await openTerminal(undefined, { viewport: { width, height: 600 } });
    const check = (m, when) => {
      const where = `${when}: ${JSON.stringify(m)}`;
      assert.ok(m.height < 2 * m.buttonHeight, `the toolbar is ${m.height} px high, a button ${m.buttonHeight}: ${where}`);
      assert.ok(m.scrollWidth <= m.clientWidth, `the toolbar overflows: ${where}`);
      // Everything the toolbar holds: the command, end, share, search, the lifetime and the status.
      for (const id of ["spawn", "end", "share-wrap", "search", "lifetime", "status"]) assert.ok(m.items.some((item) => item.id === id), `${id} is not shown: ${where}`);
      for (const [i, item] of m.items.entries()) {
        assert.ok(item.top >= 0 && item.bottom <= m.height, `${item.id} is not in the row: ${where}`);
        assert.ok(item.right <= m.right, `${item.id} is cut off: ${where}`);
        if (i > 0) assert.ok(item.left >= m.items[i - 1].right, `${item.id} overlaps ${m.items[i - 1].id}: ${where}`);
      }
    };
    const attached = await toolbar(page);
    check(attached, "attached");
    t.diagnostic(`toolbar at ${width} px: ${attached.height} px high (a button ${attached.buttonHeight} px)`);
    await page.locator("#search-input").fill("bash");
    await page.waitForFunction(() => window.tether.search.resultCount > 0, null, { timeout: TIMEOUT });
    check(await toolbar(page), "with a search");
    await shareLink(page);
    await page.locator("#share-url").waitFor({ state: "visible", timeout: TIMEOUT });
    const shared = await toolbar(page);
    check(shared, "with a share link");
    assert.ok(shared.share.left >= 0 && shared.share.right <= shared.innerWidth, `the share box is cut off: ${JSON.stringify(shared.share)}`);
    await screenshot(page, `toolbar-${width}`);
    assert.deepEqual(page.problems, []);
    await page.close();
  });
}

test("on a phone (390x844, touch): nothing is cut off, the soft keys are under the terminal, the side panel opens over it", { timeout: 60_000 }, async (t) => {
  const page = await openTerminal(undefined, PHONE);
  const layout = await page.evaluate(() => {
    const rect = (el) => {
      const r = el.getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height };
    };
    const shown = (el) => getComputedStyle(el).display !== "none" && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
    const controls = [...document.querySelectorAll("header button, header input, #softkeys button")]
      .filter(shown)
      .map((el) => ({ id: el.id || el.dataset.key || el.dataset.modifier || el.dataset.text, ...rect(el), overflows: el.scrollWidth > el.clientWidth }));
    return {
      innerWidth: window.innerWidth,
      innerHeight: window.innerHeight,
      pageWidth: document.documentElement.scrollWidth,
      header: rect(document.querySelector("header")),
      terminal: rect(document.getElementById("terminal")),
      softkeys: shown(document.getElementById("softkeys")) ? rect(document.getElementById("softkeys")) : null,
      softkeysScroll: [document.getElementById("softkeys").scrollWidth, document.getElementById("softkeys").clientWidth],
      aside: shown(document.querySelector("aside")),
      controls,
    };
  });
  const where = JSON.stringify(layout);
  t.diagnostic(`toolbar on a phone: ${layout.header.height} px high`);
  assert.ok(layout.pageWidth <= layout.innerWidth, `the page scrolls sideways: ${where}`);
  // Three rows at most, and every control whole, in the window, and big enough for a finger (WCAG 2.5.8: 24 px).
  assert.ok(layout.header.height < 0.15 * layout.innerHeight, where);
  for (const c of layout.controls) {
    assert.ok(c.left >= 0 && c.right <= layout.innerWidth && c.top >= 0 && c.bottom <= layout.innerHeight, `${c.id} is cut off: ${where}`);
    assert.ok(c.width >= 24 && c.height >= 24, `${c.id} is ${c.width}x${c.height}: ${where}`);
    assert.ok(!c.overflows, `${c.id}'s label is wider than it: ${where}`);
  }
  for (const id of ["command", "new", "end", "share-open", "search-input", "panel-toggle"]) assert.ok(layout.controls.some((c) => c.id === id), `${id}: ${where}`);
  // The soft keys: all twelve in one row at the bottom, under the terminal.
  assert.ok(layout.softkeys, `no soft keys: ${where}`);
  assert.equal(layout.controls.filter((c) => !c.id || !["command", "name", "new", "end", "share-open", "search-input", "search-prev", "search-next", "panel-toggle"].includes(c.id)).length, 12, where);
  assert.ok(layout.softkeysScroll[0] <= layout.softkeysScroll[1], `the soft keys scroll: ${where}`);
  assert.ok(Math.abs(layout.softkeys.bottom - layout.innerHeight) < 1 && layout.terminal.bottom <= layout.softkeys.top, where);
  assert.equal(layout.aside, false, "the side panel is not beside the terminal on a phone");

  // The share box fits the phone's width.
  await shareLink(page);
  const share = await page.evaluate(() => {
    const r = document.getElementById("share").getBoundingClientRect();
    return { left: r.left, right: r.right };
  });
  assert.ok(share.left >= 0 && share.right <= layout.innerWidth, JSON.stringify(share));
  await page.keyboard.press("Escape");
  await page.locator("#share").waitFor({ state: "hidden", timeout: TIMEOUT });

  // ☰ opens the side panel over the terminal; Escape closes it and gives the focus back.
  await page.tap("#panel-toggle");
  await page.locator("aside").waitFor({ state: "visible", timeout: TIMEOUT });
  const aside = await page.evaluate(() => {
    const r = document.querySelector("aside").getBoundingClientRect();
    return { left: r.left, right: r.right, expanded: document.getElementById("panel-toggle").getAttribute("aria-expanded"), focus: document.activeElement?.id };
  });
  assert.ok(aside.left >= 0 && aside.right <= layout.innerWidth, JSON.stringify(aside));
  assert.deepEqual([aside.expanded, aside.focus], ["true", "panel-close"]);
  await page.locator("#pref-fontSize").waitFor({ state: "visible", timeout: TIMEOUT });
  await screenshot(page, "phone-panel");
  await page.keyboard.press("Escape");
  await page.locator("aside").waitFor({ state: "hidden", timeout: TIMEOUT });
  assert.equal(await page.evaluate(() => document.activeElement?.id), "panel-toggle");
  await screenshot(page, "phone");
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("soft keys: tapped Ctrl then c interrupts a sleep; Esc, arrows, Alt, Tab and | send what a keyboard sends, in application cursor mode too", { timeout: 90_000 }, async () => {
  const page = await openTerminal(undefined, PHONE);
  const tap = (name) => page.tap(`#softkeys [data-key="${name}"], #softkeys [data-modifier="${name}"], #softkeys [data-text="${name}"]`);
  const focused = () => page.evaluate(() => document.activeElement === window.tetherTerm.textarea);

  // Ctrl, then c typed on the (phone's) keyboard: SIGINT.
  await run(page, "sleep 300; echo not-interrupted");
  await page.waitForFunction(() => /sleep 300; echo not-interrupted$/.test(window.tether.text().trimEnd()), null, { timeout: TIMEOUT });
  await tap("ctrl");
  assert.equal(await page.getAttribute('#softkeys [data-modifier="ctrl"]', "aria-pressed"), "true");
  assert.ok(await focused(), "a tap keeps the focus in the terminal");
  await page.keyboard.type("c");
  await waitForText(page, /^\^C/);
  assert.equal(await page.getAttribute('#softkeys [data-modifier="ctrl"]', "aria-pressed"), "false", "Ctrl is released by the key it modified");
  await run(page, "echo status-$?");
  await waitForText(page, /^status-130$/);
  assert.doesNotMatch(await page.evaluate(() => window.tether.text()), /^not-interrupted$/m);

  // What each key sends, as od reads it: ↑, Esc, Ctrl+→, Alt+x, |, Tab, then
  // Enter and Ctrl+d (typed and tapped) to end od's input.
  await run(page, "od -An -c");
  await page.waitForFunction(() => /od -An -c$/.test(window.tether.text().trimEnd()), null, { timeout: TIMEOUT });
  await tap("up");
  await tap("escape");
  await tap("ctrl");
  await tap("right");
  await tap("alt");
  await page.keyboard.type("x");
  await tap("|");
  await tap("tab");
  await page.keyboard.press("Enter");
  await tap("ctrl");
  await page.keyboard.type("d");
  await waitForText(page, /033\s+\[\s+A\s+033\s+033\s+\[\s+1\s+;\s+5\s+C\s+033\s+x\s+\|\s+\\t\s+\\n\s*$/);

  // A program in application cursor mode (ESC[?1h, as vim and less ask):
  // the arrows are ESC O A and so on, as xterm sends them from a keyboard.
  await run(page, "printf '\\033[?1h'; od -An -c; printf '\\033[?1l'");
  await page.waitForFunction(() => window.tetherTerm.modes.applicationCursorKeysMode, null, { timeout: TIMEOUT });
  await tap("left");
  await tap("down");
  await page.keyboard.press("Enter");
  await tap("ctrl");
  await page.keyboard.type("d");
  await waitForText(page, /033\s+O\s+D\s+033\s+O\s+B\s+\\n\s*$/);
  await page.waitForFunction(() => !window.tetherTerm.modes.applicationCursorKeysMode, null, { timeout: TIMEOUT });
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("soft keys show on touch screens and narrow windows by default, and as softKeys= says", { timeout: 60_000 }, async () => {
  const shown = (page) => page.locator("#softkeys").isVisible();
  const desktop = await openTerminal(undefined, { prompt: false });
  assert.equal(await shown(desktop), false, "a wide window with a mouse has a keyboard");
  await desktop.close();
  const on = await openTerminal(undefined, { query: "softKeys=on", prompt: false });
  assert.equal(await shown(on), true);
  await on.close();
  const narrow = await openTerminal(undefined, { viewport: { width: 600, height: 500 }, prompt: false });
  assert.equal(await shown(narrow), true);
  await narrow.close();
  const off = await openTerminal(undefined, { ...PHONE, query: "softKeys=off", prompt: false });
  assert.equal(await shown(off), false);
  await off.close();
});
