// The page: a browser terminal for tetherd. It starts a PTY session (or
// attaches to the one named in the URL fragment), wires xterm.js to the
// attachment, and lists running sessions so another tab can join one.
//
// URL fragment parameters (the fragment never reaches the server's logs):
//   #session=ID   attach to an existing session instead of starting one
//   #token=T      bearer token for a server that requires one; a token
//                 scoped to one session (a share link) shows that session
//                 alone: no session list, no command box, and without the
//                 write right, typing changes nothing
//   #cmd=TEXT     the command to start (default `bash -i`)
//   #grace=S      how long a session this tab starts without a name outlives
//                 the tab, in seconds (default 15, 1 to 600)
// Display preferences (fontSize, theme, cursorStyle, ...) come from the
// query or the fragment and are kept per browser: see preferences.ts, and
// settings.ts for the panel that changes them.
//
// The terminal's everyday features live in their own modules: links.ts
// (clickable links), search.ts, clipboard.ts (copy on select),
// attention.ts (title and bell), renderer.ts (WebGL or DOM), images.ts,
// softkeys.ts (Esc, Ctrl, arrows on a phone), leave.ts (the warning before
// closing a tab that would end its session), keyboard.ts (the toolbar
// without a mouse), sessions.ts (lifetimes, share-link scopes, the list).

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { Unicode11Addon } from "@xterm/addon-unicode11";
import { HttpError, TetherClient, type Attachment, type ProcessInfo } from "@tether/client";
import { installAttention, type AttentionState } from "./attention";
import { installFiles, type FilesState } from "./files";
import { replayControls, startReplay, type ReplayState } from "./replay";
import { installCopyOnSelect, type CopyState } from "./clipboard";
import { installImages } from "./images";
import { installLinks, type LinkLog } from "./links";
import { installKeyboard, type KeyboardState } from "./keyboard";
import { installLeaveWarning, type LeaveState } from "./leave";
import { installRenderer, type RendererState } from "./renderer";
import { installSearch, type SearchState } from "./search";
import { describeCommand, lifetimes, rememberLifetime, scopeOf, sessionList, type Lifetime } from "./sessions";
import { loadSettings } from "./settings";
import { installSoftKeys, type SoftKeysState } from "./softkeys";

/**
 * A session this page starts without a name ends this long after its last
 * tab closes (the server's unattached timeout): a closed tab ends its shell,
 * a reload re-attaches well within it. `#grace=SECONDS` changes it.
 */
const DEFAULT_GRACE_MS = 15_000;
/** A named or shared session is kept this long after its last tab closes (10 minutes), so its owner or a viewer can come back. */
const KEPT_MS = 10 * 60 * 1000;

// Credit window per stream. Large enough that a fast stream never waits on
// round trips, small enough that the tab holds at most this much unwritten.
export const WINDOW = 256 * 1024;
const DEFAULT_COMMAND = "bash -i";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const statusEl = $<HTMLSpanElement>("status");
const exitEl = $<HTMLDivElement>("exit");
const startingEl = $<HTMLDivElement>("starting");
const commandEl = $<HTMLInputElement>("command");
const endEl = $<HTMLButtonElement>("end");
const sessionsEl = $<HTMLUListElement>("sessions");
const shareOpenEl = $<HTMLButtonElement>("share-open");
const shareLinkEl = $<HTMLDivElement>("share-link");
const shareUrlEl = $<HTMLInputElement>("share-url");
const modeEl = $<HTMLSpanElement>("mode");
const recordedEl = $<HTMLSpanElement>("recorded");
const nameEl = $<HTMLInputElement>("name");
const lifetimeEl = $<HTMLSpanElement>("lifetime");

const fragment = new URLSearchParams(location.hash.slice(1));
const conn = new TetherClient({ baseUrl: location.origin, token: fragment.get("token") ?? undefined });

