#!/usr/bin/env python3
"""Renders docs/dashboard.png: the panels of docs/grafana-quorumlock.json
evaluated over a real run of examples/metrics.rs.

    python3 -m pip install matplotlib          # once
    python3 scripts/dashboard.py               # ~80 s: run, scrape, render
    python3 scripts/dashboard.py --from scrapes.json   # render again

It starts five redis-server masters on free ports, runs the example
(`cargo run --release --example metrics --features metrics`) against them for
--secs seconds, and scrapes its /metrics every second. Meanwhile it
injects faults so that every panel has something to show: at 35% of the
run one master is shut down, at 55% it is started again empty (the
watchdog repairs the long job's key there, the waiters' pub/sub
reconnects), and at 75% the long job's key is deleted on three masters
(the watchdog finds it gone on a majority: one loss).

Each panel's PromQL is evaluated here, for the subset the dashboard uses:
sum/max [by (...)], rate, increase, histogram_quantile, label matchers
with =, and / between two vectors. rate() is (last - first) / (time
between them) over the samples in the window, increase() is last - first
(counter resets handled, no extrapolation); $__rate_interval is 4 scrape
intervals, as Grafana's for this scrape interval. Series that stay at 0
for the whole run are left out of the picture (the exporter shows every
error kind of every node, mostly zeros).
"""

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, "docs", "grafana-quorumlock.json")


# ---- the run ---------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=10).stdout.strip()


def start_redis(port):
    subprocess.run(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                    "--daemonize", "yes", "--logfile", ""], check=True)
    for _ in range(100):
        if redis(port, "PING") == "PONG":
            return
        time.sleep(0.05)
    sys.exit(f"redis-server on {port} did not start")


