// The page: a browser terminal for tetherd. It starts a PTY session (or
// attaches to the one named in the URL fragment), wires xterm.js to the
// attachment, and lists running sessions so another tab can join one.
//
// URL fragment parameters (the fragment never reaches the server's logs):
//   #session=ID   attach to an existing session instead of starting one
//   #token=T      bearer token for a server that requires one
//   #cmd=TEXT     the command to start (default `bash -i`)

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { HttpError, TetherConnection, type Attachment, type ProcessInfo } from "./client.ts";

// Credit window per stream. Large enough that a fast stream never waits on
// round trips, small enough that the tab holds at most this much unwritten.
export const WINDOW = 256 * 1024;
const DEFAULT_COMMAND = "bash -i";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const statusEl = $<HTMLSpanElement>("status");
const exitEl = $<HTMLDivElement>("exit");
const commandEl = $<HTMLInputElement>("command");
const sessionsEl = $<HTMLUListElement>("sessions");

const fragment = new URLSearchParams(location.hash.slice(1));
const conn = new TetherConnection({ baseUrl: location.origin, token: fragment.get("token") ?? undefined });
commandEl.value = fragment.get("cmd") ?? DEFAULT_COMMAND;

const term = new Terminal({
  cursorBlink: true,
  scrollback: 5000,
  fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace",
  fontSize: 14,
  theme: { background: "#1b1d23" },
});
const fit = new FitAddon();
term.loadAddon(fit);
term.open($("terminal"));
fit.fit();

// What the end-to-end tests (and curious people in the console) read.
const view = {
  term,
  window: WINDOW,
  sessionId: undefined as string | undefined,
  status: "idle",
  exit: undefined as ProcessInfo | undefined,
  attachment: undefined as Attachment | undefined,
  /** The whole buffer (scrollback and screen) as text, one line per row. */
  text(): string {
    const buffer = term.buffer.active;
    const lines: string[] = [];
    for (let y = 0; y < buffer.length; y++) lines.push(buffer.getLine(y)?.translateToString(true) ?? "");
    return lines.join("\n");
  },
};
Object.assign(window, { tether: view, tetherTerm: term });

let attachment: Attachment | undefined;
const encoder = new TextEncoder();

function setStatus(text: string, kind: "ok" | "warn" | "bad" | "idle"): void {
  view.status = text;
  statusEl.textContent = text;
  statusEl.className = `status ${kind}`;
}

// A dim line in the terminal for things the page (not the process) says.
function notice(text: string): void {
  term.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`);
}

function describeExit(p: ProcessInfo): string {
  const signal = p.signal ? `, signal ${p.signal}` : "";
  return `exited with code ${p.exit_code ?? "?"} (reason: ${p.reason ?? "?"}${signal})`;
}

// Keeps the fragment in step with what is shown, so reloading the page
// re-attaches to the same session. The token stays only if it came from there.
function updateFragment(sessionId: string | undefined): void {
  const params = new URLSearchParams(location.hash.slice(1));
  if (sessionId) params.set("session", sessionId);
  else params.delete("session");
  history.replaceState(null, "", `#${params.toString()}`);
}

// Runs an API call; on 401 asks for a token once and tries again.
async function withToken<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (e) {
    if (!(e instanceof HttpError && e.status === 401)) throw e;
    const token = window.prompt("This tetherd requires an access token:");
    if (!token) throw e;
    conn.token = token.trim();
    return await call();
  }
}

