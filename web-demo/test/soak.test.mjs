// The mixed-client soak of issue 43: many sessions, on pipes and PTYs,
// write numbered lines continuously while every kind of client of this
// project is attached to them, and tetherd hands itself over to a new
// binary (the same file: POST /v1/admin/upgrade re-executes it) ten times
// in a row. Then: every byte of every stream arrived exactly once at every
// client, every client is still attached, every screen is the same before
// and after a handover, and every process's usage only ever grew.
//
// Scale (the default; SOAK_SESSIONS, SOAK_PAGES, SOAK_TMUX and
// SOAK_HANDOVERS change it for a local run), with what it costs on the
// 2-core development VM in docs/TESTING.md:
//
// - 50 writer sessions, 25 on pipes (stdout and stderr) and 25 on PTYs,
//   each writing 5 numbered lines in one write every 10 ms (about 500
//   lines a second), from a start signal until a stop signal; then a last
//   line `end N`, and quiet until told to exit 0. No fork per line: bash
//   builtins only.
// - 5 quiet PTY sessions that draw a screen (colours, title, alternate
//   screen, scroll region, wide characters, modes) and then write nothing:
//   their screens are compared across every handover.
// - Attached to every writer session: the TypeScript client (in this
//   process), the Python client (one `test/soak_client.py` process with
//   one attachment per session) and the Rust CLI, which is the Rust client
//   library (`tether_client::Client::attach`): `tether attach ID` inside
//   tmux for 10 sessions (5 pipes, 5 PTYs), and `tether attach ID` or
//   `tether logs -f ID` with its output in files for the other 40. All of
//   them use their library's default reconnect policy.
// - The page in Chromium on 20 of the 25 PTY sessions (one browser, a page
//   each): every PTY that tmux does not show (two terminals of different
//   sizes on one PTY would each resize it as they reconnect, and the
//   screen would be whichever came last). A page costs 4 to 6 s of the
//   run on the loaded 2-core VM: 20 keep the soak near 130 s, 50 (pipes
//   included) would not fit in the 3 minutes it may take.
//
// Everything the checks compare comes from the clients themselves: the
// bytes each one received (the TypeScript attachments' chunks and offsets;
// the Python client's and the CLI's files; tmux's pipe-pane copy of what
// the CLI wrote to its terminal; the page's chunks, recorded as the page's
// own loop takes them from its attachment), each compared whole with what
// the writer wrote, and with what the server kept. Between handovers, the
// server's `tether_attachments` gauge must come back to the number of
// clients (every client reattached to the new binary, none gave up, none
// twice). Every wait is on a condition, with a bound.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { TetherClient } from "@tether/client";
import { baseUrl, openTerminal, setup, teardown, tetherd, webDemo } from "./harness.mjs";

const SESSIONS = Number(process.env.SOAK_SESSIONS ?? 50);
const PAGES = Number(process.env.SOAK_PAGES ?? 20);
const TMUX = Number(process.env.SOAK_TMUX ?? 10);
const HANDOVERS = Number(process.env.SOAK_HANDOVERS ?? 10);
const QUIET = 5;
/** The CLI next to tetherd (`cargo build` puts both in one directory). */
const tetherCli = resolve(webDemo, process.env.TETHER_CLI ?? join(dirname(tetherd), "tether"));
/** A Python with ./python installed (scripts/test.sh makes target/py-venv). */
const python = resolve(webDemo, process.env.TETHER_PYTHON ?? "../target/py-venv/bin/python");
/** How long the clients may take to come back after one handover. */
const REATTACH_MS = 60_000;

// A writer: waits for `go`, then 5 numbered lines per write (one printf),
// on pipes also a tick line on stderr, every 10 ms, until `stop`; then
// `end N` and nothing until `exit`, then exit 0 (a loop's status is its
// last command's: `read -t` timing out is 142). `read -t` on a pipe nobody
// writes is the pause (a builtin: no fork per line).
const WRITER = String.raw`exec 3<> <(:)
until [ -e "$SOAK_DIR/go" ]; do read -t 0.05 -u 3; done
i=0 t=0
while [ ! -e "$SOAK_DIR/stop" ]; do
  t=$((t+1))
  printf -v s '%d\n' $((i+1)) $((i+2)) $((i+3)) $((i+4)) $((i+5))
  printf %s "$s"
  i=$((i+5))
  [ -z "$SOAK_ERR" ] || printf 't%d\n' $t >&2
  read -t 0.01 -u 3
done
printf 'end %d\n' $i
until [ -e "$SOAK_DIR/exit" ]; do read -t 0.1 -u 3; done
exit 0`;

