// Recordings played back (issue 44), in Chromium against a real tetherd
// (test/harness.mjs). asciinema-player (npm, the player asciinema.org
// embeds, its own bundle from node_modules) plays the server's recording
// of a PTY session with colours, v3 and v2, to its end: what the session
// showed, colours included. The page's replay, sought to a moment, shows
// what the server's screen (GET .../screen) showed at that moment.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { resolve } from "node:path";
import { TIMEOUT, baseUrl, browser, setup, teardown, webDemo } from "./harness.mjs";

before(setup);
after(teardown);

const bundle = resolve(webDemo, "node_modules/asciinema-player/dist/bundle");

/** A finished PTY session's recording, as the server gives it. */
async function recordedSession(query) {
  const body = {
    command: "printf 'plain line\\n\\033[1;31mred bold\\033[0m \\033[38;2;0;128;255mtruecolour\\033[0m\\n'; sleep 0.3; printf 'player-end\\n'",
    tty: true,
    cols: 100,
    rows: 30,
  };
  const spawned = await fetch(`${baseUrl}/v1/processes`, { method: "POST", body: JSON.stringify(body) }).then((r) => r.json());
  const info = await fetch(`${baseUrl}/v1/processes/${spawned.id}/wait?timeout_ms=${TIMEOUT}`).then((r) => r.json());
  assert.equal(info.status, "exited");
  const answer = await fetch(`${baseUrl}/v1/processes/${spawned.id}/recording${query}`);
  assert.equal(answer.status, 200);
  return answer.text();
}

/** Plays `cast` in asciinema-player until its `ended` event; the terminal's text and the spans that hold `needle`. */
async function play(cast, needle) {
  const page = await browser.newPage();
  try {
    await page.setContent('<!doctype html><html><body><div id="player"></div></body></html>');
    await page.addStyleTag({ path: resolve(bundle, "asciinema-player.css") });
    await page.addScriptTag({ path: resolve(bundle, "asciinema-player.min.js") });
    await page.evaluate(
      (cast) =>
        new Promise((done, fail) => {
          const player = window.AsciinemaPlayer.create({ data: cast }, document.getElementById("player"), { autoPlay: true, speed: 2 });
          player.addEventListener("ended", () => done());
          player.addEventListener("error", (e) => fail(new Error(`the player failed: ${e?.detail ?? e}`)));
        }),
      cast,
    );
    await page.waitForFunction(() => /player-end/.test(document.querySelector(".ap-term")?.textContent ?? ""), null, { timeout: TIMEOUT });
    return await page.evaluate((needle) => {
      const term = document.querySelector(".ap-term");
      const spans = [...term.querySelectorAll("span")].filter((s) => s.textContent.includes(needle) && s.children.length === 0);
      return {
        text: [...term.querySelectorAll(".ap-line")].map((l) => l.textContent.trimEnd()),
        styles: spans.map((s) => ({ className: s.className, color: getComputedStyle(s).color, weight: getComputedStyle(s).fontWeight })),
      };
    }, needle);
  } finally {
    await page.close();
  }
}

for (const [label, query] of [
  ["v3", ""],
  ["v2", "?version=2"],
]) {
  test(`asciinema-player plays a ${label} recording of a PTY session to its end, colours included`, { timeout: 60_000 }, async () => {
    const cast = await recordedSession(query);
    const header = JSON.parse(cast.split("\n")[0]);
    assert.equal(header.version, label === "v3" ? 3 : 2);
    const red = await play(cast, "red bold");
    assert.deepEqual(red.text.slice(0, 3), ["plain line", "red bold truecolour", "player-end"]);
    assert.ok(red.styles.length > 0, "no span holds the red text");
    // Bold and red (the player theme's red, rgb(221, 60, 105) today: a red hue, whatever the theme).
    const [r, g, b] = red.styles[0].color.match(/\d+/g).map(Number);
    assert.ok(r > 1.5 * g && r > 1.5 * b, `red bold shows as ${red.styles[0].color}: ${JSON.stringify(red.styles[0])}`);
    assert.ok(Number(red.styles[0].weight) >= 600 || /bold/.test(red.styles[0].className), JSON.stringify(red.styles[0]));
    const blue = await play(cast, "truecolour");
    assert.equal(blue.styles[0]?.color, "rgb(0, 128, 255)", JSON.stringify(blue.styles));
  });
}