def parse_text(text):
    """Prometheus text format: [(name, {labels}, value)]."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
    return samples


def run(secs, out):
    ports = [free_port() for _ in range(5)]
    for p in ports:
        start_redis(p)
    metrics_port = free_port()
    env = dict(os.environ,
               QUORUMLOCK_NODES=",".join(f"redis://127.0.0.1:{p}" for p in ports),
               QUORUMLOCK_METRICS_ADDR=f"127.0.0.1:{metrics_port}",
               QUORUMLOCK_METRICS_SECS=str(secs))
    cargo = ["--release", "--example", "metrics", "--features", "metrics"]
    subprocess.run(["cargo", "build", *cargo], cwd=ROOT, check=True)
    example = subprocess.Popen(["cargo", "run", "-q", *cargo], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    faults = [(0.35, "node 5 shut down"), (0.55, "node 5 back, empty"),
              (0.75, "demo:nightly deleted on 3 nodes")]
    scrapes, events, start = [], [], None
    try:
        while example.poll() is None:
            try:
                text = urllib.request.urlopen(url, timeout=1).read().decode()
            except OSError:
                time.sleep(0.2)
                continue
            now = time.time()
            start = start or now
            scrapes.append({"t": now - start, "samples": parse_text(text)})
            while faults and now - start >= faults[0][0] * secs:
                _, what = faults.pop(0)
                if what.startswith("node 5 shut"):
                    redis(ports[4], "SHUTDOWN", "NOSAVE")
                elif what.startswith("node 5 back"):
                    start_redis(ports[4])
                else:
                    for p in ports[:3]:
                        redis(p, "DEL", "quorumlock:{demo:nightly}")
                events.append({"t": now - start, "what": what})
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
    finally:
        example.wait()
        for p in ports:
            redis(p, "SHUTDOWN", "NOSAVE")
    with open(out, "w") as f:
        json.dump({"scrape_interval": 1.0, "faults": events, "scrapes": scrapes}, f)
    return out


# ---- PromQL, the dashboard's subset ------------------------------------------

TOKEN = re.compile(r'\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)'
                   r'|(?P<str>"[^"]*")|(?P<range>\[[^\]]*\])|(?P<op>[(){},=/]))')


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            if expr[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse {expr[pos:]!r}")
        pos = m.end()
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
    return out


class Parser:
    def __init__(self, expr):
        self.t, self.i = tokens(expr), 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value}, got {tok}")
        self.i += 1
        return tok

    def expr(self):
        left = self.unary()
        while self.peek()[1] == "/":
            self.take()
            left = ("div", left, self.unary())
        return left

    def labels(self):
        self.take("(")
        names = []
        while self.peek()[1] != ")":
            kind, v = self.take()
            if kind == "id":
                names.append(v)
        self.take(")")
        return names

    def unary(self):
        kind, v = self.take()
        if kind == "num":
            return ("num", float(v))
        if v == "(":
            e = self.expr()
            self.take(")")
            return e
        if v in ("sum", "max"):
            by = self.labels() if self.peek()[1] == "by" and self.take() else None
            self.take("(")
            e = self.expr()
            self.take(")")
            return ("agg", v, by, e)
        if v in ("rate", "increase"):
            self.take("(")
            e = self.unary()
            self.take(")")
            return (v, e)
        if v == "histogram_quantile":
            self.take("(")
            q = self.unary()
            self.take(",")
            e = self.expr()
            self.take(")")
            return ("hq", q, e)
        # A selector: name{k="v",...}[range]
        matchers = {}
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                _, k = self.take()
                self.take("=")
                _, s = self.take()
                matchers[k] = s.strip('"')
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        ranged = self.peek()[0] == "range"
        if ranged:
            self.take()
        return ("sel", v, matchers, ranged)


def key(labels):
    return tuple(sorted(labels.items()))


class Evaluator:
    def __init__(self, data):
        self.scrapes = data["scrapes"]
        self.window = 4 * data["scrape_interval"]

    def series(self, name, matchers, upto, since):
        """{labels key: [(t, v)]} of `name` in scrapes within (since, upto]."""
        out = {}
        for s in self.scrapes:
            if s["t"] > upto or s["t"] < since:
                continue
            for n, labels, v in s["samples"]:
                if n == name and all(labels.get(k) == want for k, want in matchers.items()):
                    out.setdefault(key(labels), []).append((s["t"], v))
        return out

    def eval(self, node, t):
        """An instant vector at time t: {labels key: value}."""
        kind = node[0]
        if kind == "num":
            return {(): node[1]}
        if kind == "sel":
            got = self.series(node[1], node[2], t, t - 1e-9 - 1.0)
            return {k: pts[-1][1] for k, pts in got.items()}
        if kind in ("rate", "increase"):
            sel = node[1]
            got = self.series(sel[1], sel[2], t, t - self.window)
            out = {}
            for k, pts in got.items():
                if len(pts) < 2:
                    continue
                inc = sum(b - a if b >= a else b for (_, a), (_, b) in zip(pts, pts[1:]))
                span = pts[-1][0] - pts[0][0]
                out[k] = inc / span if kind == "rate" else inc
            return out
        if kind == "agg":
            _, op, by, inner = node
            groups = {}
            for k, v in self.eval(inner, t).items():
                g = tuple((a, b) for a, b in k if by is not None and a in by)
                groups.setdefault(g, []).append(v)
            f = sum if op == "sum" else max
            return {g: f(vs) for g, vs in groups.items()}
        if kind == "div":
            left, right = self.eval(node[1], t), self.eval(node[2], t)
            return {k: v / right[k] for k, v in left.items() if right.get(k)}
        if kind == "hq":
            q = self.eval(node[1], t)[()]
            groups = {}
            for k, v in self.eval(node[2], t).items():
                le = dict(k).get("le")
                g = tuple((a, b) for a, b in k if a != "le")
                groups.setdefault(g, []).append((float(le), v))
            return {g: quantile(q, sorted(b)) for g, b in groups.items()}
        raise ValueError(node)


def quantile(q, buckets):
    """Prometheus's histogram_quantile over cumulative (le, count) pairs."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "")


