// The tab's title and the bell. A program's title (OSC 0 or 2,
// `printf '\e]0;TEXT\a'`) becomes the tab's, followed by " · tether"; a new
// session starts again from the page's own title. The bell (BEL) flashes a
// frame around the terminal; while the tab is hidden it also puts a bell
// before the title until the tab is shown again, and, if the person asked
// for it (the checkbox, which asks the browser's permission), a
// notification, at most one per 5 s. Bells in replayed output (a reload, a
// second tab) rang long ago: they are not rung again.

import type { Terminal } from "@xterm/xterm";

const PAGE_TITLE = "tether · browser terminal";
const NOTIFY_KEY = "tether.bellNotify";
const BELL_MARK = "🔔 ";

// No storage (a private window's quota): the box starts unticked, nothing else.
function stored(): string | null {
  try {
    return localStorage.getItem(NOTIFY_KEY);
  } catch {
    return null;
  }
}
function store(value: string): void {
  try {
    localStorage.setItem(NOTIFY_KEY, value);
  } catch {
    // as above
  }
}

export interface AttentionState {
  /** The program's title, as set (control characters removed). */
  title: string;
  /** Bells rung (live ones only). */
  bells: number;
  /** Notifications shown for bells. */
  notifications: number;
}

export interface Attention {
  /** A new session: its title is not the last one's. */
  reset(): void;
}

export function installAttention(
  term: Terminal,
  pane: HTMLElement,
  notifyBox: HTMLInputElement,
  state: AttentionState,
  isLive: () => boolean,
): Attention {
  let marked = false;
  const show = () => {
    const base = state.title ? `${state.title} · tether` : PAGE_TITLE;
    document.title = marked ? BELL_MARK + base : base;
  };
  term.onTitleChange((title) => {
    state.title = title.replace(/[\u0000-\u001f\u007f-\u009f]/g, "").slice(0, 200);
    show();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && marked) {
      marked = false;
      show();
    }
  });

  // Notifications only when asked for here, since the browser asks the
  // person once per site and remembers a refusal.
  const canNotify = typeof Notification !== "undefined";
  const wanted = () => canNotify && notifyBox.checked && Notification.permission === "granted";
  notifyBox.disabled = !canNotify;
  notifyBox.checked = canNotify && stored() === "1" && Notification.permission === "granted";
  notifyBox.addEventListener("change", () => {
    if (!notifyBox.checked) return store("0");
    void Notification.requestPermission().then((permission) => {
      notifyBox.checked = permission === "granted";
      store(notifyBox.checked ? "1" : "0");
    });
  });

  let lastNotified = -Infinity;
  term.onBell(() => {
    if (!isLive()) return;
    state.bells++;
    // Restart the flash even if the last one is still running.
    pane.classList.remove("bell");
    void pane.offsetWidth;
    pane.classList.add("bell");
    if (!document.hidden) return;
    if (!marked) {
      marked = true;
      show();
    }
    if (wanted() && performance.now() - lastNotified > 5000) {
      lastNotified = performance.now();
      try {
        const notification = new Notification("tether: bell", { body: state.title || "a terminal rang its bell", tag: "tether-bell" });
        notification.onclick = () => {
          window.focus();
          notification.close();
        };
        state.notifications++;
      } catch {
        // Some browsers allow notifications only from a service worker.
      }
    }
  });
  pane.addEventListener("animationend", () => pane.classList.remove("bell"));

  return {
    reset() {
      state.title = "";
      show();
    },
  };
}
