// Display preferences: from the URL, as ttyd takes them (`?fontSize=18&theme=light`
// in the query, or the same names in the fragment, `#fontSize=18`, which
// wins when both give one), and kept per browser in localStorage: a
// preference the URL gives, or the page's panel changes (settings.ts), is
// saved and applies on the next load; the URL wins over what is stored.
// A URL value that is not understood is ignored (the default or the stored
// value applies) and listed in `ignored`, so the page can say so; a stored
// value that is not understood (an older page's, or edited by hand) is
// ignored quietly and dropped at the next save.
//
//   fontSize=N              the terminal's font size in CSS pixels, 6 to 64 (default 14)
//   fontFamily=LIST         a CSS font-family list (default ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace)
//   theme=system|dark|light colours of the terminal and the page (default system: the browser's prefers-color-scheme)
//   cursorStyle=block|underline|bar   (default block)
//   cursorBlink=0|1         (default 1)
//   scrollback=N            lines kept above the screen, 0 to 100000 (default 5000)
//   renderer=webgl|dom      xterm's renderer (default webgl, falling back to dom)
//   copyOnSelect=0|1        copy the selection to the clipboard (default 1)
//   screenReaderMode=0|1    xterm's accessibility tree for screen readers (default 0)
//   softKeys=auto|on|off    the row of Esc, Ctrl, Alt, Tab, arrows (default auto: touch screens and narrow windows)
//   disableLeaveAlert=0|1   never ask before closing the tab (default 0; as ttyd's)

import type { ITheme } from "@xterm/xterm";

export type ThemeChoice = "system" | "dark" | "light";
export type ThemeName = "dark" | "light";
export type RendererName = "webgl" | "dom";
export type CursorStyle = "block" | "underline" | "bar";
export type SoftKeysMode = "auto" | "on" | "off";

export interface PreferenceValues {
  fontSize: number;
  fontFamily: string;
  theme: ThemeChoice;
  cursorStyle: CursorStyle;
  cursorBlink: boolean;
  scrollback: number;
  renderer: RendererName;
  copyOnSelect: boolean;
  screenReaderMode: boolean;
  softKeys: SoftKeysMode;
  disableLeaveAlert: boolean;
}
export type PreferenceName = keyof PreferenceValues;

export interface Preferences extends PreferenceValues {
  /** `name=value` pairs the URL gave but the page did not understand, for the page to show. */
  ignored: string[];
}

/**
 * Lines of scrollback at most. xterm keeps every line as cells of 12 bytes
 * (character, colours, attributes): 100,000 lines of 120 columns are about
 * 140 MB in the tab, and a resize reflows all of them. Past that, a
 * recording (replay.ts) or the session's own log is the better place.
 */
export const MAX_SCROLLBACK = 100_000;

export const DEFAULT_FONT_FAMILY = "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace";

export const DEFAULTS: Readonly<PreferenceValues> = {
  fontSize: 14,
  fontFamily: DEFAULT_FONT_FAMILY,
  theme: "system",
  cursorStyle: "block",
  cursorBlink: true,
  scrollback: 5000,
  renderer: "webgl",
  copyOnSelect: true,
  screenReaderMode: false,
  softKeys: "auto",
  disableLeaveAlert: false,
};

export const PREFERENCE_NAMES = Object.keys(DEFAULTS) as PreferenceName[];

const flag = (text: string): boolean | undefined =>
  ["1", "true", "on"].includes(text) ? true : ["0", "false", "off"].includes(text) ? false : undefined;
const oneOf =
  <T extends string>(...values: T[]) =>
  (text: string): T | undefined =>
    (values as string[]).includes(text) ? (text as T) : undefined;
const number = (min: number, max: number, integer: boolean) => (text: string) => {
  const n = Number(text);
  return text.trim() !== "" && Number.isFinite(n) && n >= min && n <= max && (!integer || Number.isInteger(n)) ? n : undefined;
};
// One family: a quoted name or words of letters, digits, `-`, `_`, `.`.
// Nothing else: the value ends up in xterm's style sheet and canvas font
// strings, where a `;`, `}` or `\` would be CSS of the link's choosing.
const FAMILY = /^\s*(?:"[\p{L}\p{N} _.-]+"|'[\p{L}\p{N} _.-]+'|[\p{L}\p{N}_.-]+(?: +[\p{L}\p{N}_.-]+)*)\s*$/u;
const fontFamily = (text: string) => (text.length <= 200 && text.split(",").every((family) => FAMILY.test(family)) ? text.trim() : undefined);

/** Each preference's value from its text (URL or storage), or undefined when it is not one. */
const PARSE: { [K in PreferenceName]: (text: string) => PreferenceValues[K] | undefined } = {
  fontSize: number(6, 64, false),
  fontFamily,
  theme: oneOf("system", "dark", "light"),
  cursorStyle: oneOf("block", "underline", "bar"),
  cursorBlink: flag,
  scrollback: number(0, MAX_SCROLLBACK, true),
  // ttyd's and xterm 5's "canvas" renderer is gone from xterm 6: the DOM one is what is left.
  renderer: (text) => (text === "canvas" ? "dom" : oneOf<RendererName>("webgl", "dom")(text)),
  copyOnSelect: flag,
  screenReaderMode: flag,
  softKeys: oneOf("auto", "on", "off"),
  disableLeaveAlert: flag,
};

