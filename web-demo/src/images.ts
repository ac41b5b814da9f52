// Images in the terminal (@xterm/addon-image): SIXEL and iTerm2's inline
// images (OSC 1337 File=inline=1), as img2sixel, chafa or imgcat print them.
// Bounded: one image may have at most 2048x2048 pixels (16 MiB decoded) and
// its sequence at most 8 MB; all images together at most 32 MB, the oldest
// dropped first (a placeholder where one was). The server's screen, which a
// reload or a second tab starts from, is text: images are live only.

import type { Terminal } from "@xterm/xterm";
import { ImageAddon } from "@xterm/addon-image";

export const IMAGE_LIMITS = {
  pixelLimit: 2048 * 2048,
  storageLimit: 32,
  sixelSizeLimit: 8_000_000,
  iipSizeLimit: 8_000_000,
} as const;

export function installImages(term: Terminal): ImageAddon {
  const addon = new ImageAddon({ ...IMAGE_LIMITS });
  term.loadAddon(addon);
  return addon;
}