function attach(id: string, offsets = { stdout: 0, stderr: 0 }): void {
  attachment?.close();
  // A full reset (RIS) through the write queue, not term.reset(): output of
  // the previous session still queued in xterm must land before it.
  if (offsets.stdout === 0 && offsets.stderr === 0) term.write("\x1bc");
  view.sessionId = id;
  view.exit = undefined;
  exitEl.hidden = true;
  updateFragment(id);
  setStatus(`connecting to ${id}…`, "warn");
  const current = conn.attach(
    id,
    {
      // xterm decodes UTF-8 itself, keeping a code point split across two
      // frames whole; its write callback is what grants credit.
      onData: (_stream, data, done) => term.write(data, done),
      onDropped: (_stream, _offset, length) => notice(`tether: ${length} bytes of output were dropped`),
      onOpen: (process, resumed) => {
        setStatus(`${resumed ? "reconnected" : "attached"}: ${process.argv.join(" ")} (${id})`, "ok");
        // The PTY follows this tab's size; another tab may have changed it.
        // A process on pipes has no size (the server refuses a resize).
        if (process.tty) current.resize(term.cols, term.rows);
      },
      onReconnecting: (delayMs, attempt, reason) =>
        setStatus(`disconnected (${reason}); reconnecting in ${(delayMs / 1000).toFixed(1)} s, attempt ${attempt}`, "bad"),
      onError: (code, message) => setStatus(`server error ${code}: ${message}`, "bad"),
      onExit: (process) => {
        view.exit = process;
        const text = `Process ${describeExit(process)}`;
        // Written through the terminal queue, so it lands after the output.
        term.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`, () => {
          exitEl.textContent = text;
          exitEl.hidden = false;
        });
        setStatus(`${text} (${id})`, "idle");
        void refreshSessions();
      },
      onClosed: (reason, error) => {
        if (error instanceof HttpError && error.status === 401) {
          // Ask for a token, then resume exactly where this attachment was.
          const token = window.prompt("This tetherd requires an access token:");
          if (token) {
            conn.token = token.trim();
            attach(id, { ...current.offsets });
            return;
          }
        }
        if (attachment === current) setStatus(`detached: ${reason}`, "bad");
      },
    },
    { offsets, window: WINDOW },
  );
  attachment = current;
  view.attachment = current;
  term.focus();
}

// Splits a command line into argv: whitespace separates, quotes group and
// backslash escapes, as a shell would for simple cases.
function splitCommand(text: string): string[] {
  const argv: string[] = [];
  let current: string | undefined;
  let quote: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === "\\" && quote === '"' && i + 1 < text.length) current = (current ?? "") + text[++i];
      else current = (current ?? "") + c;
    } else if (c === "'" || c === '"') {
      quote = c;
      current ??= "";
    } else if (c === "\\" && i + 1 < text.length) {
      current = (current ?? "") + text[++i];
    } else if (/\s/.test(c)) {
      if (current !== undefined) argv.push(current);
      current = undefined;
    } else {
      current = (current ?? "") + c;
    }
  }
  if (current !== undefined) argv.push(current);
  return argv;
}

async function startSession(): Promise<void> {
  const argv = splitCommand(commandEl.value);
  if (argv.length === 0) return setStatus("enter a command to run", "bad");
  fit.fit();
  setStatus(`starting ${argv.join(" ")}…`, "warn");
  try {
    const process = await withToken(() =>
      // overflow "drop": see README.md (a slow or background tab must
      // never stall the shell for everyone else).
      conn.spawn({ argv, tty: true, cols: term.cols, rows: term.rows, stdin: true, overflow: "drop" }),
    );
    attach(process.id);
    void refreshSessions();
  } catch (e) {
    setStatus(`could not start ${argv.join(" ")}: ${(e as Error).message}`, "bad");
  }
}

async function refreshSessions(): Promise<void> {
  let processes: ProcessInfo[];
  try {
    // No prompt here: the periodic refresh must not nag; spawn and attach ask.
    processes = await conn.list();
  } catch (e) {
    sessionsEl.replaceChildren(Object.assign(document.createElement("li"), { textContent: (e as Error).message }));
    return;
  }
  const running = processes.filter((p) => p.status === "running" && p.tty);
  const items = running.map((p) => {
    const li = document.createElement("li");
    const label = document.createElement("span");
    label.textContent = `${p.id.slice(0, 8)} ${p.argv.join(" ")}`;
    label.title = `${p.id}: pid ${p.pid}, started ${p.started_at}`;
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.session = p.id;
    const current = p.id === view.sessionId;
    button.textContent = current ? "attached" : "attach";
    button.disabled = current;
    button.addEventListener("click", () => attach(p.id));
    li.append(label, button);
    return li;
  });
  if (items.length === 0) items.push(Object.assign(document.createElement("li"), { textContent: "no running sessions" }));
  sessionsEl.replaceChildren(...items);
}

// Input: typed keys and pastes arrive as strings (UTF-8 on the wire), some
// mouse reports as binary strings (one byte per char).
term.onData((data) => attachment?.sendStdin(encoder.encode(data)));
term.onBinary((data) => attachment?.sendStdin(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)));
term.onResize(({ cols, rows }) => {
  if (attachment?.process?.tty) attachment.resize(cols, rows);
});

// Refit at most once per frame while the window is being resized.
let fitPending = false;
window.addEventListener("resize", () => {
  if (fitPending) return;
  fitPending = true;
  requestAnimationFrame(() => {
    fitPending = false;
    fit.fit();
  });
});

$<HTMLFormElement>("spawn").addEventListener("submit", (event) => {
  event.preventDefault();
  void startSession();
});
$<HTMLButtonElement>("refresh").addEventListener("click", () => void refreshSessions());
window.addEventListener("hashchange", () => {
  const id = new URLSearchParams(location.hash.slice(1)).get("session");
  if (id && id !== view.sessionId) attach(id);
});
setInterval(() => void refreshSessions(), 5000);
// Coming back online after an outage: try at once rather than at the next backoff.
window.addEventListener("online", () => attachment?.reconnect());

const initial = fragment.get("session");
if (initial) {
  attach(initial);
  void refreshSessions();
} else {
  void startSession();
}
