// A line plot in SVG of one series over a time window: no library, no build step.
// LakePlot.line({points: [{t, v}], from, to, title, unit}) returns an <svg> element whose
// aria-label says what a sighted reader sees (now, highest, points), for screen readers.
// The window is the last hour, or less while the history is shorter (its span is labelled).
"use strict";

const LakePlot = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 520, H = 170, LEFT = 56, RIGHT = 12, TOP = 12, BOTTOM = 28;

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function short(value) {
    if (value >= 1e6) return (value / 1e6).toFixed(1) + "M";
    if (value >= 1e4) return (value / 1e3).toFixed(0) + "k";
    if (value >= 100 || Number.isInteger(value)) return String(Math.round(value));
    return value.toFixed(1);
  }

  function ago(seconds) {
    return seconds >= 120 ? `−${Math.round(seconds / 60)} min` : `−${Math.round(seconds)} s`;
  }

  function line({points, from, to, title, unit}) {
    const known = points.filter((p) => p.v !== null && p.v !== undefined);
    if (points.length) from = Math.max(from, Math.min(...points.map((p) => p.t)) - 10);
    const top = Math.max(1, ...known.map((p) => p.v)) * 1.1;
    const x = (t) => LEFT + ((t - from) / Math.max(1, to - from)) * (W - LEFT - RIGHT);
    const y = (v) => TOP + (1 - v / top) * (H - TOP - BOTTOM);
    const now = known.length ? known[known.length - 1].v : null;
    const high = known.length ? Math.max(...known.map((p) => p.v)) : null;
    const label = known.length
      ? `${title}: now ${short(now)} ${unit}, highest ${short(high)} ${unit}, ${known.length} points over the last ${ago(to - from).slice(1)}`
      : `${title}: no data in the last hour`;
    const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": label});
    svg.appendChild(el("title", {}, label));
    for (const v of [0, top / 2.2, top / 1.1]) {
      svg.appendChild(el("line", {class: "grid", x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v)}));
      svg.appendChild(el("text", {x: LEFT - 6, y: y(v) + 4, "text-anchor": "end"}, short(v)));
    }
    svg.appendChild(el("line", {class: "axis", x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM}));
    svg.appendChild(el("line", {class: "axis", x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM}));
    for (const [t, text] of [[from, ago(to - from)], [(from + to) / 2, ago((to - from) / 2)], [to, "now"]]) {
      const anchor = t === from ? "start" : t === to ? "end" : "middle";
      svg.appendChild(el("text", {x: x(t), y: H - 8, "text-anchor": anchor}, text));
    }
    // A gap (no report in a bucket) breaks the line rather than bridging it.
    let d = "", drawing = false;
    for (const p of points) {
      if (p.v === null || p.v === undefined) { drawing = false; continue; }
      d += `${drawing ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)} `;
      drawing = true;
    }
    if (d) svg.appendChild(el("path", {class: "series", d: d.trim()}));
    for (const p of known) {  // a dot per bucket: a line along zero stays visible
      svg.appendChild(el("circle", {class: "dot", cx: x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 2.5}));
    }
    return svg;
  }

  return {line};
})();