const scope = scopeOf(conn.token);
if (scope) {
  document.body.classList.add("shared");
  document.body.classList.toggle("read-only", !scope.write);
  modeEl.hidden = false;
  modeEl.textContent = scope.write ? "shared session (interactive)" : "shared session (read-only)";
}
commandEl.value = fragment.get("cmd") ?? DEFAULT_COMMAND;
const graceSeconds = Number(fragment.get("grace"));
const GRACE_MS = graceSeconds >= 1 && graceSeconds <= 600 ? Math.round(graceSeconds * 1000) : DEFAULT_GRACE_MS;

function setLifetime(id: string, lifetime: Lifetime): void {
  rememberLifetime(id, lifetime);
  showLifetime(id);
}
function showLifetime(id: string | undefined): void {
  const lifetime = id === undefined ? undefined : lifetimes()[id];
  view.lifetime = lifetime;
  lifetimeEl.hidden = lifetime === undefined;
  lifetimeEl.textContent =
    lifetime === "own"
      ? `ends ${GRACE_MS / 1000} s after this tab closes (share or name it to keep it)`
      : "kept 10 min after its last tab closes";
  lifetimeEl.title = lifetimeEl.textContent;
}

const settings = loadSettings();
const prefs = settings.prefs;
const term = new Terminal({
  ...settings.terminalOptions(),
  // The unicode handling and the search's decorations are "proposed" API.
  allowProposedApi: true,
});
const fit = new FitAddon();
term.loadAddon(fit);
// Emoji and other wide characters take two cells, as in today's terminals
// (and the server's screen); xterm's default is Unicode 6's widths.
term.loadAddon(new Unicode11Addon());
term.unicode.activeVersion = "11";
term.open($("terminal"));
const renderer: RendererState = { wanted: prefs.renderer, active: "dom" };
const images = installImages(term);
settings.connect(term, installRenderer(term, prefs.renderer, renderer, $("renderer-info")), () => fit.fit(), {
  form: $<HTMLFormElement>("prefs"),
  reset: $<HTMLButtonElement>("prefs-reset"),
  info: $("prefs-info"),
});

// What the end-to-end tests (and curious people in the console) read.
const view = {
  term,
  window: WINDOW,
  sessionId: undefined as string | undefined,
  status: "idle",
  exit: undefined as ProcessInfo | undefined,
  attachment: undefined as Attachment | undefined,
  /** On a share link: the session it shows and whether it may type. */
  scope,
  /** The last link made by "share". */
  shareUrl: undefined as string | undefined,
  /** How long the session shown outlives this tab, when this tab started it. */
  lifetime: undefined as Lifetime | undefined,
  /** The preferences in effect (preferences.ts; the panel changes them in place). */
  preferences: prefs,
  /** The theme shown (`theme=system` resolved). */
  get theme() {
    return settings.theme;
  },
  /** Which renderer draws the terminal, and why if not the one asked for. */
  renderer,
  links: { opened: [], refused: [] } as LinkLog,
  search: { query: "", resultIndex: -1, resultCount: 0 } as SearchState,
  attention: { title: "", bells: 0, notifications: 0 } as AttentionState,
  files: { uploaded: [], downloaded: [], error: "" } as FilesState,
  /** With `#replay=ID`: the replay's state (replay.ts). */
  replay: undefined as ReplayState | undefined,
  copy: {} as CopyState,
  /** The soft keys' held modifiers. */
  softKeys: { ctrl: false, alt: false } as SoftKeysState,
  /** Whether the next Tab leaves the terminal (keyboard.ts). */
  keyboard: { leaving: false } as KeyboardState,
  /** How often closing the tab asked first. */
  leave: { asked: 0 } as LeaveState,
  /** The image addon: its storage use and limit, the image at a cell. */
  images,
  /** The whole buffer (scrollback and screen) as text, one line per row. */
  text(): string {
    const buffer = term.buffer.active;
    const lines: string[] = [];
    // A screen snapshot writes blanks out; xterm keeps those apart from
    // cells never written, nothing a person sees does: trim both.
    for (let y = 0; y < buffer.length; y++) lines.push((buffer.getLine(y)?.translateToString(true) ?? "").replace(/ +$/, ""));
    return lines.join("\n");
  },
};
Object.assign(window, { tether: view, tetherTerm: term });

