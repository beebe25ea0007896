"""The learning curve as a PNG, with the standard library alone (zlib + struct).

The trainer image has no matplotlib and must not gain one for a single chart, so this rasterises into a
palette canvas and encodes it as an 8-bit indexed PNG (one IHDR, PLTE, IDAT, IEND; filter 0 on every row).
Same rows in, same bytes out: no timestamps, no text chunks, a fixed compression level.

What it draws (colours explained in trainer/README.md): y from 0 (bottom) to 1 (top) with a tick and a light
grid line every 0.25; x from step 0 to the run's last step (or its max_steps), with about ten ticks; training
reward mean per step as a blue line; each periodic evaluation's pass@1 as an orange square with its CI bar;
the baseline evaluation at step 0 in green. Values outside 0..1 (a tool-efficiency bonus can lift a reward
above 1) are drawn at the edge. Tick labels use a 3x5 digit font: the only text, and cheap.
"""

from __future__ import annotations

import struct
import zlib

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 44, WIDTH - 16, 14, HEIGHT - 30  # the plot area: x in [LEFT, RIGHT], y in [TOP, BOTTOM]
WHITE, BLACK, GRID, REWARD, PASS, BASELINE = range(6)
PALETTE = ((255, 255, 255), (0, 0, 0), (222, 222, 222), (31, 119, 180), (255, 127, 14), (44, 160, 44))
# 3 columns x 5 rows per glyph, read row by row.
GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010",
}  # fmt: skip
SCALE = 2  # glyph pixels per font pixel


def encode(width: int, height: int, palette, pixels: bytes | bytearray) -> bytes:
    """An 8-bit indexed PNG of `pixels` (one palette index per pixel, rows top to bottom)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + bytes(pixels[y * width : (y + 1) * width]) for y in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0))
        + chunk(b"PLTE", bytes(c for rgb in palette for c in rgb))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def x_of(step: float, last: int) -> int:
    return LEFT + round(step * (RIGHT - LEFT) / max(last, 1))


def y_of(value: float) -> int:
    return BOTTOM - round(min(max(value, 0.0), 1.0) * (BOTTOM - TOP))


def tick_every(last: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... steps that puts at most ten ticks on the x axis."""
    every = 1
    while last / every > 10:
        every = every * 5 // 2 if str(every)[0] == "2" else every * 2
    return every


class Canvas:
    def __init__(self) -> None:
        self.px = bytearray(WIDTH * HEIGHT)  # WHITE is index 0

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: int) -> None:
        """Filled, corners included, clipped to the canvas; one slice per row or per (strided) column, whichever
        is fewer, so a tall run is one C-level assignment."""
        x0, x1 = max(min(x0, x1), 0), min(max(x0, x1), WIDTH - 1)
        y0, y1 = max(min(y0, y1), 0), min(max(y0, y1), HEIGHT - 1)
        if x0 > x1 or y0 > y1:
            return
        if x1 - x0 <= y1 - y0:
            run = bytes((colour,)) * (y1 - y0 + 1)
            for x in range(x0, x1 + 1):
                self.px[y0 * WIDTH + x : y1 * WIDTH + x + 1 : WIDTH] = run
        else:
            run = bytes((colour,)) * (x1 - x0 + 1)
            for y in range(y0, y1 + 1):
                self.px[y * WIDTH + x0 : y * WIDTH + x1 + 1] = run

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: int) -> None:
        """Two pixels thick, x0 <= x1 (the curve runs left to right), drawn as one vertical run per column, not
        pixel by pixel: the whole chart of 1000 noisy steps took 0.58 s pixel by pixel, 0.07 s so (47 ms of it
        zlib), and it is redrawn at every logged step."""
        if x1 == x0:
            self.rect(x0, y0, x0 + 1, y1, colour)
            return
        for x in range(x0, x1 + 1):
            ya = y0 + (y1 - y0) * max(x - x0 - 0.5, 0) / (x1 - x0)
            yb = y0 + (y1 - y0) * min(x - x0 + 0.5, x1 - x0) / (x1 - x0)
            lo, hi = sorted((round(ya), round(yb)))
            self.rect(x, lo, x + 1, hi + 1, colour)

    def text(self, x: int, y: int, s: str, colour: int = BLACK) -> None:
        """`s` with its top-left corner at (x, y)."""
        for i, ch in enumerate(s):
            for bit, on in enumerate(GLYPHS[ch]):
                if on == "1":
                    gx, gy = x + (i * 4 + bit % 3) * SCALE, y + (bit // 3) * SCALE
                    self.rect(gx, gy, gx + SCALE - 1, gy + SCALE - 1, colour)


def render(rows: list[dict], last_step: int = 0) -> bytes:
    """The chart of curve rows (trainer.report.curve's dicts: `step` plus the column values, None where absent)."""
    last = max([last_step, 1] + [r["step"] for r in rows])
    c = Canvas()
    for v, label in ((0.0, "0"), (0.25, ".25"), (0.5, ".5"), (0.75, ".75"), (1.0, "1")):
        y = y_of(v)
        if v:
            c.rect(LEFT + 1, y, RIGHT, y, GRID)
        c.rect(LEFT - 5, y, LEFT, y, BLACK)
        c.text(LEFT - 8 - len(label) * 4 * SCALE, y - 5, label)
    every = tick_every(last)
    for step in range(0, last + 1, every):
        x = x_of(step, last)
        c.rect(x, BOTTOM, x, BOTTOM + 5, BLACK)
        c.text(x - len(str(step)) * 2 * SCALE, BOTTOM + 9, str(step))
    c.rect(LEFT, TOP, LEFT, BOTTOM, BLACK)
    c.rect(LEFT, BOTTOM, RIGHT, BOTTOM, BLACK)
    points = [(x_of(r["step"], last), y_of(r["reward_mean"])) for r in rows if r.get("reward_mean") is not None]
    for (x0, y0), (x1, y1) in zip(points, points[1:] or points):
        c.line(x0, y0, x1, y1, REWARD)
    for r in rows:
        if r.get("pass_at_1") is None:
            continue
        colour, x = (BASELINE if r["step"] == 0 else PASS), x_of(r["step"], last)
        lo, hi = r.get("pass_at_1_ci_low"), r.get("pass_at_1_ci_high")
        if lo is not None and hi is not None:
            c.rect(x, y_of(hi), x, y_of(lo), colour)
            c.rect(x - 3, y_of(hi), x + 3, y_of(hi), colour)
            c.rect(x - 3, y_of(lo), x + 3, y_of(lo), colour)
        y = y_of(r["pass_at_1"])
        c.rect(x - 3, y - 3, x + 3, y + 3, colour)
    return encode(WIDTH, HEIGHT, PALETTE, c.px)