// Quiet PTY sessions: a screen drawn once, then nothing until `exit`.
// Each ends with a `ready` mark, so the test knows the drawing is done.
const QUIET_SCREENS = [
  String.raw`printf '\e[1;31mred bold\e[0m plain \e[4munderlined\e[0m \e[38;5;208m256\e[0m \e[38;2;10;200;30mrgb\e[0m\n'; printf '\e]0;soak quiet 0\a\e[44m%-20s\e[0m\n' blue; printf '\e[10;20Hcursor here ready'`,
  String.raw`printf 'primary screen text\n'; printf '\e[?1049h\e[2J\e[Halternate screen\e[5;5H*\e[7mreverse\e[0m ready'`,
  String.raw`for n in $(seq 1 60); do printf 'scrolled line %d\n' $n; done; printf '\e[5;20r\e[8;1Hin the region ready'`,
  String.raw`printf 'wide: \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e emoji \xf0\x9f\x99\x82 done\n\e[?25l'; printf 'cursor hidden ready'`,
  String.raw`printf '\e[?2004h\e[?1000h\e[?1006h\e[?1h\e='; printf 'modes set\n\ttab\e[3g'; printf ' ready'`,
].map((draw) => `${draw}\nexec 3<> <(:)\nuntil [ -e "$SOAK_DIR/exit" ]; do read -t 0.1 -u 3; done\nexit 0`);

let dir;
let tmuxConf;
const tmuxSocket = `tether-soak-${process.pid}`;
const children = [];
const attachments = [];

before(async () => {
  assert.ok(existsSync(tetherCli), `tether (the CLI) not found at ${tetherCli}: cargo build -p tether-cli, or set TETHER_CLI`);
  assert.ok(existsSync(python), `no Python with the tether client at ${python}: python3 -m venv target/py-venv && target/py-venv/bin/pip install ./python, or set TETHER_PYTHON`);
  await setup();
  dir = mkdtempSync(join(tmpdir(), "tether-soak-"));
  for (const sub of ["py", "cli", "tmux"]) mkdirSync(join(dir, sub));
  tmuxConf = join(dir, "tmux.conf");
  writeFileSync(tmuxConf, "set -g status off\nset -g default-size 100x30\n");
});

after(async () => {
  for (const attachment of attachments) attachment.close();
  spawnSync("tmux", ["-L", tmuxSocket, "kill-server"]);
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await teardown();
  // SOAK_KEEP=1 keeps what every client received, for a look after a failure.
  if (dir && !process.env.SOAK_KEEP) rmSync(dir, { recursive: true, force: true });
  else if (dir) console.log(`kept ${dir}`);
});

// ---------------------------------------------------------------- helpers

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** A request to the server; a connection the old binary closed (fetch
 * keeps idle ones) is retried on a new one, within a bound. */
async function api(path, init) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      return await fetch(`${baseUrl}${path}`, init);
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await pause(20);
    }
  }
}
const getJson = async (path) => {
  const answer = await api(path);
  assert.equal(answer.status, 200, `${path}: ${answer.status}`);
  return answer.json();
};