installLinks(term, view.links);
installSearch(
  term,
  {
    input: $<HTMLInputElement>("search-input"),
    previous: $<HTMLButtonElement>("search-prev"),
    next: $<HTMLButtonElement>("search-next"),
    count: $("search-count"),
  },
  view.search,
  () => settings.theme,
);
installCopyOnSelect(term, () => prefs.copyOnSelect, view.copy);
// A bell in replayed output rang before this tab looked: not again.
const attention = installAttention(term, $("terminal-pane"), $<HTMLInputElement>("bell-notify"), view.attention, () => !renderingReplay);
const softKeys = installSoftKeys(term, $("softkeys"), view.softKeys);
const popovers = installKeyboard(
  term,
  {
    shareOpen: shareOpenEl,
    share: $("share"),
    shareFirst: $<HTMLButtonElement>("share-read"),
    shareClose: $<HTMLButtonElement>("share-close"),
    panelToggle: $<HTMLButtonElement>("panel-toggle"),
    panel: $("side"),
    panelClose: $<HTMLButtonElement>("panel-close"),
  },
  view.keyboard,
);
// Closing the tab asks only while that would end the session shown: one
// this tab started without a name, still running.
installLeaveWarning(
  () => !prefs.disableLeaveAlert && view.lifetime === "own" && view.exit === undefined && attachment !== undefined,
  view.leave,
);
const downloadEl = $<HTMLButtonElement>("download");
installFiles({ pane: $("terminal-pane"), download: downloadEl }, conn, () => view.sessionId, (text, kind) => setStatus(text, kind), view.files);

let attachment: Attachment | undefined;
// Increments per attach, so a slow attach that was superseded goes quietly.
let attachGeneration = 0;
const encoder = new TextEncoder();

function setStatus(text: string, kind: "ok" | "warn" | "bad" | "idle"): void {
  view.status = text;
  statusEl.textContent = text;
  // Cut to the toolbar's width: the whole of it on hover.
  statusEl.title = text;
  statusEl.className = `status ${kind}`;
}

// Until the session's first output arrives the terminal is empty; say why.
function setStarting(text: string | undefined): void {
  startingEl.hidden = text === undefined;
  if (text !== undefined) startingEl.textContent = text;
}

