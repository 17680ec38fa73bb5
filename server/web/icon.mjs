// Turns src/favicon.svg into favicon.ico, for the browsers and tools that ask
// for /favicon.ico whatever the page says. Rasterising the SVG itself (a
// small subset: one viewBox, <rect> and <polygon> with #rrggbb fills) keeps
// the two icons from drifting apart, and needs no npm dependency: the ICO
// holds one 32×32 PNG (PNG-in-ICO, which every current browser reads), whose
// pixels are deflated with node:zlib at a fixed level.
import { deflateSync } from 'node:zlib';

const SIZE = 32;
// Samples per pixel along each axis: 8×8 gives smooth edges at 32 px.
const SAMPLES = 8;

/** The ICO bytes for an SVG in the subset above. */
export function icoFromSvg(svg) {
  return ico(png(SIZE, raster(parse(svg), SIZE)));
}

function parse(svg) {
  const text = svg.replace(/<!--[\s\S]*?-->/g, '');
  for (const [, name] of text.matchAll(/<([A-Za-z][\w-]*)/g)) {
    if (!['svg', 'rect', 'polygon'].includes(name)) {
      throw new Error(`favicon.svg: <${name}> is not drawn into favicon.ico; use <rect> or <polygon>`);
    }
  }
  const root = attributes(text.match(/<svg\b[^>]*>/)?.[0] ?? '');
  const box = (root.viewBox ?? '').trim().split(/[\s,]+/).map(Number);
  if (box.length !== 4 || box[0] !== 0 || box[1] !== 0 || !(box[2] > 0) || !(box[3] > 0)) {
    throw new Error(`favicon.svg: the viewBox must be "0 0 W H", not ${JSON.stringify(root.viewBox)}`);
  }
  const shapes = [...text.matchAll(/<(rect|polygon)\b[^>]*>/g)].map(([tag, kind]) => {
    const a = attributes(tag);
    const fill = colour(a.fill);
    if (kind === 'rect') {
      const [x, y, w, h, rx] = ['x', 'y', 'width', 'height', 'rx'].map((k) => Number(a[k] ?? 0));
      return { fill, inside: (px, py) => inRoundedRect(px, py, x, y, w, h, Math.min(rx, w / 2, h / 2)) };
    }
    const flat = (a.points ?? '').trim().split(/[\s,]+/).map(Number);
    if (flat.length < 6 || flat.length % 2 !== 0 || flat.some(Number.isNaN)) {
      throw new Error(`favicon.svg: bad polygon points ${JSON.stringify(a.points)}`);
    }
    const points = [];
    for (let i = 0; i < flat.length; i += 2) points.push([flat[i], flat[i + 1]]);
    return { fill, inside: (px, py) => inPolygon(px, py, points) };
  });
  return { width: box[2], height: box[3], shapes };
}

function attributes(tag) {
  return Object.fromEntries([...tag.matchAll(/([\w-]+)="([^"]*)"/g)].map(([, k, v]) => [k, v]));
}

function colour(fill) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(fill ?? '');
  if (!m) throw new Error(`favicon.svg: fills must be #rrggbb, not ${JSON.stringify(fill)}`);
  return m.slice(1).map((h) => parseInt(h, 16));
}

function inRoundedRect(px, py, x, y, w, h, r) {
  if (px < x || py < y || px > x + w || py > y + h) return false;
  const cx = Math.min(Math.max(px, x + r), x + w - r);
  const cy = Math.min(Math.max(py, y + r), y + h - r);
  return (px - cx) ** 2 + (py - cy) ** 2 <= r * r;
}

// Even-odd ray casting, as SVG's default fill-rule for simple outlines.
function inPolygon(px, py, points) {
  let inside = false;
  for (let i = 0, j = points.length - 1; i < points.length; j = i++) {
    const [xi, yi] = points[i];
    const [xj, yj] = points[j];
    if (yi > py !== yj > py && px < ((xj - xi) * (py - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

// RGBA rows, each pixel the average of its samples' topmost shape colours
// (straight alpha, as PNG stores it).
function raster({ width, height, shapes }, size) {
  const rgba = Buffer.alloc(size * size * 4);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      const sum = [0, 0, 0];
      let covered = 0;
      for (let sy = 0; sy < SAMPLES; sy++) {
        for (let sx = 0; sx < SAMPLES; sx++) {
          const px = ((x + (sx + 0.5) / SAMPLES) * width) / size;
          const py = ((y + (sy + 0.5) / SAMPLES) * height) / size;
          const top = shapes.findLast((s) => s.inside(px, py));
          if (!top) continue;
          covered++;
          top.fill.forEach((c, i) => (sum[i] += c));
        }
      }
      const at = (y * size + x) * 4;
      if (covered > 0) sum.forEach((c, i) => (rgba[at + i] = Math.round(c / covered)));
      rgba[at + 3] = Math.round((255 * covered) / (SAMPLES * SAMPLES));
    }
  }
  return rgba;
}

function png(size, rgba) {
  const rows = Buffer.alloc(size * (size * 4 + 1));
  for (let y = 0; y < size; y++) {
    // Filter type 0 (none) before each row.
    rgba.copy(rows, y * (size * 4 + 1) + 1, y * size * 4, (y + 1) * size * 4);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header.set([8, 6, 0, 0, 0], 8); // 8-bit RGBA, deflate, no interlace
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(rows, { level: 9 })),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

function chunk(type, data) {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

// zlib.crc32 only arrived in Node 20.15; this is the same CRC-32 (ISO-HDLC).
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ICONDIR (reserved, type 1 = icon, one image) and its ICONDIRENTRY: a
// 32×32, 32-bit image whose bytes, a PNG, follow at offset 22.
function ico(image) {
  const head = Buffer.alloc(22);
  head.writeUInt16LE(0, 0);
  head.writeUInt16LE(1, 2);
  head.writeUInt16LE(1, 4);
  head.writeUInt8(SIZE, 6);
  head.writeUInt8(SIZE, 7);
  head.writeUInt8(0, 8); // no palette
  head.writeUInt8(0, 9);
  head.writeUInt16LE(1, 10); // colour planes
  head.writeUInt16LE(32, 12); // bits per pixel
  head.writeUInt32LE(image.length, 14);
  head.writeUInt32LE(head.length, 18);
  return Buffer.concat([head, image]);
}
