// Replay (issue 44): `#replay=ID` plays a session from its recording
// (GET /v1/processes/ID/recording, an asciicast v2: each output event with
// the time it was written) instead of attaching to it. Play and pause,
// the speed, a position slider (a seek redraws from the start up to that
// time at once), the next marker (a range of output that was lost), and a
// link that opens the replay at the moment shown (`&t=SECONDS`). A
// running session's recording is followed: what it writes while the page
// replays it comes on, and a replay at its end shows it as it comes.
// Nothing is typed into the session: a replay only reads it.

import type { Terminal } from "@xterm/xterm";

type Event = [number, string, string];

/** What the tests read. */
export interface ReplayState {
  id: string;
  /** Seconds from the start to the last event. */
  duration: number;
  /** Seconds from the start shown now. */
  position: number;
  playing: boolean;
  speed: number;
  /** Times of the markers (lost output), in seconds. */
  markers: number[];
  /** True while the recording is still coming (a running session). */
  live: boolean;
  error: string;
}

export interface ReplayUi {
  bar: HTMLElement;
  play: HTMLButtonElement;
  speed: HTMLSelectElement;
  slider: HTMLInputElement;
  time: HTMLElement;
  nextMarker: HTMLButtonElement;
  link: HTMLButtonElement;
}

/** Builds the replay's controls into `bar`. */
export function replayControls(bar: HTMLElement): ReplayUi {
  const button = (id: string, text: string, title = ""): HTMLButtonElement => {
    const b = document.createElement("button");
    b.type = "button";
    b.id = id;
    b.textContent = text;
    b.title = title;
    return b;
  };
  const play = button("replay-play", "play");
  const speed = document.createElement("select");
  speed.id = "replay-speed";
  speed.title = "speed";
  for (const s of [0.5, 1, 2, 4, 8]) {
    const option = document.createElement("option");
    option.value = String(s);
    option.textContent = `${s}×`;
    option.selected = s === 1;
    speed.append(option);
  }
  const slider = document.createElement("input");
  slider.type = "range";
  slider.id = "replay-position";
  slider.min = "0";
  slider.step = "0.01";
  slider.title = "position";
  const time = document.createElement("span");
  time.id = "replay-time";
  time.className = "replay-time";
  const nextMarker = button("replay-next-marker", "next gap", "the next place where output was lost");
  const link = button("replay-link", "link here", "copy a link that opens this replay at this moment");
  const label = document.createElement("strong");
  label.textContent = "replay";
  bar.replaceChildren(label, play, speed, slider, time, nextMarker, link);
  bar.hidden = false;
  return { bar, play, speed, slider, time, nextMarker, link };
}

function clock(seconds: number): string {
  const m = Math.floor(seconds / 60);
  const s = seconds - m * 60;
  return `${m}:${s.toFixed(1).padStart(4, "0")}`;
}

/**
 * Reads `body` as lines, giving `each` the lines that are whole after
 * every read (the last one may lack its newline at the end).
 */
async function readLines(body: ReadableStream<Uint8Array>, each: (lines: string[]) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let rest = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += decoder.decode(value, { stream: true });
    const cut = rest.lastIndexOf("\n");
    if (cut < 0) continue;
    each(rest.slice(0, cut).split("\n").filter((l) => l.length > 0));
    rest = rest.slice(cut + 1);
  }
  rest += decoder.decode();
  if (rest.trim()) each([rest]);
}

/**
 * Plays the recording of `id` into `term`, starting paused at `start`
 * seconds (or playing from 0 when `start` is undefined). The recording is
 * read as it streams (`follow=1`): a running session's comes on until its
 * exit, so a replay that reaches the end of what was written stays there
 * and shows what the session writes next, as it comes (`state.live` while
 * the recording is open). Resolves when the recording has ended.
 */