// Text the page writes into the terminal may hold what a server sent (an
// exit's signal or reason): its control characters are shown, never
// obeyed, as the CLI shows them, and it is cut to a line's worth.
function visible(text: string): string {
  const shown = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u{${c.charCodeAt(0).toString(16)}}`);
  return shown.length > 300 ? `${shown.slice(0, 300)}...` : shown;
}

// A grey line in the terminal for things the page (not the process) says:
// the palette's bright black, which is 4.5:1 on the background in both
// themes (SGR 2, dim, halves the colour and would not be).
function notice(text: string): void {
  term.write(`\r\n\x1b[90m[${visible(text)}]\x1b[0m\r\n`);
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
    // A share link cannot be mended by typing a token: it has expired or
    // its session is gone.
    if (scope) throw e;
    const token = window.prompt("This tetherd requires an access token:");
    if (!token) throw e;
    conn.token = token.trim();
    return await call();
  }
}

// Stdout below this offset was written before the current attachment.
let replayedUntil = 0;
// True while xterm parses replayed bytes or a screen snapshot.
let renderingReplay = false;

/** Writes bytes that are not live: whatever the terminal answers is dropped. */
function writeReplayed(data: Uint8Array): Promise<void> {
  return new Promise<void>((resolve) => {
    renderingReplay = true;
    term.write(data, () => {
      renderingReplay = false;
      resolve();
    });
  });
}

async function attach(id: string): Promise<void> {
  attachment?.close();
  attachment = undefined;
  view.attachment = undefined;
  const generation = ++attachGeneration;
  // A full reset (RIS) through the write queue, not term.reset(): output of
  // the previous session still queued in xterm (a title, say) must land before it.
  term.write("\x1bc", () => attention.reset());
  view.sessionId = id;
  view.exit = undefined;
  exitEl.hidden = true;
  recordedEl.hidden = true;
  endEl.disabled = false;
  downloadEl.disabled = false;
  shareOpenEl.disabled = false;
  popovers.toggleShare(false);
  shareLinkEl.hidden = true;
  showLifetime(id);
  updateFragment(id);
  setStatus(`connecting to ${id}…`, "warn");
  if (startingEl.hidden) setStarting(`connecting to ${id.slice(0, 8)}…`);
  let current: Attachment;
  try {
    // A PTY starts from its screen (first load, reload, and a reconnect
    // whose offset was evicted), not from a replay of old bytes.
    const tty = (await withToken(() => conn.get(id))).tty;
    current = await withToken(() =>
      conn.attach(id, {
        window: WINDOW,
        // A read-only share link never writes, resizes or signals.
        readonly: scope !== undefined && !scope.write,
        screen: tty,
        // A tab keeps trying for as long as it is open; the page has no
        // use for the exit long-poll (one PTY stream, read as it comes).
        reconnect: { budgetMs: Infinity, initialBackoffMs: 250, maxBackoffMs: 5000 },
        pollExit: false,
        onOpen: (process, resumed) => {
          if (generation !== attachGeneration) return;
          // Everything up to here was written before this attachment: replayed.
          replayedUntil = process.stdout_bytes;
          setStatus(`${resumed ? "reconnected" : "attached"}: ${describeCommand(process)} (${id})`, "ok");
          // The PTY follows this tab's size; another tab may have changed it.
          // A process on pipes has no size (the server refuses a resize).
          if (resumed && process.tty && mayType()) void attachment?.resize(term.cols, term.rows).catch(() => {});
        },
        onReconnecting: (delayMs, attempt, reason) => {
          if (generation !== attachGeneration) return;
          const when = attempt === 0 ? "reconnecting" : `reconnecting in ${(delayMs / 1000).toFixed(1)} s, attempt ${attempt}`;
          // Keys typed meanwhile wait in the attachment and go once, when it is back.
          const waiting = attachment?.pendingInput ?? 0;
          setStatus(`disconnected (${reason}); ${when}${waiting > 0 ? `; ${waiting} bytes of input waiting` : ""}`, "bad");
        },
        onRejected: (code, message) => setStatus(`server error ${code}: ${message}`, "bad"),
      }),
    );
  } catch (e) {
    if (generation !== attachGeneration) return;
    setStarting(undefined);
    setStatus(`detached: ${(e as Error).message}`, "bad");
    return;
  }
  if (generation !== attachGeneration) return current.close();
  attachment = current;
  view.attachment = current;
  // Whoever types here should know it is kept (the spawn's record_input).
  recordedEl.hidden = current.process?.records_input !== true;
  if (mayType()) void current.resize(term.cols, term.rows).catch(() => {});
  term.focus();
  try {
    // xterm decodes UTF-8 itself, keeping a code point split across two
    // frames whole. Waiting for its write callback before taking the next
    // chunk is what grants credit: the tab never holds more than WINDOW.
    for await (const chunk of current.stdout) {
      if (chunk.type === "screen") {
        // A session that has printed nothing yet has an empty screen.
        if (chunk.offset > 0 && !startingEl.hidden) setStarting(undefined);
        term.write("\x1bc");
        await writeReplayed(chunk.data);
        void current.resize(term.cols, term.rows).catch(() => {});
      } else if (chunk.type === "data") {
        if (!startingEl.hidden) setStarting(undefined);
        if (chunk.offset < replayedUntil) await writeReplayed(chunk.data);
        else await new Promise<void>((resolve) => term.write(chunk.data, resolve));
      } else {
        notice(`tether: ${chunk.length} bytes of output were dropped`);
      }
    }
    const process = await current.exit;
    if (generation !== attachGeneration) return;
    setStarting(undefined);
    view.exit = process;
    endEl.disabled = true;
    const text = `Process ${describeExit(process)}`;
    // Written through the terminal queue, so it lands after the output.
    term.write(`\r\n\x1b[90m[${visible(text)}]\x1b[0m\r\n`, () => {
      exitEl.textContent = text;
      exitEl.hidden = false;
    });
    setStatus(`${text} (${id})`, "idle");
    void refreshSessions();
  } catch (e) {
    if (generation !== attachGeneration) return;
    setStarting(undefined);
    // The server forgot this tab's input stream (away longer than its
    // --input-ttl-ms): what was typed meanwhile may or may not have arrived,
    // and is not sent again, so nothing is typed twice.
    const expired = (e as { code?: string }).code === "input_expired";
    if (expired) notice("tether: the connection was away too long; keys typed meanwhile were not sent. Reload to re-attach.");
    setStatus(`detached: ${(e as Error).message}`, "bad");
  }
}

async function startSession(): Promise<void> {
  // What is typed is a shell command line (`htop || top` works): the API's
  // `command`, run by /bin/sh -c.
  const command = commandEl.value.trim();
  if (!command) return setStatus("enter a command to run", "bad");
  const name = nameEl.value.trim() || undefined;
  fit.fit();
  setStarting(`starting ${command}…`);
  setStatus(`starting ${command}…`, "warn");
  try {
    const process = await withToken(() =>
      // overflow "drop": see README.md (a slow or background tab must
      // never stall the shell for everyone else).
      // A closed tab ends its shell: an unnamed session nobody has
      // attached for GRACE_MS ends (a reload re-attaches well within it).
      // A named one is meant to be come back to: 10 minutes.
      conn.spawn({
        command,
        tty: true,
        cols: term.cols,
        rows: term.rows,
        overflow: "drop",
        ...(name ? { name } : {}),
        unattached_timeout_ms: name ? KEPT_MS : GRACE_MS,
      }),
    );
    nameEl.value = "";
    setLifetime(process.id, name ? "kept" : "own");
    void attach(process.id);
    void refreshSessions();
  } catch (e) {
    setStarting(undefined);
    setStatus(`could not start ${command}: ${(e as Error).message}`, "bad");
  }
}

// Ends the session shown: kills its whole process session on the server.
async function endSession(): Promise<void> {
  const id = view.sessionId;
  if (!id) return;
  endEl.disabled = true;
  setStatus(`ending ${id}…`, "warn");
  try {
    await withToken(() => conn.kill(id));
    // The attachment reports the exit (reason `killed`) as for any other end.
  } catch (e) {
    endEl.disabled = false;
    setStatus(`could not end ${id}: ${(e as Error).message}`, "bad");
  }
  void refreshSessions();
}

// Makes a link to the session shown, with a token scoped to it for an hour.
async function share(write: boolean): Promise<void> {
  const id = view.sessionId;
  if (!id) return;
  try {
    const minted = await withToken(() => conn.mintToken(id, write ? ["read", "write"] : ["read"], 3_600_000));
    // A shared session outlives this tab, so the link keeps working
    // after it closes (PATCH: this page's own short timeout, raised).
    let unkept = "";
    if (lifetimes()[id] === "own") {
      try {
        await withToken(() => conn.setUnattachedTimeout(id, KEPT_MS));
        setLifetime(id, "kept");
      } catch (e) {
        unkept = `, but it still ends when this tab closes: ${(e as Error).message}`;
      }
    }
    // In the fragment: never sent to the server, never in its logs.
    const url = `${location.origin}${location.pathname}#session=${encodeURIComponent(id)}&token=${minted.token}`;
    view.shareUrl = url;
    shareUrlEl.value = url;
    shareLinkEl.hidden = false;
    shareUrlEl.select();
    void navigator.clipboard?.writeText(url).catch(() => {});
    setStatus(`${write ? "interactive" : "read-only"} link to ${id} made (valid 1 h)${unkept}`, unkept ? "bad" : "ok");
  } catch (e) {
    setStatus(`could not share ${id}: ${(e as Error).message}`, "bad");
  }
}

/** False on a read-only share link. */
function mayType(): boolean {
  return scope === undefined || scope.write;
}

const listSessions = sessionList(conn, sessionsEl, () => view.sessionId, (id) => void attach(id));
async function refreshSessions(): Promise<void> {
  if (!scope) await listSessions();
}

// Input: typed keys and pastes arrive as strings (UTF-8 on the wire), some
// mouse reports as binary strings (one byte per char).
// Input is numbered: each key reaches the session once, in order, even when
// the connection drops while it is on its way. Keys typed while
// reconnecting wait in the attachment and are sent once it is back; input
// to an ended attachment has nowhere to go.
const type = (bytes: Uint8Array) => {
  if (mayType()) void attachment?.write(bytes).catch(() => {});
};
// Replies xterm makes to queries in replayed output (cursor position,
// device attributes, colours) would be typed into the session: dropped.
// A soft key's held Ctrl or Alt applies to the next key typed (softkeys.ts).
term.onData((data) => {
  if (!renderingReplay) type(encoder.encode(softKeys.filter(data)));
});
term.onBinary((data) => {
  if (!renderingReplay) type(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff));
});
term.onResize(({ cols, rows }) => {
  if (attachment?.process?.tty && mayType()) void attachment.resize(cols, rows).catch(() => {});
});

// Refit at most once per frame whenever the terminal's box changes: a
// window resize, and also the header wrapping or fonts and styles arriving
// after the first fit (which left the terminal taller than its box, and
// the page scrolling under its header).
let fitPending = false;
new ResizeObserver(() => {
  if (fitPending) return;
  fitPending = true;
  requestAnimationFrame(() => {
    fitPending = false;
    fit.fit();
  });
}).observe($("terminal"));

$<HTMLFormElement>("spawn").addEventListener("submit", (event) => {
  event.preventDefault();
  void startSession();
});
$<HTMLButtonElement>("refresh").addEventListener("click", () => void refreshSessions());
endEl.addEventListener("click", () => void endSession());
$<HTMLButtonElement>("share-read").addEventListener("click", () => void share(false));
$<HTMLButtonElement>("share-write").addEventListener("click", () => void share(true));
window.addEventListener("hashchange", () => {
  const id = new URLSearchParams(location.hash.slice(1)).get("session");
  if (id && id !== view.sessionId) void attach(id);
});
if (!scope) setInterval(() => void refreshSessions(), 5000);
// Coming back online after an outage: try at once rather than at the next backoff.
window.addEventListener("online", () => attachment?.reconnect());

const initial = scope?.process ?? fragment.get("session");
const replayId = fragment.get("replay");
if (replayId) {
  // A replay reads the session's recording; it attaches to nothing.
  const state: ReplayState = { id: replayId, duration: 0, position: 0, playing: false, speed: 1, markers: [], live: false, error: "" };
  view.replay = state;
  const start = fragment.has("t") ? Number(fragment.get("t")) || 0 : undefined;
  const speed = Number(fragment.get("speed")) || undefined;
  setStatus(`replay of ${replayId}`, "idle");
  setStarting(undefined);
  startReplay(term, replayId, conn.token, replayControls($("replay-bar")), state, start, speed).catch((e: unknown) => {
    state.error = (e as Error).message;
    setStatus(state.error, "bad");
  });
} else if (scope && initial) {
  // A share link: its one session, nothing else.
  void attach(initial);
} else if (initial) {
  void attach(initial);
  void refreshSessions();
} else {
  void startSession();
}