# ---- the picture -------------------------------------------------------------

def render(data, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    board = json.load(open(DASHBOARD))
    ev = Evaluator(data)
    times = [s["t"] for s in data["scrapes"]]
    panels = [p for p in board["panels"]]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_h = 0.42  # inches per grid row
    fig = plt.figure(figsize=(18, bottom * unit_h))
    fig.suptitle(f"{board['title']}: examples/metrics.rs, {len(times)} s scraped every second "
                 "(faults: " + "; ".join(f"{e['what']} at {e['t']:.0f} s" for e in data["faults"])
                 + ")", fontsize=11, y=0.997)

    def seconds(v, _):
        if v == 0 or not math.isfinite(v):
            return "0"
        for scale, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(v) >= scale:
                return f"{v / scale:g} {name}"
        return f"{v / 1e-6:.2g} µs"

    for p in panels:
        g = p["gridPos"]
        x0, w = g["x"] / 24, g["w"] / 24
        top = 1 - g["y"] / bottom
        h = g["h"] / bottom
        if p["type"] == "row":
            fig.text(x0 + 0.005, top - h * 0.55, p["title"], fontsize=13, weight="bold")
            continue
        pad = 0.07 if p["type"] == "state-timeline" else 0.035 * w + 0.012
        ax = fig.add_axes([x0 + pad, top - h + 0.022 / (bottom * unit_h / 10),
                           w - pad - 0.008, h - 0.05 / (bottom * unit_h / 10)])
        ax.set_title(p["title"], fontsize=10, loc="left")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        lines = {}
        for target in p.get("targets", []):
            tree = Parser(target["expr"]).expr()
            for t in times:
                for k, v in ev.eval(tree, t).items():
                    name = legend(target.get("legendFormat"), dict(k))
                    lines.setdefault(name, ([], []))
                    lines[name][0].append(t)
                    lines[name][1].append(v)
        if p["type"] != "state-timeline":
            lines = {n: tv for n, tv in lines.items() if any(v != 0 for v in tv[1])}
        if p["type"] == "state-timeline":
            names = sorted(lines)
            for row, name in enumerate(names):
                ts, vs = lines[name]
                for (a, v), b in zip(zip(ts, vs), ts[1:] + [ts[-1] + 1]):
                    ax.barh(row, b - a, left=a, color="#56a64b" if v >= 1 else "#e02f44",
                            height=0.7)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.set_xlim(0, times[-1])
        else:
            for name, (ts, vs) in sorted(lines.items()):
                ax.plot(ts, vs, label=name, linewidth=1.2)
            if unit == "s":
                ax.yaxis.set_major_formatter(FuncFormatter(seconds))
            elif unit == "ops":
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}/s"))
            ax.set_ylim(bottom=0)
            ax.set_xlim(0, times[-1])
            if lines:
                ax.legend(fontsize=7, loc="upper left", ncol=2 if len(lines) > 4 else 1,
                          framealpha=0.7)
            else:
                ax.text(0.5, 0.5, "0 all along", transform=ax.transAxes, ha="center",
                        color="gray")
        for e in data["faults"]:
            ax.axvline(e["t"], color="gray", linestyle=":", linewidth=0.8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("s", fontsize=7, labelpad=0)
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--secs", type=int, default=60, help="how long the example runs")
    ap.add_argument("--from", dest="source", help="render these scrapes instead of running")
    ap.add_argument("--scrapes", default=os.path.join(ROOT, "target", "dashboard-scrapes.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "dashboard.png"))
    args = ap.parse_args()
    if not args.source:
        for tool in ("redis-server", "redis-cli", "cargo"):
            if not shutil.which(tool):
                sys.exit(f"{tool} not found")
        os.makedirs(os.path.dirname(args.scrapes), exist_ok=True)
        args.source = run(args.secs, args.scrapes)
    render(json.load(open(args.source)), args.out)


if __name__ == "__main__":
    main()