/** Polls `check` (true when met, else a string saying what is missing) until it is met; fails past `ms`. */
async function until(what, ms, check, every = 25) {
  const deadline = Date.now() + ms;
  for (;;) {
    const state = await check();
    if (state === true) return;
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms (${state})`);
    await pause(every);
  }
}

/** `promise`, or a failure naming `what` past `ms`. */
async function within(ms, promise, what) {
  let timer;
  const late = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function attachmentsOpen() {
  const text = await (await api("/metrics")).text();
  const match = /^tether_attachments(?:\{[^}]*\})? (\d+)$/m.exec(text);
  assert.ok(match, "no tether_attachments in /metrics");
  return Number(match[1]);
}

async function handovers() {
  return (await getJson("/v1/admin/server")).handovers;
}

/** Every process the server knows, by id. */
async function processes() {
  return new Map((await getJson("/v1/processes")).map((p) => [p.id, p]));
}

/** The server's screen of a PTY session: text, escape sequences, and the offset it is at. */
async function screen(id) {
  const text = await api(`/v1/processes/${id}/screen?format=text`);
  const ansi = await api(`/v1/processes/${id}/screen?format=ansi`);
  assert.equal(text.status, 200);
  assert.equal(ansi.status, 200);
  return {
    text: await text.text(),
    ansi: await ansi.text(),
    offset: text.headers.get("tether-offset"),
    stale: text.headers.get("tether-screen-stale"),
  };
}

/** The screens of `list` once each is at the offset `ends` gives (the
 * server's emulator may trail the output: a screen answered before it has
 * caught up says so in its offset, and is asked for again). */
async function screensAt(list, ends, what) {
  const shots = new Array(list.length);
  await until(what, 30_000, async () => {
    const behind = [];
    for (const [k, s] of list.entries()) {
      if (shots[k]?.offset === String(ends(s))) continue;
      shots[k] = await screen(s.id);
      if (shots[k].offset !== String(ends(s))) behind.push(`${s.id} at ${shots[k].offset} of ${ends(s)}`);
    }
    return behind.length === 0 || behind.join(", ");
  });
  return shots;
}

/** The screen as a person sees it: each row without trailing blanks, no blank rows at the end. */
const rows = (text) => text.split("\n").map((l) => l.replace(/\s+$/, "")).join("\n").replace(/\n+$/, "");

/** What a writer wrote once it printed `end n`. */
function expectedStdout(s, n) {
  const nl = s.tty ? "\r\n" : "\n";
  const lines = [];
  for (let k = 1; k <= n; k++) lines.push(`${k}${nl}`);
  return `${lines.join("")}end ${n}${nl}`;
}
function expectedStderr(s, n) {
  if (s.tty) return "";
  const lines = [];
  for (let t = 1; t <= n / 5; t++) lines.push(`t${t}\n`);
  return lines.join("");
}

/** Fails with where two outputs first differ (and a little of each around it). */
function sameBytes(actual, expected, what) {
  if (actual === expected) return;
  let at = 0;
  while (at < actual.length && at < expected.length && actual[at] === expected[at]) at++;
  const around = (s) => JSON.stringify(s.slice(Math.max(0, at - 40), at + 40));
  assert.fail(`${what}: ${actual.length} bytes where ${expected.length} were written; first difference at byte ${at}:\n  got      ${around(actual)}\n  expected ${around(expected)}`);
}

const readText = (path) => (existsSync(path) ? readFileSync(path, "latin1") : "");
const size = (path) => (existsSync(path) ? statSync(path).size : 0);

/** Reads a stream of the TypeScript attachment, keeping its bytes and any break in its offsets. */
async function collect(stream, sink) {
  let next = 0;
  for await (const chunk of stream) {
    if (chunk.type !== "data") {
      sink.problems.push(`${chunk.type} chunk at ${chunk.offset}`);
      continue;
    }
    if (chunk.offset !== next) sink.problems.push(`data at offset ${chunk.offset} where ${next} was next`);
    next = chunk.offset + chunk.data.length;
    sink.parts.push(Buffer.from(chunk.data));
    sink.bytes = next;
  }
}
const joined = (sink) => Buffer.concat(sink.parts).toString("latin1");

// Runs in each page before its scripts: records every chunk the page's own
// loop takes from its attachment's stdout (`for await` over
// `attachment.stdout`), with offsets, without changing what it gets.
function recordPageChunks() {
  const log = { screens: [], parts: [], problems: [], next: undefined, bytes: 0 };
  window.soak = log;
  const record = (chunk) => {
    if (chunk.type === "screen") {
      log.screens.push({ offset: chunk.offset, cols: chunk.cols, rows: chunk.rows });
      log.next = chunk.offset;
    } else if (chunk.type === "dropped") {
      log.problems.push(`dropped ${chunk.length} bytes at ${chunk.offset}`);
    } else {
      if (chunk.offset !== log.next) log.problems.push(`data at offset ${chunk.offset} where ${log.next} was next`);
      log.next = chunk.offset + chunk.data.length;
      log.parts.push(chunk.data.slice());
      log.bytes += chunk.data.length;
    }
  };
  let view;
  Object.defineProperty(window, "tether", {
    configurable: true,
    get: () => view,
    set(value) {
      view = value;
      let current = value.attachment;
      Object.defineProperty(value, "attachment", {
        configurable: true,
        enumerable: true,
        get: () => current,
        set(attachment) {
          current = attachment;
          if (!attachment) return;
          const stream = attachment.stdout;
          const iterate = stream[Symbol.asyncIterator].bind(stream);
          stream[Symbol.asyncIterator] = () => {
            const inner = iterate();
            return {
              async next() {
                const item = await inner.next();
                if (!item.done) record(item.value);
                return item;
              },
              return: (v) => inner.return(v),
              [Symbol.asyncIterator]() {
                return this;
              },
            };
          };
        },
      });
    },
  });
}

const pageState = (page) =>
  page.evaluate(() => {
    const term = window.tetherTerm;
    const buffer = term.buffer.active;
    const visible = [];
    for (let y = buffer.baseY; y < buffer.baseY + term.rows; y++) visible.push(buffer.getLine(y)?.translateToString(true) ?? "");
    return {
      status: window.tether.status,
      exit: window.tether.exit?.exit_code ?? null,
      connections: window.tether.attachment?.connections ?? 0,
      bytes: window.soak.bytes,
      text: window.tether.text(),
      visible: visible.join("\n"),
    };
  });

const pageBytes = (page) =>
  page.evaluate(() => ({
    data: window.soak.parts.map((p) => Array.from(p, (b) => String.fromCharCode(b)).join("")).join(""),
    screens: window.soak.screens,
    problems: window.soak.problems,
  }));

function tmux(...args) {
  const r = spawnSync("tmux", ["-L", tmuxSocket, "-f", tmuxConf, ...args], { encoding: "utf8" });
  assert.equal(r.status, 0, `tmux ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}
const pane = (s) => tmux("capture-pane", "-p", "-t", `soak:s${s.i}`);

/** Starts a child whose stdout and stderr go to files. */
function startChild(command, args, out, err, env = {}) {
  const stdout = openSync(out, "w");
  const stderr = openSync(err, "w");
  const child = spawn(command, args, { stdio: ["ignore", stdout, stderr], env: { ...process.env, ...env } });
  closeSync(stdout);
  closeSync(stderr);
  children.push(child);
  child.exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })));
  return child;
}