export async function startReplay(
  term: Terminal,
  id: string,
  token: string | undefined,
  ui: ReplayUi,
  state: ReplayState,
  start: number | undefined,
  speed: number | undefined,
): Promise<void> {
  const response = await fetch(`/v1/processes/${encodeURIComponent(id)}/recording?version=2&follow=1`, {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
  });
  if (!response.ok || !response.body) {
    state.error = `the recording of ${id} could not be read: ${response.status}`;
    throw new Error(state.error);
  }
  let header: { width?: number; height?: number } | undefined;
  const events: Event[] = [];
  if (speed && speed > 0) {
    state.speed = speed;
    ui.speed.value = String(speed);
  }

  // The index of the next event to write.
  let next = 0;
  const show = () => {
    ui.slider.max = String(Math.max(state.duration, state.position));
    ui.slider.value = String(state.position);
    const live = state.live ? " (live)" : "";
    ui.time.textContent = `${clock(state.position)} / ${clock(state.duration)}${live}`;
  };
  const write = (until: number) => {
    let text = "";
    for (let event = events[next]; event !== undefined && event[0] <= until; event = events[++next]) {
      const [, code, data] = event;
      if (code === "o") text += data;
      else if (code === "r") {
        if (text) term.write(text);
        text = "";
        const [cols = 0, rows = 0] = data.split("x").map(Number);
        if (cols > 0 && rows > 0) term.resize(cols, rows);
      }
    }
    if (text) term.write(text);
    state.position = until;
    show();
  };
  const seek = (to: number) => {
    term.reset();
    if (header?.width && header.height) term.resize(header.width, header.height);
    next = 0;
    // While the recording comes, a moment past its end so far is shown
    // when it arrives.
    write(Math.max(0, state.live ? to : Math.min(to, state.duration)));
  };

  let timer: number | undefined;
  let last = 0;
  // True once playing reached the end of a recording that is still
  // coming: what arrives then is shown at once.
  let atEdge = false;
  const pause = () => {
    if (timer !== undefined) clearInterval(timer);
    timer = undefined;
    atEdge = false;
    state.playing = false;
    ui.play.textContent = "play";
  };
  const play = () => {
    if (state.position >= state.duration && !state.live) seek(0);
    state.playing = true;
    ui.play.textContent = "pause";
    last = performance.now();
    timer = window.setInterval(() => {
      const now = performance.now();
      const to = state.position + ((now - last) / 1000) * state.speed;
      last = now;
      write(Math.min(to, state.duration));
      if (state.position < state.duration) return;
      if (state.live) atEdge = true;
      else pause();
    }, 50);
  };

  // Lines as they arrive: the header first, then events.
  const arrived = (lines: string[]) => {
    for (const line of lines) {
      if (header === undefined) {
        header = JSON.parse(line) as { width?: number; height?: number };
        if (start === undefined) {
          seek(0);
          play();
        } else {
          seek(start);
        }
        continue;
      }
      const event = JSON.parse(line) as unknown;
      if (Array.isArray(event) && typeof event[0] === "number" && typeof event[1] === "string" && typeof event[2] === "string") {
        events.push([event[0], event[1], event[2]]);
        if (event[1] === "m") state.markers.push(event[0]);
        state.duration = Math.max(state.duration, event[0]);
      }
    }
    // At the live edge, what came is shown now; otherwise what came up to
    // the moment shown (a start past what had arrived) is written.
    write(atEdge ? state.duration : state.position);
  };

  ui.play.addEventListener("click", () => (state.playing ? pause() : play()));
  ui.speed.addEventListener("change", () => (state.speed = Number(ui.speed.value) || 1));
  ui.slider.addEventListener("input", () => {
    const playing = state.playing;
    pause();
    seek(Number(ui.slider.value));
    if (playing) play();
  });
  ui.nextMarker.addEventListener("click", () => {
    const marker = state.markers.find((t) => t > state.position + 0.001);
    if (marker === undefined) return;
    pause();
    seek(marker);
  });
  ui.link.addEventListener("click", () => {
    const fragment = new URLSearchParams(location.hash.slice(1));
    fragment.set("t", state.position.toFixed(2));
    const url = `${location.origin}${location.pathname}${location.search}#${fragment}`;
    history.replaceState(null, "", url);
    void navigator.clipboard?.writeText(url).catch(() => {});
  });

  state.live = true;
  try {
    await readLines(response.body, arrived);
  } finally {
    state.live = false;
    // The end: a start past it shows the end; playing at it stops.
    if (state.position > state.duration) write(state.duration);
    else show();
    if (state.playing && state.position >= state.duration) pause();
  }
}
