// The status page: asks /api/overview every few seconds and draws it.
// Every value from the data goes into the page as text (textContent), never as HTML: table
// names, errors and samples come from Kafka messages that anyone who can produce may shape.
"use strict";

(() => {
  const key = new URLSearchParams(window.location.search).get("code");
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let every = 5;

  function cell(row, text, opts = {}) {
    const td = document.createElement(opts.header ? "th" : "td");
    if (opts.header) td.scope = "row";
    if (opts.cls) td.className = opts.cls;
    if (opts.field) td.dataset.field = opts.field;
    if (opts.node) td.appendChild(opts.node); else td.textContent = text === null || text === undefined ? "–" : String(text);
    row.appendChild(td);
    return td;
  }

  function when(iso) {
    if (!iso) return null;
    const node = document.createElement("time");
    node.dateTime = iso;
    node.textContent = new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace(/Z$/, " UTC");
    return node;
  }

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    const s = Math.max(0, value);
    if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    if (s < 7200) return `${(s / 60).toFixed(0)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  function number(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
  }

  function fill(id, items, draw, empty) {
    const body = $(id).querySelector("tbody");
    body.replaceChildren();
    for (const item of items) body.appendChild(draw(item));
    if (!items.length) {
      const row = document.createElement("tr");
      const td = cell(row, empty);
      td.colSpan = $(id).querySelectorAll("thead th").length;
      body.appendChild(row);
    }
  }

  function table(t) {
    const row = document.createElement("tr");
    row.dataset.table = t.name;
    cell(row, t.name, {header: true, field: "name"});
    cell(row, number(t.rows), {cls: "num", field: "rows"});
    cell(row, t.version, {cls: "num", field: "version"});
    const commit = document.createElement("span");
    if (t.committed_at) commit.append(when(t.committed_at), ` (${t.operation})`); else commit.textContent = "–";
    cell(row, null, {node: commit, field: "committed"});
    cell(row, null, {node: when(t.newest_change) || document.createTextNode("–"), field: "newest"});
    const fresh = cell(row, seconds(t.freshness_s), {cls: "num", field: "freshness"});
    if (t.freshness_s !== null) fresh.dataset.seconds = t.freshness_s;
    cell(row, t.stopped ? `yes: ${t.stopped_error || ""}` : "no", {cls: t.stopped ? "bad" : "ok", field: "stopped"});
    return row;
  }

  function run(r) {
    const row = document.createElement("tr");
    row.dataset.run = r.run_id;
    cell(row, r.function, {header: true, field: "function"});
    cell(row, r.dataflow, {field: "dataflow"});
    cell(row, r.load, {field: "load"});
    cell(row, r.status, {field: "status", cls: r.status === "FAILED" ? "bad" : r.status === "COMPLETED" ? "ok" : ""});
    cell(row, number(r.rows), {cls: "num", field: "rows"});
    const took = cell(row, seconds(r.duration_s), {cls: "num", field: "duration"});
    if (r.duration_s !== null) took.dataset.seconds = r.duration_s;
    cell(row, null, {node: when(r.started_at) || document.createTextNode("–"), field: "started"});
    cell(row, r.error || "", {field: "error"});
    return row;
  }

  function rejected(g) {
    const row = document.createElement("tr");
    row.dataset.table = g.table || "";
    row.dataset.reason = g.error;
    cell(row, g.table || "(not known)", {header: true, field: "table"});
    cell(row, g.error, {field: "reason"});
    cell(row, number(g.rows), {cls: "num", field: "rows"});
    const sample = document.createElement("span");
    const code = document.createElement("code");
    code.textContent = g.sample.value_hex || "(no value)";
    sample.append(`${g.sample.topic} [${g.sample.partition}] @${g.sample.offset}: `, code);
    cell(row, null, {node: sample, field: "sample"});
    return row;
  }

  function topics(data) {
    const box = $("topics");
    box.replaceChildren();
    const to = Date.parse(data.generated_at) / 1000, from = to - 3600;
    if (!data.topics.length) {
      box.textContent = "No topic read yet.";
      return;
    }
    for (const topic of data.topics) {
      const section = document.createElement("section");
      section.dataset.topic = topic.topic;
      const title = document.createElement("h3");
      title.textContent = `${topic.topic}: lag now ${number(topic.lag)}`;
      const grid = document.createElement("div");
      grid.className = "topics-grid";
      for (const [what, field, unit] of [["Lag", "lag", "offsets"], ["Throughput", "rows_per_s", "rows/s"]]) {
        const figure = document.createElement("figure");
        figure.dataset.plot = field;
        const caption = document.createElement("figcaption");
        caption.textContent = `${what} of ${topic.topic} (${unit})`;
        const points = topic.series.map((s) => ({t: s.t, v: s[field]}));
        figure.append(caption, LakePlot.line({points, from, to, title: `${what} of ${topic.topic}`, unit}));
        grid.appendChild(figure);
      }
      section.append(title, grid);
      box.appendChild(section);
    }
  }

  function writer(w) {
    const box = $("writer");
    const badge = document.createElement("span");
    badge.className = `badge ${w.healthy ? "ok" : w.state === "failed" ? "bad" : "warn"}`;
    badge.textContent = w.state;
    box.replaceChildren("Writer: ", badge);
    box.dataset.state = w.state;
    const parts = [];
    if (w.last_batch_id !== null && w.last_batch_id !== undefined) parts.push(`last batch ${w.last_batch_id}`);
    if (w.age_s !== null && w.age_s !== undefined) parts.push(`status written ${seconds(w.age_s)} ago`);
    parts.push(`${w.pending_commits || 0} pending commits`);
    box.append(` — ${parts.join(", ")}`);
    for (const problem of w.problems || []) {
      const p = document.createElement("span");
      p.className = "bad";
      p.textContent = ` Problem: ${problem}`;
      box.append(document.createElement("br"), p);
    }
  }

  function show(data) {
    writer(data.writer);
    fill("tables", data.tables, table, "No table yet.");
    topics(data);
    fill("runs", data.runs, run, "No run recorded in _execution_log.");
    fill("rejected", data.rejected, rejected, "No rejected row.");
    $("updated").textContent = `Updated ${new Date(data.generated_at).toLocaleTimeString("en-GB")}`;
    document.body.dataset.generatedAt = data.generated_at;
    if (data.refresh_s && data.refresh_s !== every) { every = data.refresh_s; $("every").textContent = every; schedule(); }
  }

  function problem(text) {
    const alert = $("alert");
    alert.hidden = !text;
    alert.textContent = text || "";
  }

  async function refresh() {
    try {
      const response = await fetch("/api/overview", {headers: key ? {"x-functions-key": key} : {}, cache: "no-store"});
      if (response.status === 401) {
        problem("Not authorized: open this page with ?code=<function key> in its address, or through a proxy that signs you in.");
        return;
      }
      if (!response.ok) { problem(`The data could not be read (HTTP ${response.status}); retrying.`); return; }
      problem("");
      show(await response.json());
    } catch (error) {
      problem(`The server does not answer (${error.message}); retrying.`);
    }
  }

  function schedule() {
    clearInterval(timer);
    timer = $("auto").checked ? setInterval(refresh, every * 1000) : null;
  }

  $("refresh").addEventListener("click", refresh);
  $("auto").addEventListener("change", schedule);
  schedule();
  refresh();
})();
