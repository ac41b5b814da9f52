// Preferences from the URL, as ttyd takes them: `?fontSize=18&theme=light`
// in the query, or the same names in the fragment (`#fontSize=18`), which
// wins when both give one. A value that is not understood is ignored (the
// default applies) and listed in `ignored`, so the page can say so.
//
//   fontSize=N            the terminal's font size in CSS pixels, 6 to 64 (default 14)
//   theme=dark|light      colours of the terminal and the page (default dark)
//   renderer=webgl|dom    xterm's renderer (default webgl, falling back to dom)
//   copyOnSelect=0|1      copy the selection to the clipboard (default 1)

import type { ITheme } from "@xterm/xterm";

export type ThemeName = "dark" | "light";
export type RendererName = "webgl" | "dom";

export interface Preferences {
  fontSize: number;
  theme: ThemeName;
  renderer: RendererName;
  copyOnSelect: boolean;
  /** `name=value` pairs given but not understood, for the page to show. */
  ignored: string[];
}

export const DEFAULTS: Omit<Preferences, "ignored"> = { fontSize: 14, theme: "dark", renderer: "webgl", copyOnSelect: true };

export function readPreferences(search: string, hash: string): Preferences {
  const query = new URLSearchParams(search);
  const fragment = new URLSearchParams(hash.replace(/^#/, ""));
  const get = (name: string) => fragment.get(name) ?? query.get(name) ?? undefined;
  const prefs: Preferences = { ...DEFAULTS, ignored: [] };
  const ignore = (name: string, value: string) => prefs.ignored.push(`${name}=${value}`);

  const fontSize = get("fontSize");
  if (fontSize !== undefined) {
    const n = Number(fontSize);
    if (fontSize.trim() !== "" && Number.isFinite(n) && n >= 6 && n <= 64) prefs.fontSize = n;
    else ignore("fontSize", fontSize);
  }
  const theme = get("theme");
  if (theme !== undefined) {
    if (theme === "dark" || theme === "light") prefs.theme = theme;
    else ignore("theme", theme);
  }
  const renderer = get("renderer");
  if (renderer !== undefined) {
    if (renderer === "webgl" || renderer === "dom") prefs.renderer = renderer;
    // ttyd's and xterm 5's "canvas" renderer is gone from xterm 6: the DOM one is what is left.
    else if (renderer === "canvas") prefs.renderer = "dom";
    else ignore("renderer", renderer);
  }
  const copy = get("copyOnSelect");
  if (copy !== undefined) {
    if (["1", "true", "on"].includes(copy)) prefs.copyOnSelect = true;
    else if (["0", "false", "off"].includes(copy)) prefs.copyOnSelect = false;
    else ignore("copyOnSelect", copy);
  }
  return prefs;
}

/** xterm's colours per theme. The dark one is xterm's palette on the page's background. */
export const TERMINAL_THEMES: Record<ThemeName, ITheme> = {
  dark: { background: "#1b1d23" },
  // A palette readable on white: xterm's default yellow and white vanish there.
  light: {
    background: "#fbfbfc",
    foreground: "#24292f",
    cursor: "#24292f",
    cursorAccent: "#fbfbfc",
    selectionBackground: "#b6d3f7",
    black: "#24292f",
    red: "#c4302b",
    green: "#277a33",
    yellow: "#8a6100",
    blue: "#0b5fc7",
    magenta: "#8d3fb7",
    cyan: "#1b7c83",
    white: "#6e7781",
    brightBlack: "#57606a",
    brightRed: "#a40e26",
    brightGreen: "#1a6327",
    brightYellow: "#6e4a00",
    brightBlue: "#0a4aa3",
    brightMagenta: "#6e2a96",
    brightCyan: "#135f65",
    brightWhite: "#8c959f",
  },
};
