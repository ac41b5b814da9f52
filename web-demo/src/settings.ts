// The preferences in effect (preferences.ts), applied to the terminal and
// the page, and the panel that changes them (the side panel's "this
// terminal"). What the URL gave is stored at load; what the panel changes is
// stored, applied at once, and taken out of the URL (which would otherwise
// win over it at the next load). "reset to defaults" forgets what this
// browser stored and takes every preference out of the URL.
//
// `theme=system` follows the browser's prefers-color-scheme, also when it
// changes while the page is open.

import type { ITerminalOptions, Terminal } from "@xterm/xterm";
import {
  DEFAULTS,
  PREFERENCE_NAMES,
  TERMINAL_THEMES,
  fontFamilyCss,
  formatPreference,
  loadStored,
  parsePreference,
  readPreferences,
  resolveTheme,
  saveStored,
  urlWithout,
  type PreferenceName,
  type PreferenceValues,
  type Preferences,
  type ThemeName,
} from "./preferences";
import type { Renderer } from "./renderer";

export interface SettingsElements {
  /** The panel: one control per preference, named after it. */
  form: HTMLFormElement;
  reset: HTMLButtonElement;
  /** Where the page says which URL values it ignored. */
  info: HTMLElement;
}

export interface Settings {
  /** The preferences in effect (changed in place by the panel). */
  readonly prefs: Preferences;
  /** The theme shown now (`system` resolved). */
  readonly theme: ThemeName;
  /** xterm's options for the preferences in effect. */
  terminalOptions(): ITerminalOptions;
  /** Once the terminal is open: applies changes to it from now on, and wires the panel. */
  connect(term: Terminal, renderer: Renderer, refit: () => void, el: SettingsElements): void;
}

type Texts = Partial<Record<PreferenceName, string>>;

/** Reads the preferences (URL over storage over defaults), stores what the URL gave, and applies the page's side of them. */
export function loadSettings(): Settings {
  const systemLight = matchMedia("(prefers-color-scheme: light)");
  const stored = loadStored();
  const { fromUrl, ...prefs } = readPreferences(location.search, location.hash, stored);
  let kept: Texts = { ...stored, ...fromUrl };
  if (Object.keys(fromUrl).length > 0) saveStored(kept);

  let connected: { term: Terminal; renderer: Renderer; refit: () => void; rendering: PreferenceValues["renderer"] } | undefined;
  const theme = () => resolveTheme(prefs.theme, systemLight.matches);
  const terminalOptions = (): ITerminalOptions => ({
    fontSize: prefs.fontSize,
    fontFamily: fontFamilyCss(prefs.fontFamily),
    theme: TERMINAL_THEMES[theme()],
    cursorStyle: prefs.cursorStyle,
    cursorBlink: prefs.cursorBlink,
    scrollback: prefs.scrollback,
    screenReaderMode: prefs.screenReaderMode,
  });
  const apply = () => {
    document.documentElement.classList.toggle("light", theme() === "light");
    document.body.dataset.softkeys = prefs.softKeys;
    if (!connected) return;
    const { term, renderer, refit } = connected;
    const options = terminalOptions() as Record<string, unknown>;
    const current = term.options as Record<string, unknown>;
    // Only what changed: setting an option, even to the value it has, redraws.
    for (const [name, value] of Object.entries(options)) if (current[name] !== value) current[name] = value;
    // Only when the choice changed: a WebGL context lost for good stays given up.
    if (connected.rendering !== prefs.renderer) renderer.use((connected.rendering = prefs.renderer));
    // A new font or size changes the cells: as many as fit the box now.
    refit();
  };
  apply();
  systemLight.addEventListener("change", () => {
    if (prefs.theme === "system") apply();
  });

  return {
    prefs,
    get theme() {
      return theme();
    },
    terminalOptions,
    connect(term, renderer, refit, el) {
      // The renderer was made with the preferences' choice.
      connected = { term, renderer, refit, rendering: prefs.renderer };
      if (prefs.ignored.length > 0) {
        el.info.hidden = false;
        el.info.textContent = `not understood, ignored: ${prefs.ignored.join(", ")}`;
      }
      const controls = PREFERENCE_NAMES.map((name) => [name, el.form.elements.namedItem(name)] as const).filter(
        (pair): pair is readonly [PreferenceName, HTMLInputElement | HTMLSelectElement] =>
          pair[1] instanceof HTMLInputElement || pair[1] instanceof HTMLSelectElement,
      );
      const show = () => {
        for (const [name, control] of controls) {
          const value = prefs[name];
          if (control instanceof HTMLInputElement && control.type === "checkbox") control.checked = control.hasAttribute("data-inverted") ? !value : Boolean(value);
          else control.value = String(value);
          control.removeAttribute("aria-invalid");
        }
      };
      show();
      for (const [name, control] of controls) {
        control.addEventListener("change", () => {
          const text =
            control instanceof HTMLInputElement && control.type === "checkbox"
              ? formatPreference(control.hasAttribute("data-inverted") ? !control.checked : control.checked)
              : control.value;
          const value = parsePreference(name, text);
          if (value === undefined) {
            // Not one (a font size of 100, a font with a `;`): the control
            // says so and the preference stays as it was.
            control.setAttribute("aria-invalid", "true");
            return;
          }
          control.removeAttribute("aria-invalid");
          (prefs as Record<PreferenceName, PreferenceValues[PreferenceName]>)[name] = value;
          kept = { ...kept, [name]: formatPreference(value) };
          saveStored(kept);
          history.replaceState(history.state, "", urlWithout(location.href, [name]));
          apply();
        });
      }
      el.reset.addEventListener("click", () => {
        Object.assign(prefs, DEFAULTS);
        prefs.ignored = [];
        el.info.hidden = true;
        kept = {};
        saveStored(kept);
        history.replaceState(history.state, "", urlWithout(location.href, PREFERENCE_NAMES));
        show();
        apply();
      });
      apply();
    },
  };
}
