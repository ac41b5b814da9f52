// Builds the page into dist/ (npm run build). The client library,
// @tether/client, is ../typescript, linked by a file: dependency; npm does
// not install a linked package's own dependencies, so this installs them
// (once, from its lockfile) and builds the library before bundling it.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

const here = (p) => new URL(p, import.meta.url).pathname;

const library = here("../typescript");
const npm = (...args) => execFileSync("npm", args, { cwd: library, stdio: ["ignore", "inherit", "inherit"] });
if (!existsSync(`${library}/node_modules`)) npm("ci", "--no-audit", "--no-fund");
npm("run", "--silent", "build");

// A 16x16 favicon.ico (32-bit BMP inside an ICO), drawn from the rows
// below, so /favicon.ico is never a 404 for browsers or tools that ask for
// it whatever the page links. `#` is the glyph, `.` the tile, ` ` clear.
function favicon() {
  const rows = [
    " .............. ",
    "................",
    "................",
    ".......##.......",
    ".......##.......",
    ".......##.......",
    "....########....",
    "....########....",
    ".......##.......",
    ".......##.......",
    ".......##.......",
    ".......##.......",
    ".......##..##...",
    "........####....",
    "................",
    " .............. ",
  ];
  const size = 16;
  const header = Buffer.alloc(6 + 16);
  header.writeUInt16LE(0, 0); // reserved
  header.writeUInt16LE(1, 2); // type: icon
  header.writeUInt16LE(1, 4); // one image
  const maskRow = 4; // 16 bits padded to 32
  const imageBytes = 40 + size * size * 4 + size * maskRow;
  header.writeUInt8(size, 6);
  header.writeUInt8(size, 7);
  header.writeUInt16LE(1, 10); // planes
  header.writeUInt16LE(32, 12); // bits per pixel
  header.writeUInt32LE(imageBytes, 14);
  header.writeUInt32LE(22, 18); // offset of the image
  const image = Buffer.alloc(imageBytes);
  image.writeUInt32LE(40, 0); // BITMAPINFOHEADER
  image.writeInt32LE(size, 4);
  image.writeInt32LE(size * 2, 8); // XOR and AND masks
  image.writeUInt16LE(1, 12);
  image.writeUInt16LE(32, 14);
  const colours = { "#": [0x6e, 0xc1, 0x7e, 0xff], ".": [0x23, 0x1d, 0x1b, 0xff], " ": [0, 0, 0, 0] }; // BGRA
  for (let y = 0; y < size; y++) {
    const row = rows[size - 1 - y]; // bottom-up
    for (let x = 0; x < size; x++) image.set(colours[row[x]], 40 + (y * size + x) * 4);
  }
  return Buffer.concat([header, image]); // AND mask all zero: alpha decides
}

const dist = here("dist");
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
await build({
  entryPoints: [here("src/main.ts")],
  outfile: `${dist}/app.js`,
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  logLevel: "warning",
});
cpSync(here("index.html"), `${dist}/index.html`);
cpSync(here("style.css"), `${dist}/style.css`);
cpSync(here("favicon.svg"), `${dist}/favicon.svg`);
writeFileSync(`${dist}/favicon.ico`, favicon());
cpSync(here("node_modules/@xterm/xterm/css/xterm.css"), `${dist}/xterm.css`);

// Compressed copies beside each file (FILE.br, FILE.gz), made once here:
// tetherd serves one instead of the file to a browser that takes it
// (server/src/http/web.rs). Only where a copy is smaller.
let [plain, brotli, gzip] = [0, 0, 0];
for (const name of readdirSync(dist)) {
  const bytes = readFileSync(`${dist}/${name}`);
  const br = brotliCompressSync(bytes, {
    params: { [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length },
  });
  const gz = gzipSync(bytes, { level: constants.Z_BEST_COMPRESSION });
  if (br.length < bytes.length) writeFileSync(`${dist}/${name}.br`, br);
  if (gz.length < bytes.length) writeFileSync(`${dist}/${name}.gz`, gz);
  if (!name.endsWith(".map")) {
    plain += bytes.length;
    brotli += Math.min(br.length, bytes.length);
    gzip += Math.min(gz.length, bytes.length);
  }
}
const kb = (n) => `${Math.round(n / 1024)} KiB`;
console.log(`built ${dist}: ${kb(plain)} (source maps aside), ${kb(gzip)} gzipped, ${kb(brotli)} with brotli`);