// ------------------------------------------------------------------- test

test(`mixed-client soak: ${SESSIONS} sessions, every client kind attached, ${HANDOVERS} handovers in a row`, { timeout: 900_000 }, async () => {
  const started = Date.now();
  const marks = [];
  const mark = (what) => {
    marks.push(`${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s  ${what}`);
    console.log(marks.at(-1));
  };
  const client = new TetherClient({ baseUrl });

  // Sessions: even ones on pipes, odd ones on PTYs. tmux shows the first
  // TMUX (half of each), the page the next PAGES PTYs.
  const sessions = Array.from({ length: SESSIONS }, (_, i) => ({ i, tty: i % 2 === 1 }));
  const inTmux = sessions.slice(0, TMUX);
  const onPages = sessions.filter((s) => s.tty && s.i >= TMUX).slice(0, PAGES);
  assert.equal(onPages.length, PAGES, "not enough PTY sessions for the pages");
  for (const s of sessions) {
    const info = await client.spawn({
      argv: ["bash", "-c", WRITER],
      env: { SOAK_DIR: dir, SOAK_ERR: s.tty ? "" : "1" },
      tty: s.tty,
      ...(s.tty ? { cols: 100, rows: 30 } : {}),
      name: `soak-${s.i}`,
    });
    s.id = info.id;
    s.pid = info.pid;
  }
  const quiet = [];
  for (const [i, draw] of QUIET_SCREENS.entries()) {
    const info = await client.spawn({ argv: ["bash", "-c", draw], env: { SOAK_DIR: dir }, tty: true, cols: 80, rows: 24, name: `soak-quiet-${i}` });
    quiet.push({ i, id: info.id, pid: info.pid });
  }
  mark(`${SESSIONS} writers and ${QUIET} quiet PTYs spawned`);

  // TypeScript: one attachment per session, both streams read as they come.
  for (const s of sessions) {
    s.ts = { out: { parts: [], problems: [], bytes: 0 }, err: { parts: [], problems: [], bytes: 0 } };
    s.ts.att = await client.attach(s.id);
    attachments.push(s.ts.att);
    s.ts.reading = Promise.all([collect(s.ts.att.stdout, s.ts.out), collect(s.ts.att.stderr, s.ts.err)]);
    // Awaited below; noted at once for `gaveUp`.
    s.ts.reading.catch((e) => (s.ts.failed = `${e}`));
    s.ts.att.exit.catch((e) => (s.ts.failed = `${e}`));
  }

  // Python: one process, one attachment per session.
  const py = {
    events: [],
    child: spawn(python, [resolve(webDemo, "test/soak_client.py"), baseUrl, join(dir, "py"), ...sessions.map((s) => s.id)], { stdio: ["ignore", "pipe", "inherit"] }),
  };
  children.push(py.child);
  py.exited = new Promise((r) => py.child.once("exit", (code, signal) => r({ code, signal })));
  createInterface({ input: py.child.stdout }).on("line", (line) => py.events.push(JSON.parse(line)));

  // The CLI: `tether attach` in tmux for the first TMUX sessions, its
  // stdout the terminal (tmux's pipe-pane keeps a copy), stderr a file;
  // `tether attach` or `tether logs -f` into files for the rest.
  tmux("new-session", "-d", "-s", "soak", "-x", "100", "-y", "30", "exec sleep 3600");
  for (const s of inTmux) {
    const base = join(dir, "tmux", `${s.i}`);
    // The CLI starts once tmux copies the pane (a wait-for channel).
    const line = `tmux -L ${tmuxSocket} wait-for piped-${s.i}; TETHER_SERVER=${baseUrl} ${tetherCli} attach ${s.id} 2>${base}.stderr; echo $? >${base}.rc; exec sleep 3600`;
    tmux("new-window", "-d", "-t", "soak:", "-n", `s${s.i}`, line);
    tmux("pipe-pane", "-O", "-t", `soak:s${s.i}`, `cat >>${base}.raw`);
    tmux("wait-for", "-S", `piped-${s.i}`);
  }
  for (const s of sessions.slice(TMUX)) {
    s.cliMode = (s.i >> 1) % 2 === 0 ? "attach" : "logs";
    const base = join(dir, "cli", `${s.i}`);
    s.cli = startChild(tetherCli, s.cliMode === "attach" ? ["attach", s.id] : ["logs", "-f", s.id], `${base}.stdout`, `${base}.stderr`, { TETHER_SERVER: baseUrl });
  }

  // The page, on PAGES of the PTY sessions.
  for (const s of onPages) s.page = await openTerminal(`session=${s.id}`, { prompt: false, init: recordPageChunks });

  const clients = SESSIONS * 3 + PAGES;
  /** Which client has given up (failed, exited, detached) before the end, if any. */
  const gaveUp = async () => {
    for (const s of sessions) {
      if (s.ts.failed) return `the TypeScript client of session ${s.i}: ${s.ts.failed}`;
      if (s.cli && s.cli.exitCode !== null) return `tether ${s.cliMode} of session ${s.i} exited ${s.cli.exitCode}: ${readText(join(dir, "cli", `${s.i}.stderr`))}`;
      if (existsSync(join(dir, "tmux", `${s.i}.rc`))) return `tether attach in tmux, session ${s.i}: ${readText(join(dir, "tmux", `${s.i}.stderr`))}`;
      if (s.page) {
        const status = await s.page.evaluate(() => window.tether.status);
        if (status.startsWith("detached")) return `the page of session ${s.i}: ${status}`;
      }
    }
    const failed = py.events.find((e) => e.error);
    if (failed) return `the Python client: ${JSON.stringify(failed)}`;
    if (py.child.exitCode !== null) return `the Python client exited ${py.child.exitCode}`;
    return undefined;
  };
  /** The server's count of open attachments, failing at once when a client has given up. */
  const attachedNow = async () => {
    const gone = await gaveUp();
    if (gone) assert.fail(`a client gave up: ${gone}`);
    return attachmentsOpen();
  };
  await until("the Python client attached", 60_000, () => py.events.some((e) => e.attached === SESSIONS) || `${py.child.exitCode ?? "running"}`);
  await until(`all ${clients} clients attached`, 60_000, async () => {
    const n = await attachedNow();
    return n === clients || `${n} open`;
  });
  mark(`${clients} clients attached (TypeScript ${SESSIONS}, Python ${SESSIONS}, CLI ${SESSIONS} with ${TMUX} in tmux, pages ${PAGES})`);

  // Quiet sessions drawn and their screens caught up.
  for (const q of quiet) {
    await until(`quiet session ${q.i} drawn`, 20_000, async () => {
      const out = await (await api(`/v1/processes/${q.id}/output?stream=stdout`)).text();
      return out.endsWith("ready") || `${out.length} bytes`;
    });
  }

  // Usage: every sample of every process at least the one before.
  const pids = new Map([...sessions, ...quiet].map((s) => [s.id, s.pid]));
  let lastUsage;
  const firstUsage = await processes();
  const checkUsage = (now, when) => {
    for (const [id, pid] of pids) {
      const p = now.get(id);
      assert.ok(p, `${id} is gone ${when}`);
      assert.equal(p.pid, pid, `${id}'s pid ${when}`);
      assert.equal(p.status, "running", `${id} ${when}`);
      assert.ok(p.usage, `${id} has no usage ${when}`);
      const before = lastUsage?.get(id)?.usage;
      if (!before) continue;
      const cpu = (u) => u.cpu_user_s + u.cpu_system_s;
      assert.ok(cpu(p.usage) >= cpu(before), `${id}'s CPU time went back ${when}: ${JSON.stringify(before)} -> ${JSON.stringify(p.usage)}`);
      assert.ok(p.usage.memory_peak_bytes >= before.memory_peak_bytes, `${id}'s peak memory went back ${when}`);
      assert.ok(p.usage.processes >= before.processes, `${id}'s process count went back ${when}`);
      assert.ok(p.stdout_bytes >= lastUsage.get(id).stdout_bytes && p.stderr_bytes >= lastUsage.get(id).stderr_bytes, `${id}'s output counts went back ${when}`);
    }
    lastUsage = now;
  };
  checkUsage(firstUsage, "before the start");

  const quietEnds = new Map(quiet.map((q) => [q.id, firstUsage.get(q.id).stdout_bytes]));
  const quietScreens = (when) => screensAt(quiet, (q) => quietEnds.get(q.id), `the quiet screens ${when}`);
  const quietDrawn = await quietScreens("drawn");
  for (const [i, shot] of quietDrawn.entries()) {
    assert.match(shot.text, /ready/, `quiet session ${i}'s screen`);
    assert.equal(shot.stale, "false");
  }

  writeFileSync(join(dir, "go"), "");
  await until("every writer writing", 30_000, async () => {
    const now = await processes();
    const idle = sessions.filter((s) => now.get(s.id).stdout_bytes === 0);
    return idle.length === 0 || `${idle.length} have written nothing`;
  });
  mark("writers started");

  /** Asks for a handover and waits until the new binary serves and every client is back on it. */
  const handOver = async (round) => {
    const t0 = Date.now();
    const ask = () => fetch(`${baseUrl}/v1/admin/upgrade`, { method: "POST", body: "{}" });
    // A kept connection the old binary closed never reached a server: ask again.
    const answer = await ask().catch(ask);
    assert.equal(answer.status, 202, await answer.text());
    await until(`handover ${round} served`, 30_000, async () => {
      const n = await handovers();
      return n === round || `handovers ${n}`;
    });
    const served = Date.now() - t0;
    await until(`every client back after handover ${round}`, REATTACH_MS, async () => {
      const n = await attachedNow();
      return n === clients || `${n} of ${clients} attachments open`;
    });
    return { served, back: Date.now() - t0 };
  };

  // Ten handovers while everything writes.
  for (let round = 1; round <= HANDOVERS; round++) {
    const before = await processes();
    checkUsage(before, `before handover ${round}`);
    const { served, back } = await handOver(round);
    assert.deepEqual(await quietScreens(`after handover ${round}`), quietDrawn, `the quiet screens after handover ${round}`);
    const afterIt = await processes();
    checkUsage(afterIt, `after handover ${round}`);
    // Every writer writes on: the new binary reads them.
    await until(`every writer's output growing after handover ${round}`, 30_000, async () => {
      const now = await processes();
      const stuck = sessions.filter((s) => now.get(s.id).stdout_bytes <= afterIt.get(s.id).stdout_bytes);
      return stuck.length === 0 || `${stuck.length} stuck`;
    });
    mark(`handover ${round}: served in ${served} ms, every client back in ${back} ms`);
  }

  // Stop the writers; wait for each one's `end N` at every client.
  writeFileSync(join(dir, "stop"), "");
  await until("every writer's end line at the TypeScript client", 60_000, () => {
    const missing = sessions.filter((s) => !/end \d+\r?\n$/.test(joined(s.ts.out)));
    return missing.length === 0 || `${missing.length} missing`;
  });
  for (const s of sessions) {
    s.n = Number(/end (\d+)\r?\n$/.exec(joined(s.ts.out))[1]);
    s.stdout = expectedStdout(s, s.n);
    s.stderr = expectedStderr(s, s.n);
  }
  // What `tether attach` writes to its terminal in tmux: for a pipe
  // session, the output, which the terminal (not raw) turns into \r\n
  // lines; for a PTY, the remote terminal's bytes, passed raw, after what
  // the CLI writes first when it attaches in a terminal: a reset (RIS), the
  // screen at offset 0 (empty: nothing was written yet) and its cursor
  // position query (cli/src/replies.rs), once: a resume starts from bytes.
  const inTerminal = (s) => (s.tty ? `\x1bc\x1b[6n${s.stdout}` : s.stdout.replace(/\n/g, "\r\n"));
  await until("every client has every byte", 60_000, async () => {
    const gone = await gaveUp();
    if (gone) assert.fail(`a client gave up: ${gone}`);
    for (const s of sessions) {
      if (size(join(dir, "py", `${s.id}.stdout`)) < s.stdout.length) return `Python, session ${s.i}`;
      if (inTmux.includes(s)) {
        if (size(join(dir, "tmux", `${s.i}.raw`)) < inTerminal(s).length) return `tmux, session ${s.i}`;
      } else if (size(join(dir, "cli", `${s.i}.stdout`)) < s.stdout.length) return `CLI, session ${s.i}`;
      if (s.page && (await pageState(s.page)).bytes < s.stdout.length) return `page, session ${s.i}`;
    }
    return true;
  });
  mark(`writers stopped after ${Math.min(...sessions.map((s) => s.n))} to ${Math.max(...sessions.map((s) => s.n))} lines each; every client has them`);

  // One more handover with nothing written: every screen the same after it.
  const ptys = [...sessions.filter((s) => s.tty), ...quiet];
  const ended = await processes();
  const ends = (s) => ended.get(s.id).stdout_bytes;
  const screensBefore = await screensAt(ptys, ends, "every PTY's screen at the end of its output");
  // The clients in a terminal show what the server's screen shows, once
  // they have drawn every byte.
  const serverRows = (s) => rows(screensBefore[ptys.indexOf(s)].text);
  await until("tmux's panes show the server's screens", 20_000, () => {
    const differ = inTmux.filter((s) => s.tty && rows(pane(s)) !== serverRows(s));
    return differ.length === 0 || differ.map((s) => `session ${s.i}:\n${pane(s)}\n-- server:\n${serverRows(s)}`).join("\n");
  });
  await until("the pages show the server's screens", 20_000, async () => {
    for (const s of onPages) {
      const visible = rows((await pageState(s.page)).visible);
      if (visible !== serverRows(s)) return `session ${s.i}:\n${visible}\n-- server:\n${serverRows(s)}`;
    }
    return true;
  });
  const pagesBefore = await Promise.all(onPages.map((s) => pageState(s.page)));
  const panesBefore = inTmux.map(pane);
  const tmuxBefore = inTmux.map((s) => readText(join(dir, "tmux", `${s.i}.raw`)));
  const quietRound = HANDOVERS + 1;
  checkUsage(await processes(), "before the quiet handover");
  const quietTimes = await handOver(quietRound);
  assert.deepEqual(await screensAt(ptys, ends, "every PTY's screen after the quiet handover"), screensBefore, "the server's screens across a quiet handover");
  const pagesAfter = await Promise.all(onPages.map((s) => pageState(s.page)));
  for (const [k, s] of onPages.entries()) {
    assert.equal(pagesAfter[k].text, pagesBefore[k].text, `the page of session ${s.i} across a quiet handover`);
    assert.equal(pagesAfter[k].bytes, pagesBefore[k].bytes, `the page of session ${s.i} got bytes across a quiet handover`);
  }
  assert.deepEqual(inTmux.map(pane), panesBefore, "the tmux panes across a quiet handover");
  assert.deepEqual(
    inTmux.map((s) => readText(join(dir, "tmux", `${s.i}.raw`))),
    tmuxBefore,
    "the CLI wrote to its terminal across a quiet handover",
  );
  const lastSample = await processes();
  checkUsage(lastSample, "after the quiet handover");
  mark(`quiet handover ${quietRound}: served in ${quietTimes.served} ms, every client back in ${quietTimes.back} ms; screens unchanged`);

  // The writers ran, and their usage says so (the checks above are not vacuous).
  const cpu = (m) => sessions.reduce((sum, s) => sum + m.get(s.id).usage.cpu_user_s + m.get(s.id).usage.cpu_system_s, 0);
  assert.ok(cpu(lastSample) > cpu(firstUsage), `the writers' CPU time did not grow: ${cpu(firstUsage)} -> ${cpu(lastSample)}`);

  // Every page and every client still attached before the end: then the
  // exit, which each must get (a client that gave up would not).
  for (const s of onPages) {
    const state = await pageState(s.page);
    assert.match(state.status, /^reconnected: /, `the page of session ${s.i}`);
  }
  writeFileSync(join(dir, "exit"), "");
  const exits = await within(30_000, Promise.all(sessions.map((s) => s.ts.att.exit)), "the TypeScript client's exits");
  await within(30_000, Promise.all(sessions.map((s) => s.ts.reading)), "the TypeScript client's streams' ends");
  await within(30_000, Promise.all([...sessions.slice(TMUX).map((s) => s.cli.exited), py.exited]), "the CLI's and the Python client's exits");
  await until("tmux's CLI exits", 30_000, () => inTmux.every((s) => existsSync(join(dir, "tmux", `${s.i}.rc`))) || "waiting");
  for (const s of onPages) await s.page.waitForFunction(() => window.tether.exit !== undefined, null, { timeout: 30_000 });
  mark("every process exited and every client saw it");

  // ------------------------------------------------------------ checks
  const server = await processes();
  const reports = new Map(py.events.filter((e) => e.id).map((e) => [e.id, e]));
  assert.deepEqual(await py.exited, { code: 0, signal: null }, "the Python client's exit");
  const connections = { ts: [], py: [], page: [] };
  for (const [k, s] of sessions.entries()) {
    const where = `session ${s.i} (${s.tty ? "PTY" : "pipes"})`;
    const p = server.get(s.id);
    assert.equal(p.exit_code, 0, `${where} exit: ${JSON.stringify(p)}`);
    assert.equal(p.pid, s.pid, `${where} pid`);
    // The server kept every byte.
    sameBytes(await (await api(`/v1/processes/${s.id}/output?stream=stdout`)).text(), s.stdout, `${where}: the server's stdout`);
    sameBytes(await (await api(`/v1/processes/${s.id}/output?stream=stderr`)).text(), s.stderr, `${where}: the server's stderr`);
    // TypeScript.
    assert.equal(exits[k].exit_code, 0, `${where}: the TypeScript client's exit`);
    assert.deepEqual([...s.ts.out.problems, ...s.ts.err.problems], [], `${where}: the TypeScript client's offsets`);
    sameBytes(joined(s.ts.out), s.stdout, `${where}: the TypeScript client's stdout`);
    sameBytes(joined(s.ts.err), s.stderr, `${where}: the TypeScript client's stderr`);
    connections.ts.push(s.ts.att.connections);
    // Python.
    const report = reports.get(s.id);
    assert.ok(report && !report.error, `${where}: the Python client: ${JSON.stringify(report)}`);
    assert.equal(report.exit_code, 0, `${where}: the Python client's exit`);
    assert.equal(report.dropped, 0, `${where}: the Python client was told of dropped bytes`);
    sameBytes(readText(join(dir, "py", `${s.id}.stdout`)), s.stdout, `${where}: the Python client's stdout`);
    sameBytes(readText(join(dir, "py", `${s.id}.stderr`)), s.stderr, `${where}: the Python client's stderr`);
    connections.py.push(report.connections);
    // The CLI.
    if (inTmux.includes(s)) {
      const base = join(dir, "tmux", `${s.i}`);
      assert.equal(readText(`${base}.rc`), "0\n", `${where}: tether attach in tmux exit status (stderr: ${readText(`${base}.stderr`)})`);
      sameBytes(tmuxBefore[inTmux.indexOf(s)], inTerminal(s), `${where}: what tether attach wrote to its terminal in tmux`);
      sameBytes(readText(`${base}.stderr`), s.stderr, `${where}: tether attach's stderr in tmux`);
    } else {
      const base = join(dir, "cli", `${s.i}`);
      assert.deepEqual(await s.cli.exited, { code: 0, signal: null }, `${where}: tether ${s.cliMode} exit (stderr: ${readText(`${base}.stderr`)})`);
      sameBytes(readText(`${base}.stdout`), s.stdout, `${where}: tether ${s.cliMode}'s stdout`);
      sameBytes(readText(`${base}.stderr`), s.stderr, `${where}: tether ${s.cliMode}'s stderr`);
    }
    // The page.
    if (s.page) {
      const got = await pageBytes(s.page);
      assert.deepEqual(got.problems, [], `${where}: the page's chunks`);
      // Attached before the first byte: its screen is the empty one at 0,
      // every byte after it came as data, once.
      assert.deepEqual(got.screens.map((x) => x.offset), [0], `${where}: the page's screens`);
      sameBytes(got.data, s.stdout, `${where}: the page's stdout`);
      const state = await pageState(s.page);
      assert.equal(state.exit, 0, `${where}: the page's exit`);
      assert.match(state.text, new RegExp(`^${s.n}\\n^end ${s.n}$`, "m"), `${where}: the page's terminal`);
      connections.page.push(state.connections);
    }
  }
  // Every attachment went through every handover with one reconnect: its
  // first connection and one per handover, no more (a resume the server
  // closed again would show here).
  const handoversDone = HANDOVERS + 1;
  for (const [kind, counts] of Object.entries(connections)) {
    assert.deepEqual(new Set(counts), new Set([1 + handoversDone]), `${kind} connections per attachment: ${counts.join(" ")}`);
  }
  const summary = Object.entries(connections).map(([kind, counts]) => `${kind} ${Math.min(...counts)}..${Math.max(...counts)}`);
  mark(`checked: every byte once at every client; connections per attachment ${summary.join(", ")}`);
  for (const s of onPages) await s.page.close();
});
