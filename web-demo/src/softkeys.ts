// Soft keys: the keys a phone's keyboard lacks (Esc, Ctrl, Alt, Tab, the
// arrows, and `|`, `~`, `/`, `-`, which hide on its second or third page),
// in a row under the terminal. Shown on touch screens and narrow windows
// (`softKeys=auto`, the default), always (`on`) or never (`off`): the CSS
// reads `body[data-softkeys]`.
//
// Ctrl and Alt are sticky: tapped, they apply to the next key, whether
// that key comes from this row or from the keyboard (as data through
// `filter`), and are released by it or by a second tap. What a key sends is
// what xterm sends for it: the arrows follow the application cursor mode
// (`ESC O A` once a program asked for it with `ESC[?1h`, `ESC [ A` otherwise)
// and take modifiers as `ESC [ 1 ; M A`. It goes in as typed input
// (`term.input`), so it takes the page's one way to the session.
//
// Tapping a key leaves the focus in the terminal, so a phone's keyboard
// stays up; activated from the keyboard (Tab to it, Enter), a key gives the
// focus back to the terminal, where the next key goes.

import type { Terminal } from "@xterm/xterm";

export interface SoftKeysState {
  ctrl: boolean;
  alt: boolean;
}

export interface SoftKeys {
  /** Typed data with the held modifiers applied to it (and then released). */
  filter(data: string): string;
}

const ARROWS: Record<string, string> = { up: "A", down: "B", right: "C", left: "D" };

/** The control character Ctrl makes of `c`, as xterm makes it from a keyboard; `c` when Ctrl makes nothing of it. */
export function withCtrl(c: string): string {
  if (/^[a-zA-Z]$/.test(c)) return String.fromCharCode(c.toUpperCase().charCodeAt(0) & 0x1f);
  const table: Record<string, string> = {
    "@": "\x00", " ": "\x00", "2": "\x00", "`": "\x00",
    "[": "\x1b", "3": "\x1b",
    "\\": "\x1c", "4": "\x1c", "|": "\x1c",
    "]": "\x1d", "5": "\x1d",
    "^": "\x1e", "6": "\x1e", "~": "\x1e",
    "_": "\x1f", "7": "\x1f", "/": "\x1f", "-": "\x1f",
    "?": "\x7f", "8": "\x7f",
  };
  return table[c] ?? c;
}

export function installSoftKeys(term: Terminal, row: HTMLElement, state: SoftKeysState): SoftKeys {
  const buttons = [...row.querySelectorAll<HTMLButtonElement>("button")];
  const show = () => {
    for (const button of buttons) {
      const modifier = button.dataset.modifier as "ctrl" | "alt" | undefined;
      if (modifier) button.setAttribute("aria-pressed", String(state[modifier]));
    }
  };
  const release = () => {
    state.ctrl = false;
    state.alt = false;
    show();
  };
  /** The sequence for a named key with the held modifiers. */
  const sequence = (key: string): string => {
    const arrow = ARROWS[key];
    if (arrow) {
      const modifiers = 1 + (state.alt ? 2 : 0) + (state.ctrl ? 4 : 0);
      if (modifiers > 1) return `\x1b[1;${modifiers}${arrow}`;
      return `\x1b${term.modes.applicationCursorKeysMode ? "O" : "["}${arrow}`;
    }
    const plain = key === "tab" ? "\t" : "\x1b";
    return state.alt ? `\x1b${plain}` : plain;
  };

  for (const button of buttons) {
    // A tap must not take the focus from the terminal (a phone's keyboard would go).
    button.addEventListener("mousedown", (event) => event.preventDefault());
    button.addEventListener("click", () => {
      const { key, modifier, text } = button.dataset;
      if (modifier === "ctrl" || modifier === "alt") {
        state[modifier] = !state[modifier];
        show();
      } else if (key) {
        const data = sequence(key);
        release();
        term.input(data, true);
      } else if (text) {
        // Through the filter, as a typed character: the held modifiers apply.
        term.input(text, true);
      }
      term.focus();
    });
  }

  return {
    filter(data) {
      if (!state.ctrl && !state.alt) return data;
      // One key's character. A paste, a composed word, a key that is
      // already a sequence (a hardware arrow) or a report the terminal
      // makes (focus, mouse) goes as it is, and the modifiers stay held.
      const chars = [...data];
      if (chars.length !== 1 || data.startsWith("\x1b")) return data;
      let key = chars[0] ?? "";
      if (state.ctrl) key = withCtrl(key);
      if (state.alt) key = `\x1b${key}`;
      release();
      return key;
    },
  };
}