export function parsePreference<K extends PreferenceName>(name: K, text: string): PreferenceValues[K] | undefined {
  return PARSE[name](text);
}

/** A value as the URL and the storage write it (booleans as 1 and 0). */
export function formatPreference(value: PreferenceValues[PreferenceName]): string {
  return typeof value === "boolean" ? (value ? "1" : "0") : String(value);
}

const STORAGE_KEY = "tether.preferences";

/** What this browser keeps: the preferences' texts by name. Anything unreadable is nothing. */
export function loadStored(storage: Storage | undefined = localStorageOrNone()): Partial<Record<PreferenceName, string>> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(storage?.getItem(STORAGE_KEY) ?? "{}");
  } catch {
    return {};
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {};
  const kept: Partial<Record<PreferenceName, string>> = {};
  for (const name of PREFERENCE_NAMES) {
    const text = (parsed as Record<string, unknown>)[name];
    if (typeof text === "string" && PARSE[name](text) !== undefined) kept[name] = text;
  }
  return kept;
}

/** Keeps these preferences' texts (the defaults need not be kept: `undefined` forgets one). */
export function saveStored(values: Partial<Record<PreferenceName, string>>, storage: Storage | undefined = localStorageOrNone()): void {
  try {
    if (Object.keys(values).length === 0) storage?.removeItem(STORAGE_KEY);
    else storage?.setItem(STORAGE_KEY, JSON.stringify(values));
  } catch {
    // No storage (a private window's quota, storage turned off): the
    // preference holds for this page only.
  }
}

function localStorageOrNone(): Storage | undefined {
  try {
    return window.localStorage;
  } catch {
    return undefined;
  }
}

/**
 * The preferences for this load: the defaults, then what is stored, then
 * the URL's. What the URL gave (understood) is returned apart, to be stored.
 */
export function readPreferences(
  search: string,
  hash: string,
  stored: Partial<Record<PreferenceName, string>> = {},
): Preferences & { fromUrl: Partial<Record<PreferenceName, string>> } {
  const query = new URLSearchParams(search);
  const fragment = new URLSearchParams(hash.replace(/^#/, ""));
  const prefs: Preferences = { ...DEFAULTS, ignored: [] };
  const fromUrl: Partial<Record<PreferenceName, string>> = {};
  const values: PreferenceValues = prefs;
  const set = <K extends PreferenceName>(name: K, value: PreferenceValues[K]) => {
    values[name] = value;
  };
  for (const name of PREFERENCE_NAMES) {
    const storedText = stored[name];
    const storedValue = storedText === undefined ? undefined : PARSE[name](storedText);
    if (storedValue !== undefined) set(name, storedValue);
    const text = fragment.get(name) ?? query.get(name) ?? undefined;
    if (text === undefined) continue;
    const value = PARSE[name](text);
    if (value === undefined) {
      prefs.ignored.push(`${name}=${text}`);
      continue;
    }
    set(name, value);
    fromUrl[name] = formatPreference(value);
  }
  return { ...prefs, fromUrl };
}

/** The URL without these preferences (in the query or the fragment), for history.replaceState. */
export function urlWithout(href: string, names: readonly PreferenceName[]): string {
  const url = new URL(href);
  const fragment = new URLSearchParams(url.hash.slice(1));
  for (const name of names) {
    url.searchParams.delete(name);
    fragment.delete(name);
  }
  const hash = fragment.toString();
  url.hash = hash ? `#${hash}` : "";
  return url.toString();
}

/** The theme shown for a choice: `system` follows the browser's colour scheme. */
export function resolveTheme(choice: ThemeChoice, systemPrefersLight: boolean): ThemeName {
  return choice === "system" ? (systemPrefersLight ? "light" : "dark") : choice;
}

/** The font-family xterm gets: the list asked for, with `monospace` after it unless it ends in a generic family. */
export function fontFamilyCss(list: string): string {
  return /(^|,)\s*(ui-)?monospace\s*$/.test(list) ? list : `${list}, monospace`;
}

/**
 * xterm's colours per theme. Every entry a program uses for text is at
 * least 4.5:1 (WCAG AA) against the background, except the one that is the
 * background's kin: `black` on dark and `brightWhite` on light, which
 * programs use as a background (`ESC[40m`, `ESC[107m`) or for text meant to
 * be barely seen (test/layout.test.mjs measures them; README.md lists them).
 */
export const TERMINAL_THEMES: Record<ThemeName, ITheme> = {
  // The page's background, its text colour, and a palette after One Dark.
  dark: {
    background: "#1b1d23",
    foreground: "#d7dae0",
    cursor: "#d7dae0",
    cursorAccent: "#1b1d23",
    selectionBackground: "#3e4a5e",
    black: "#3f4451",
    red: "#e06c75",
    green: "#98c379",
    yellow: "#e5c07b",
    blue: "#61afef",
    magenta: "#c678dd",
    cyan: "#56b6c2",
    white: "#d7dae0",
    brightBlack: "#8b91a0",
    brightRed: "#ff7b86",
    brightGreen: "#b5e890",
    brightYellow: "#ffd68a",
    brightBlue: "#7cc3ff",
    brightMagenta: "#de8ff5",
    brightCyan: "#6fd4e0",
    brightWhite: "#ffffff",
  },
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
    white: "#656d76",
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

