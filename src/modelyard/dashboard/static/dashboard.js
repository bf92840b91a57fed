// modelyard dashboard: polls /dashboard/api/* every two seconds and renders the models,
// the call graph (BLS calls and ensemble steps, SVG) and the recent traces (timelines, with
// a model filter and a pause). Plain DOM, no library.
// Everything from the server is set as text (textContent), never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const TRACES_SHOWN = 10;
const TRACES_OPEN = 3;
const SVG_NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function us(value) {
  if (!value) return "–";
  if (value < 1000) return value.toFixed(0) + " µs";
  if (value < 1e6) return (value / 1000).toFixed(value < 1e4 ? 2 : 1) + " ms";
  return (value / 1e6).toFixed(2) + " s";
}

// Decoupled models: time to first response, p50 / p99 (other models answer once: "").
function firstResponse(live) {
  const first = live && live.first_response;
  if (!first) return "";
  return first.requests ? `${us(first.p50_us)} / ${us(first.p99_us)}` : "–";
}

function rate(value) {
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

// -- models -------------------------------------------------------------------------------

function sparkline(series) {
  const box = svg("svg", { class: "spark", viewBox: "0 0 120 22", preserveAspectRatio: "none" });
  const top = Math.max(1, ...series);
  const step = 120 / Math.max(1, series.length - 1);
  const points = series.map((v, i) => `${(i * step).toFixed(1)},${(21 - (v / top) * 20).toFixed(1)}`);
  box.append(svg("polyline", { points: points.join(" ") }));
  const title = svg("title", {});
  title.textContent = `peak ${top} req/s`;
  box.append(title);
  return box;
}

function setAll(selector, text) {
  for (const node of document.querySelectorAll(selector)) node.textContent = text;
}

function renderModels(doc) {
  const server = doc.server;
  document.getElementById("server").textContent =
    `${server.version} · id ${server.name} · Triton protocol ${server.protocol_version}`;
  const body = document.querySelector("#models tbody");
  const rows = [];
  for (const m of doc.models) {
    const live = m.live;
    if (live) {
      setAll(".win-summary", String(live.window_s));
      setAll(".win-series", String(live.series.window_s));
    }
    const state = m.state || "";
    const row = el("tr", { "data-model": m.name, "data-version": m.version || "" });
    const batches = live
      ? Object.entries(live.batches).map(([size, n]) => `${size}: ${n}`).join(", ") || "–"
      : "";
    const errors = live ? String(live.errors) : "";
    const errorsTitle = live ? `${live.errors - live.refused} failed, ${live.refused} refused` : null;
    row.append(
      el("td", { class: "model" }, m.name),
      el("td", { class: "version" }, m.version || ""),
      el("td", { class: "state " + state }, state || "not loaded"),
      el("td", { class: "num rate" }, live ? rate(live.rate) : ""),
      el("td", { class: "num p50" }, live ? us(live.p50_us) : ""),
      el("td", { class: "num p99" }, live ? us(live.p99_us) : ""),
      el("td", { class: "num first" }, firstResponse(live)),
      el("td", { class: "num queue" }, live ? us(live.queue_us) : ""),
      el("td", { class: "batches" }, batches),
      el("td", { class: "num errors" + (live && live.errors ? " errors-nonzero" : ""), title: errorsTitle }, errors),
      el("td", { class: "num total" }, live ? String(live.success + live.fail + live.refused_total) : ""),
      el("td", { class: "spark" }, live ? sparkline(live.series.requests) : ""),
    );
    rows.push(row);
    if (m.replicas) {  // on a Ray cluster: where this version's replicas run
      const where = m.replicas
        .map((r) => `node ${r.node.slice(0, 8)} (${r.ip}) pid ${r.pid}` + (r.queued ? `, ${r.queued} queued` : "") +
          (r.direct ? `, ${r.direct} direct` : ""))
        .join(" · ");
      const count = `${m.replicas.length} replica${m.replicas.length === 1 ? "" : "s"}`;
      const replicas = el("tr", { class: "replicas-row", "data-model": m.name });
      replicas.append(el("td", {}), el("td", { class: "replicas", colspan: "11" }, `${count}: ${where}`));
      rows.push(replicas);
    }
    const onGpus = (m.instances || []).filter((i) => i.kind === "GPU");
    if (onGpus.length) {  // which GPU each instance runs on, and that GPU's memory
      const gpus = new Map((doc.gpus || []).map((g) => [g.index, g]));
      const where = onGpus
        .map((i) => {
          const g = gpus.get(i.device_id);
          const memory = g ? ` (${g.name}, ${(g.memory_total / 2 ** 30).toFixed(0)} GiB)` : "";
          return `${i.name} on GPU ${i.device_id}${memory}`;
        })
        .join(" · ");
      const devices = el("tr", { class: "devices-row", "data-model": m.name });
      devices.append(el("td", {}), el("td", { class: "devices", colspan: "11" }, where));
      rows.push(devices);
    }
    if (m.reason) {
      const reason = el("tr", { class: "reason-row", "data-model": m.name });
      reason.append(el("td", {}), el("td", { class: "reason", colspan: "11" }, m.reason));
      rows.push(reason);
    }
  }
  body.replaceChildren(...rows);
  modelChoices([...new Set(doc.models.map((m) => m.name))].sort());
}

// -- call graph ---------------------------------------------------------------------------

function layers(edges) {
  // Longest path from the callers nobody calls (a cycle stops after as many rounds as nodes).
  const names = [...new Set(edges.flatMap((e) => [e.caller, e.callee]))].sort();
  const depth = Object.fromEntries(names.map((n) => [n, 0]));
  for (let round = 0; round < names.length; round++) {
    let changed = false;
    for (const e of edges) {
      if (e.caller !== e.callee && depth[e.callee] < depth[e.caller] + 1) {
        depth[e.callee] = depth[e.caller] + 1;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return { names, depth };
}

function renderGraph(doc) {
  const edges = doc.edges;
  const box = document.getElementById("graph");
  document.getElementById("graph-empty").hidden = edges.length > 0;
  const { names, depth } = layers(edges);
  const columns = {};
  for (const n of names) (columns[depth[n]] = columns[depth[n]] || []).push(n);
  const ensembles = new Set(edges.filter((e) => e.kind === "ensemble").map((e) => e.caller));
  const nodeW = Math.max(110, ...names.map((n) => n.length * 7.5 + 24));
  const nodeH = 30, colGap = 170, rowGap = 56, arc = 56;
  const pos = {};
  let height = 0;
  for (const [d, list] of Object.entries(columns)) {
    list.forEach((n, i) => {
      pos[n] = { x: 10 + Number(d) * (nodeW + colGap), y: 14 + i * rowGap };
      height = Math.max(height, pos[n].y + nodeH + 14);
    });
  }
  // An edge that skips a column (an ensemble's step to a model another step calls too)
  // arcs below the nodes rather than running through the one between.
  const skips = (e) => depth[e.callee] - depth[e.caller] > 1;
  if (edges.some(skips)) height += arc;
  const width = 20 + Object.keys(columns).length * (nodeW + colGap) - colGap;
  box.setAttribute("viewBox", `0 0 ${Math.max(width, 200)} ${height || 1}`);
  box.style.height = edges.length ? height + "px" : "0";
  box.style.maxWidth = Math.max(width, 200) + "px";
  const defs = svg("defs", {});
  const marker = svg("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
    markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse",
  });
  marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
  defs.append(marker);
  const parts = [defs];
  for (const e of edges) {
    const a = pos[e.caller], b = pos[e.callee];
    const g = svg("g", {
      class: `edge ${e.kind}` + (e.errors ? " failing" : ""),
      "data-caller": e.caller, "data-callee": e.callee, "data-kind": e.kind,
    });
    let d, lx, ly;
    if (e.caller === e.callee) {
      const x = a.x + nodeW / 2, y = a.y;
      d = `M ${x - 12} ${y} C ${x - 30} ${y - 40}, ${x + 30} ${y - 40}, ${x + 12} ${y}`;
      lx = x; ly = y - 30;
    } else if (skips(e)) {
      const x1 = a.x + nodeW / 2, y1 = a.y + nodeH, x2 = b.x + nodeW / 2, y2 = b.y + nodeH;
      const low = Math.max(y1, y2) + arc;
      d = `M ${x1} ${y1} C ${x1} ${low}, ${x2} ${low}, ${x2} ${y2}`;
      lx = (x1 + x2) / 2; ly = Math.max(y1, y2) + arc * 0.75 + 13;  // under the curve's lowest point
    } else {
      const x1 = a.x + nodeW, y1 = a.y + nodeH / 2, x2 = b.x, y2 = b.y + nodeH / 2;
      const bend = Math.max(40, Math.abs(x2 - x1) / 2);
      d = `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`;
      lx = (x1 + x2) / 2; ly = (y1 + y2) / 2 - 6;
    }
    g.append(svg("path", { d, "marker-end": "url(#arrow)" }));
    const label = svg("text", { x: lx, y: ly, "text-anchor": "middle" });
    const what = e.kind === "ensemble" ? "steps" : "calls";
    label.textContent = `${e.calls} ${what} · p50 ${us(e.p50_us)}` + (e.errors ? ` · ${e.errors} err` : "");
    g.append(label);
    parts.push(g);
  }
  for (const n of names) {
    const kind = ensembles.has(n) ? "ensemble" : "model";
    const g = svg("g", {
      class: "node " + kind, "data-model": n, "data-kind": kind,
      transform: `translate(${pos[n].x},${pos[n].y})`,
    });
    g.append(svg("rect", { width: nodeW, height: nodeH }));
    const t = svg("text", { x: nodeW / 2, y: nodeH / 2 + 4, "text-anchor": "middle" });
    t.textContent = n;
    g.append(t);
    parts.push(g);
  }
  box.replaceChildren(...parts);

  const rows = edges.map((e) => {
    const row = el("tr", { "data-caller": e.caller, "data-callee": e.callee, "data-kind": e.kind });
    row.append(
      el("td", { class: "caller" }, e.caller),
      el("td", { class: "callee" }, e.callee),
      el("td", { class: "kind" }, e.kind === "ensemble" ? "ensemble step" : "BLS"),
      el("td", { class: "num calls" }, String(e.calls)),
      el("td", { class: "num errors" + (e.errors ? " errors-nonzero" : "") }, String(e.errors)),
      el("td", { class: "num" }, us(e.mean_us)),
      el("td", { class: "num" }, us(e.p50_us)),
      el("td", { class: "num" }, us(e.p99_us)),
    );
    return row;
  });
  document.querySelector("#edges tbody").replaceChildren(...rows);
  document.getElementById("edges").hidden = edges.length === 0;
}

// -- traces -------------------------------------------------------------------------------

function spanRows(trace) {
  // Depth-first from the root, children by start time.
  const children = {};
  const ids = new Set(trace.spans.map((s) => s.span_id));
  const roots = [];
  for (const s of trace.spans) {
    if (s.parent_id && ids.has(s.parent_id)) (children[s.parent_id] = children[s.parent_id] || []).push(s);
    else roots.push(s);
  }
  const out = [];
  const walk = (s, depth) => {
    out.push([s, depth]);
    for (const c of (children[s.span_id] || []).sort((a, b) => a.start_ns - b.start_ns)) walk(c, depth + 1);
  };
  for (const r of roots.sort((a, b) => a.start_ns - b.start_ns)) walk(r, 0);
  return out;
}

function renderTrace(trace, open) {
  const total = Math.max(1, trace.end_ns - trace.start_ns);
  const when = new Date(trace.start_ns / 1e6).toLocaleTimeString();
  const head = el("div", { class: "trace-head" },
    el("strong", {}, trace.model),
    el("span", {}, when),
    el("span", {}, us((trace.end_ns - trace.start_ns) / 1000)),
    el("span", { class: "id" }, trace.trace_id),
  );
  if (trace.request_id) head.append(el("span", {}, "request " + trace.request_id));
  const box = el("details", { class: "trace", "data-trace-id": trace.trace_id, "data-model": trace.model },
    el("summary", {}, head));
  if (open) box.open = true;
  for (const [s, depth] of spanRows(trace)) {
    const kind = s.name === "compute" ? "compute" : s.model !== trace.model ? "child" : "";
    const left = ((s.start_ns - trace.start_ns) / total) * 100;
    const width = ((s.end_ns - s.start_ns) / total) * 100;
    const name = el("span", { class: "name" }, s.name + (s.model && s.name !== s.model ? ` (${s.model})` : ""));
    name.style.paddingLeft = depth * 0.9 + "em";
    const bar = el("div", { class: "bar" });
    bar.style.left = Math.max(0, left).toFixed(2) + "%";
    bar.style.width = Math.max(0, width).toFixed(2) + "%";
    bar.title = s.events.map((e) => `${e.name} +${us((e.time_ns - s.start_ns) / 1000)}`).join("\n");
    box.append(el("div", { class: "span " + kind, "data-name": s.name, "data-model": s.model },
      name, el("div", { class: "lane" }, bar), el("span", { class: "dur" }, us((s.end_ns - s.start_ns) / 1000))));
  }
  return box;
}

// The traces' controls: a model filter (sent as ?model=) and a pause that stops replacing
// the traces shown. A poll that was under way when the view changed is dropped (``seq``).
const traceView = { paused: false, model: "", seq: 0 };

function modelChoices(names) {
  const select = document.getElementById("trace-model");
  const have = [...select.options].slice(1).map((o) => o.value);
  if (traceView.model && !names.includes(traceView.model)) names = [...names, traceView.model];
  if (have.join("\n") === names.join("\n")) return;
  const options = names.map((n) => el("option", { value: n }, n));
  select.replaceChildren(select.options[0], ...options);
  select.value = traceView.model;
}

async function loadTraces(force) {
  if (traceView.paused && !force) return;
  const seq = ++traceView.seq;
  const query = traceView.model ? "&model=" + encodeURIComponent(traceView.model) : "";
  const doc = await getJSON(`api/traces?limit=${TRACES_SHOWN}${query}`);
  if (seq === traceView.seq) renderTraces(doc);
}

function setPaused(paused) {
  traceView.paused = paused;
  traceView.seq++;
  const button = document.getElementById("trace-pause");
  button.textContent = paused ? "Resume" : "Pause";
  button.setAttribute("aria-pressed", String(paused));
  document.getElementById("traces-paused").hidden = !paused;
  document.getElementById("traces").classList.toggle("paused-view", paused);
  if (!paused) loadTraces(false).catch(showError);
}

function renderTraces(doc) {
  const off = document.getElementById("tracing-off");
  off.hidden = doc.tracing.on;
  off.textContent = doc.tracing.on ? "" : "Tracing is off. " + doc.tracing.help;
  const shown = doc.traces.slice(0, TRACES_SHOWN);
  document.getElementById("traces-empty").hidden = !doc.tracing.on || shown.length > 0;
  // The newest few open; a trace the user opened or closed keeps that state.
  const was = {};
  for (const d of document.querySelectorAll("#traces details")) was[d.dataset.traceId] = d.open;
  document.getElementById("traces").replaceChildren(
    ...shown.map((t, i) => renderTrace(t, was[t.trace_id] ?? i < TRACES_OPEN)));
  const box = document.getElementById("traces");
  box.dataset.model = doc.model || "";
  box.dataset.loads = String(Number(box.dataset.loads || 0) + 1);
}

// -- polling ------------------------------------------------------------------------------

function showError(err) {
  const status = document.getElementById("status");
  status.textContent = "cannot reach the server: " + err.message;
  status.className = "status error";
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [models, graph] = await Promise.all([getJSON("api/models"), getJSON("api/call_graph")]);
    renderModels(models);
    renderGraph(graph);
    await loadTraces(false);
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.className = "status";
  } catch (err) {
    showError(err);
  }
  // Polls so far (tests wait on it rather than on the clock).
  status.dataset.polls = String(Number(status.dataset.polls || 0) + 1);
  setTimeout(refresh, POLL_MS);
}

document.getElementById("traces-limit").textContent = String(TRACES_SHOWN);
document.getElementById("trace-pause").addEventListener("click", () => setPaused(!traceView.paused));
document.getElementById("trace-model").addEventListener("change", (event) => {
  traceView.model = event.target.value;
  loadTraces(true).catch(showError);  // the new filter applies at once, paused or not
});
refresh();
