// charts.js: small inline SVG charts drawn from the agent's own numbers
// (GET /v1/stats). No library: bars and a step line are all it needs.

const NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const W = 360, H = 140, PAD_B = 26, PAD_T = 8, PAD_R = 6;

// TICK_CHAR is the widest a tick label's character is drawn (the 9px
// tick font, DejaVu Sans' "m" and digits): labels are placed from their
// length before the chart is in the page, where they cannot be measured.
// The browser tests measure what was drawn: no label leaves its chart
// and no two overlap.
const TICK_CHAR = 6;
const textWidth = (s) => String(s).length * TICK_CHAR;

function frame(title, summary) {
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}: ${summary}`, class: "chart"});
  svg.appendChild(svgEl("title", {}, `${title}: ${summary}`));
  return svg;
}

// axis draws the axes and returns the left padding: wide enough for the
// largest value's label (a fixed 30 clipped "10000" to "000").
function axis(svg, maxY) {
  const padL = Math.max(24, textWidth(maxY) + 8);
  const y0 = H - PAD_B;
  svg.appendChild(svgEl("line", {x1: padL, y1: y0, x2: W - PAD_R, y2: y0, class: "axis"}));
  svg.appendChild(svgEl("line", {x1: padL, y1: PAD_T, x2: padL, y2: y0, class: "axis"}));
  svg.appendChild(svgEl("text", {x: padL - 4, y: PAD_T + 8, "text-anchor": "end", class: "tick"}, String(maxY)));
  svg.appendChild(svgEl("text", {x: padL - 4, y: y0, "text-anchor": "end", class: "tick"}, "0"));
  return padL;
}

// ROWS are the baselines of the x labels: one row, or two staggered.
const ROW1 = H - 14, ROW2 = H - 3;

// xLabel draws label under the span [x, x + w]: the first label starts at
// its span's left edge and the last ends at its span's right edge, so the
// chart's frame clips neither ("06:29 P"); the others are centred.
function xLabel(svg, label, x, w, i, n, y) {
  const [anchor, at] = i === 0 && n > 1 ? ["start", x] : i === n - 1 && n > 1 ? ["end", x + w] : ["middle", x + w / 2];
  svg.appendChild(svgEl("text", {x: at, y, "text-anchor": anchor, class: "tick"}, label));
}

// barChart draws one bar per value. Without everyLabel only the first and
// last bars are labelled; with it every bar is, on one row when the
// labels fit their bars, on two staggered rows when they fit two bars
// ("< 100ms< 500ms" ran together on one), else every k-th bar.
export function barChart(title, labels, values, {everyLabel = false} = {}) {
  const maxY = Math.max(1, ...values);
  const total = values.reduce((a, b) => a + b, 0);
  const svg = frame(title, `${total} in total, at most ${maxY} in one bar`);
  const padL = axis(svg, maxY);
  const n = values.length || 1;
  const bw = (W - padL - PAD_R) / n;
  const y0 = H - PAD_B;
  values.forEach((v, i) => {
    const h = (v / maxY) * (y0 - PAD_T);
    const x = padL + i * bw;
    const r = svgEl("rect", {x: x + 1, y: y0 - h, width: Math.max(1, bw - 2), height: h, class: "bar"});
    r.appendChild(svgEl("title", {}, `${labels[i]}: ${v}`));
    svg.appendChild(r);
  });
  const gap = 6;
  const widest = Math.max(0, ...labels.map(textWidth));
  let shown = [...new Set([0, n - 1])];
  let rows = 1;
  if (everyLabel && widest + gap <= bw) {
    shown = labels.map((_, i) => i);
  } else if (everyLabel) {
    // Two rows: labels on one row are two bars apart, k bars when even
    // that is too narrow; the last bar keeps its label.
    rows = 2;
    const k = widest + gap <= 2 * bw ? 1 : Math.ceil((widest + gap) / (2 * bw));
    shown = labels.map((_, i) => i).filter((i) => i % k === 0 || i === n - 1);
  } else if (n > 1 && textWidth(labels[0]) + textWidth(labels[n - 1]) + gap > n * bw) {
    shown = [n - 1];
  }
  shown.forEach((i, j) => xLabel(svg, labels[i], padL + i * bw, bw, i, n, rows === 2 && j % 2 ? ROW2 : ROW1));
  return svg;
}

// stepChart draws samples [{t: Date, v: number}] as a step line.
export function stepChart(title, samples) {
  const maxY = Math.max(1, ...samples.map((s) => s.v));
  const last = samples.length ? samples[samples.length - 1].v : 0;
  const svg = frame(title, samples.length ? `now ${last}, at most ${maxY}` : "no samples yet");
  const padL = axis(svg, maxY);
  if (samples.length === 0) {
    svg.appendChild(svgEl("text", {x: (padL + W - PAD_R) / 2, y: H / 2, "text-anchor": "middle", class: "tick"}, "no samples yet"));
    return svg;
  }
  const t0 = samples[0].t.getTime();
  const t1 = Math.max(t0 + 1, samples[samples.length - 1].t.getTime());
  const y0 = H - PAD_B;
  const X = (t) => padL + ((t - t0) / (t1 - t0)) * (W - padL - PAD_R);
  const Y = (v) => y0 - (v / maxY) * (y0 - PAD_T);
  let d = `M ${X(t0)} ${Y(samples[0].v)}`;
  for (const s of samples.slice(1)) {
    d += ` H ${X(s.t.getTime())} V ${Y(s.v)}`;
  }
  svg.appendChild(svgEl("path", {d, class: "line"}));
  const fmt = (t) => new Date(t).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
  // One label when both ends read the same minute.
  if (fmt(t0) !== fmt(t1)) xLabel(svg, fmt(t0), padL, 0, 0, 2, ROW1);
  xLabel(svg, fmt(t1), padL, W - PAD_R - padL, 1, 2, ROW1);
  return svg;
}