/** The server's screen now, as text: one line per row, trailing blanks trimmed. */
const screenText = (id) => fetch(`${baseUrl}/v1/processes/${id}/screen`).then((r) => r.text());

/** Rows as compared: trailing blanks and trailing empty rows dropped. */
const rows = (text) => {
  const lines = text.split("\n").map((l) => l.replace(/\s+$/, ""));
  while (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines;
};

test("the page's replay at a moment shows what the server's screen showed at that moment", { timeout: 60_000 }, async () => {
  const spawned = await fetch(`${baseUrl}/v1/processes`, {
    method: "POST",
    body: JSON.stringify({
      // No echo, and a pause before stage two: the time index places a
      // byte at most 10 ms early (one mark's spacing), so what comes
      // after the moment must come more than that after stage one.
      command: "stty -echo; printf '\\033[2J\\033[Hstage one\\n'; ls --color=always / | head -5; printf '\\033[10;20H\\033[7mmarked\\033[0m'; read go; sleep 0.1; printf '\\033[2J\\033[Hstage two\\n'; read done",
      tty: true,
      cols: 80,
      rows: 24,
    }),
  }).then((r) => r.json());
  const started = Date.parse(spawned.started_at);
  const stdin = async (text) => assert.equal((await fetch(`${baseUrl}/v1/processes/${spawned.id}/stdin`, { method: "POST", body: text })).status, 204);
  const deadline = Date.now() + TIMEOUT;
  let then = "";
  while (!/marked/.test(then)) {
    assert.ok(Date.now() < deadline, "stage one never showed");
    then = await screenText(spawned.id);
  }
  // The moment the screen was taken, in the recording's seconds.
  const moment = (Date.now() - started) / 1000;
  await stdin("go\n");
  while (!/stage two/.test(await screenText(spawned.id))) assert.ok(Date.now() < deadline, "stage two never showed");
  await stdin("done\n");
  const info = await fetch(`${baseUrl}/v1/processes/${spawned.id}/wait?timeout_ms=${TIMEOUT}`).then((r) => r.json());
  assert.equal(info.status, "exited");

  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  try {
    await page.goto(`${baseUrl}/#replay=${spawned.id}&t=${moment.toFixed(3)}`);
    await page.waitForFunction((at) => window.tether?.replay?.duration > 0 && Math.abs(window.tether.replay.position - at) < 0.01 && !window.tether.replay.playing, moment, { timeout: TIMEOUT });
    await page.waitForFunction(() => /marked/.test(window.tether.text()), null, { timeout: TIMEOUT });
    const replayed = await page.evaluate(() => {
      const term = window.tetherTerm;
      const buffer = term.buffer.active;
      const lines = [];
      for (let y = buffer.viewportY; y < buffer.viewportY + term.rows; y++) lines.push(buffer.getLine(y)?.translateToString(true) ?? "");
      return lines.join("\n");
    });
    assert.deepEqual(rows(replayed), rows(then));
    assert.doesNotMatch(replayed, /stage two|^go$/m);
  } finally {
    await page.close();
  }
});

test("a session whose input is recorded says so in the page before anyone types; others do not", { timeout: 60_000 }, async () => {
  const spawn = (extra) =>
    fetch(`${baseUrl}/v1/processes`, { method: "POST", body: JSON.stringify({ argv: ["cat"], tty: true, ...extra }) }).then((r) => r.json());
  const recorded = await spawn({ record_input: true });
  const plain = await spawn({});
  assert.equal(recorded.records_input, true);
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  try {
    await page.goto(`${baseUrl}/#session=${recorded.id}`);
    await page.waitForSelector("#recorded", { state: "visible", timeout: TIMEOUT });
    assert.match(await page.textContent("#recorded"), /input recorded/);
    await page.goto(`${baseUrl}/#session=${plain.id}`);
    await page.reload();
    await page.waitForFunction((id) => window.tether?.attachment?.process?.id === id, plain.id, { timeout: TIMEOUT });
    assert.equal(await page.isVisible("#recorded"), false);
  } finally {
    await page.close();
    for (const id of [recorded.id, plain.id]) await fetch(`${baseUrl}/v1/processes/${id}?force=1`, { method: "DELETE" });
  }
});
