// charts.js: small inline SVG charts drawn from the agent's own numbers
// (GET /v1/stats). No library: bars and a step line are all it needs.

const NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const W = 360, H = 140, PAD_L = 30, PAD_B = 22, PAD_T = 8, PAD_R = 6;

function frame(title, summary) {
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}: ${summary}`, class: "chart"});
  svg.appendChild(svgEl("title", {}, `${title}: ${summary}`));
  return svg;
}

function axis(svg, maxY) {
  const y0 = H - PAD_B;
  svg.appendChild(svgEl("line", {x1: PAD_L, y1: y0, x2: W - PAD_R, y2: y0, class: "axis"}));
  svg.appendChild(svgEl("line", {x1: PAD_L, y1: PAD_T, x2: PAD_L, y2: y0, class: "axis"}));
  svg.appendChild(svgEl("text", {x: PAD_L - 4, y: PAD_T + 8, "text-anchor": "end", class: "tick"}, String(maxY)));
  svg.appendChild(svgEl("text", {x: PAD_L - 4, y: y0, "text-anchor": "end", class: "tick"}, "0"));
}

// barChart draws one bar per value; labels are shown under the first,
// last and (when there is room) every bar.
export function barChart(title, labels, values, {everyLabel = false} = {}) {
  const maxY = Math.max(1, ...values);
  const total = values.reduce((a, b) => a + b, 0);
  const svg = frame(title, `${total} in total, at most ${maxY} in one bar`);
  axis(svg, maxY);
  const n = values.length || 1;
  const bw = (W - PAD_L - PAD_R) / n;
  const y0 = H - PAD_B;
  values.forEach((v, i) => {
    const h = (v / maxY) * (y0 - PAD_T);
    const x = PAD_L + i * bw;
    const r = svgEl("rect", {x: x + 1, y: y0 - h, width: Math.max(1, bw - 2), height: h, class: "bar"});
    r.appendChild(svgEl("title", {}, `${labels[i]}: ${v}`));
    svg.appendChild(r);
    if (everyLabel || i === 0 || i === n - 1) {
      svg.appendChild(svgEl("text", {x: x + bw / 2, y: H - 6, "text-anchor": "middle", class: "tick"}, labels[i]));
    }
  });
  return svg;
}

// stepChart draws samples [{t: Date, v: number}] as a step line.
export function stepChart(title, samples) {
  const maxY = Math.max(1, ...samples.map((s) => s.v));
  const last = samples.length ? samples[samples.length - 1].v : 0;
  const svg = frame(title, samples.length ? `now ${last}, at most ${maxY}` : "no samples yet");
  axis(svg, maxY);
  if (samples.length === 0) {
    svg.appendChild(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "tick"}, "no samples yet"));
    return svg;
  }
  const t0 = samples[0].t.getTime();
  const t1 = Math.max(t0 + 1, samples[samples.length - 1].t.getTime());
  const y0 = H - PAD_B;
  const X = (t) => PAD_L + ((t - t0) / (t1 - t0)) * (W - PAD_L - PAD_R);
  const Y = (v) => y0 - (v / maxY) * (y0 - PAD_T);
  let d = `M ${X(t0)} ${Y(samples[0].v)}`;
  for (const s of samples.slice(1)) {
    d += ` H ${X(s.t.getTime())} V ${Y(s.v)}`;
  }
  svg.appendChild(svgEl("path", {d, class: "line"}));
  const fmt = (t) => new Date(t).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
  svg.appendChild(svgEl("text", {x: PAD_L, y: H - 6, "text-anchor": "start", class: "tick"}, fmt(t0)));
  svg.appendChild(svgEl("text", {x: W - PAD_R, y: H - 6, "text-anchor": "end", class: "tick"}, fmt(t1)));
  return svg;
}
