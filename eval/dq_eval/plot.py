"""Score vs. bits per weight as a PNG: matplotlib when it is installed, otherwise a small PNG
written here with zlib + struct (axes, tick marks, digit tick labels, points with 95 % interval
bars; no text labels). Never fails a run for lack of matplotlib."""
import math
import struct
import zlib

COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]


def scatter(path, series, xlabel, ylabel):
    """series: {name: [(x, y, y_lo, y_hi, label)]}. Returns the backend used."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - any import problem means: draw it ourselves
        write_png(path, *render(series))
        return "builtin"
    fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=100)
    for i, (name, pts) in enumerate(series.items()):
        if not pts:
            continue
        c = tuple(v / 255 for v in COLORS[i % len(COLORS)])
        xs = [p[0] for p in pts]
        ys = [100 * p[1] for p in pts]
        err = [[100 * (p[1] - p[2]) for p in pts], [100 * (p[3] - p[1]) for p in pts]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", color=c, label=name, capsize=3)
        for p in pts:
            ax.annotate(p[4], (p[0], 100 * p[1]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    ax.set_xscale("log", base=2)
    ticks = [t for t in (2, 3, 4, 5, 6, 8, 12, 16, 32)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel + " (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    if any(series.values()):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return "matplotlib"


# --------------------------------------------------------------------------- builtin PNG
FONT = {  # 3x5 digits
    "0": ["111", "101", "101", "101", "111"], "1": ["010", "110", "010", "010", "111"],
    "2": ["111", "001", "111", "100", "111"], "3": ["111", "001", "111", "001", "111"],
    "4": ["101", "101", "111", "001", "001"], "5": ["111", "100", "111", "001", "111"],
    "6": ["111", "100", "111", "101", "111"], "7": ["111", "001", "010", "010", "010"],
    "8": ["111", "101", "111", "101", "111"], "9": ["111", "101", "111", "001", "111"],
    ".": ["000", "000", "000", "000", "010"],
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def set(self, x, y, c):
        x, y = int(round(x)), int(round(y))
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for k in range(n + 1):
            t = k / n
            self.set(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, c)

    def disc(self, cx, cy, r, c):
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r:
                    self.set(cx + dx, cy + dy, c)

    def text(self, x, y, s, c, scale=2):
        for ch in s:
            glyph = FONT.get(ch)
            if glyph:
                for gy, row in enumerate(glyph):
                    for gx, bit in enumerate(row):
                        if bit == "1":
                            for sy in range(scale):
                                for sx in range(scale):
                                    self.set(x + gx * scale + sx, y + gy * scale + sy, c)
            x += 4 * scale


def render(series, w=720, h=440):
    cv = Canvas(w, h)
    left, right, top, bottom = 60, 20, 20, 50
    pw, ph = w - left - right, h - top - bottom
    xs = [p[0] for pts in series.values() for p in pts]
    lo, hi = (min(xs), max(xs)) if xs else (2.0, 16.0)
    lo, hi = math.log2(lo) - 0.25, math.log2(hi) + 0.25
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5

    def X(v):
        return left + (math.log2(v) - lo) / (hi - lo) * pw

    def Y(s):
        return top + (1 - s) * ph

    black, grey = (0, 0, 0), (220, 220, 220)
    for k in range(6):  # y ticks 0, 20, ... 100 %
        y = Y(k / 5)
        cv.line(left, y, left + pw, y, grey)
        cv.line(left - 6, y, left, y, black)
        label = str(20 * k)
        cv.text(left - 10 - 8 * len(label), y - 5, label, black)
    for t in (2, 3, 4, 5, 6, 8, 12, 16, 32):
        if lo <= math.log2(t) <= hi:
            x = X(t)
            cv.line(x, top + ph, x, top + ph + 6, black)
            cv.text(x - 4 * len(str(t)), top + ph + 12, str(t), black)
    cv.line(left, top, left, top + ph, black)
    cv.line(left, top + ph, left + pw, top + ph, black)
    for i, pts in enumerate(series.values()):
        c = COLORS[i % len(COLORS)]
        for dy in range(-4, 5):  # legend: square swatches below the axis, series in order
            cv.line(left + pw - 60 + 30 * i - 4, h - 12 + dy, left + pw - 60 + 30 * i + 4,
                    h - 12 + dy, c)
        for x, y, ylo, yhi, _ in pts:
            px = X(x) + (i * 4 - 2)  # nudge the series apart
            cv.line(px, Y(ylo), px, Y(yhi), c)
            cv.line(px - 3, Y(ylo), px + 3, Y(ylo), c)
            cv.line(px - 3, Y(yhi), px + 3, Y(yhi), c)
            cv.disc(px, Y(y), 4, c)
    return cv.w, cv.h, bytes(cv.px)


def write_png(path, w, h, rgb):
    raw = b"".join(b"\x00" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))
