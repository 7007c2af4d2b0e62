// The Shardwise status page: polls the status route and draws tables and SVG plots.
// No framework, no build step. Every server string reaches the DOM through textContent or
// setAttribute, never through HTML parsing: tags, addresses and names are hostile input.
"use strict";

(function () {
  const KIND = document.body.dataset.kind === "worker" ? "worker" : "dispatcher";
  const SOURCE = KIND === "worker" ? "/v1/worker/status" : "/v1/status";
  const TOKEN_KEY = "shardwise.token";
  const HISTORY = 120; // samples kept per plot (about two minutes)
  const PERIOD_MS = 1000;
  const MAX_BACKOFF_MS = 30000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2e90fa", "#f79009", "#12b76a", "#7a5af8", "#d92d20", "#0e9384", "#ee46bc", "#667085"];

  const $ = (id) => document.getElementById(id);
  let delay = PERIOD_MS;
  let timer = null;
  let inFlight = false;
  let lastOk = 0;
  const splitHistory = new Map(); // iteration id -> [{t, acknowledged, leased, requeued}]
  const rateHistory = []; // [{t, total, byRoute: Map}]
  let lastCounts = null; // {t, total, byRoute: Map}

  // ---- DOM helpers -------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children) append(e, c);
    return e;
  }

  function append(parent, c) {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) { c.forEach((x) => append(parent, x)); return; }
    parent.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function card(id, title, count, ...body) {
    const h = el("h2", {}, title, " ", count === null ? null : el("span", { class: "count" }, count));
    return el("section", { class: "card", id }, h, ...body);
  }

  function table(headers, rows, empty) {
    if (rows.length === 0) return el("p", { class: "empty" }, empty);
    const head = el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null }, h.label || h)));
    return el("table", {}, el("thead", {}, head), el("tbody", {}, rows));
  }

  function td(value, cls) { return el("td", { class: cls || null }, value); }
  function num(v) { return td(v === null || v === undefined ? "–" : fmtNum(v), "num"); }
  function pill(text, cls) { return el("span", { class: "pill" + (cls ? " " + cls : "") }, text); }

  function fmtNum(n) { return typeof n === "number" ? n.toLocaleString("en-US") : String(n); }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b : b.toFixed(1)) + " " + units[i];
  }
  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return Math.round(ms / 60000) + " min";
    return (ms / 3600000).toFixed(1) + " h";
  }
  function fmtMicros(us) {
    if (us === null || us === undefined) return "–";
    return us < 1000 ? us + " µs" : (us / 1000).toFixed(1) + " ms";
  }
  function capped(shown, total) {
    return total > shown ? el("p", { class: "capped" }, "showing " + fmtNum(shown) + " of " + fmtNum(total)) : null;
  }

  // ---- plots -------------------------------------------------------------------------

  // series: [{label, points: [[t, v], ...]}]; draws lines over the shared time range.
  function plot(id, series, unit) {
    const W = 600, H = 150, L = 44, R = 8, T = 8, B = 18;
    const all = series.flatMap((s) => s.points);
    const root = svg("svg", { class: "plot", id, viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
    root.appendChild(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    root.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
    if (all.length < 2) {
      root.appendChild(svg("text", { x: L + 8, y: H / 2 }, "collecting samples…"));
      return root;
    }
    const t0 = Math.min(...all.map((p) => p[0]));
    const t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
    const vmax = Math.max(1, ...all.map((p) => p[1]));
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => H - B - (v / vmax) * (H - T - B);
    root.appendChild(svg("text", { x: 2, y: T + 8 }, fmtShort(vmax) + (unit || "")));
    root.appendChild(svg("text", { x: 2, y: H - B }, "0"));
    root.appendChild(svg("text", { x: L, y: H - 4 }, "-" + Math.round((t1 - t0) / 1000) + " s"));
    root.appendChild(svg("text", { x: W - R - 24, y: H - 4 }, "now"));
    series.forEach((s, i) => {
      if (s.points.length === 0) return;
      const pts = s.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
      const line = svg("polyline", { points: pts, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.5 });
      line.appendChild(svg("title", {}, s.label));
      root.appendChild(line);
    });
    return root;
  }

  function fmtShort(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(1);
  }

  // A legend of the plot colours, in series order.
  function legend(labels) {
    return el("div", { class: "legend" }, labels.map((l, i) =>
      el("span", {}, el("i", { "data-color": i }), l)));
  }

  // A legend of the progress bar's parts (coloured by the style sheet).
  function barLegend() {
    return el("div", { class: "legend" },
      [["acknowledged", "acknowledged"], ["leased", "leased (in flight)"], ["requeued", "to re-issue (lost worker)"], ["rest", "remaining"]]
        .map(([cls, label]) => el("span", {}, el("i", { class: cls }), label)));
  }

  function colorLegend(root) {
    // Colors are set here (not inline in markup) so the CSP needs no 'unsafe-inline' styles.
    root.querySelectorAll("i[data-color]").forEach((i) => {
      i.style.background = COLORS[Number(i.dataset.color) % COLORS.length];
    });
  }

  function progressBar(p) {
    const bar = el("div", { class: "bar", title: "acknowledged / leased / waiting to be re-issued / remaining" });
    for (const part of ["acknowledged", "leased", "requeued"]) {
      const s = el("span", { class: part });
      s.style.width = (p.total > 0 ? (100 * p[part]) / p.total : 0) + "%";
      bar.appendChild(s);
    }
    return bar;
  }

  // ---- dispatcher page ---------------------------------------------------------------

  function renderDispatcher(s) {
    const now = Date.now();
    const st = s.state;
    // Header.
    const r = s.replica;
    const summary = $("summary");
    summary.replaceChildren(
      el("span", {}, "mode ", el("b", {}, s.journal.fault_tolerant ? "fault-tolerant" : "in memory")),
      el("span", {}, "replication ", el("b", {}, r.replication), " · ", el("b", { id: "role" }, r.role)),
      el("span", {}, "leader ", el("b", {}, r.leader ? r.leader.url + (r.leader.term ? " (term " + r.leader.term + ")" : "") : "none")),
      el("span", {}, "journal ", el("b", { id: "journal-mode" }, s.journal.mode.replace("_", " ")),
        s.journal.segment_bytes !== null ? [" · ", el("b", {}, fmtBytes(s.journal.segment_bytes)), " segment"] : null,
        " · commit ", el("b", {}, fmtMicros(s.journal.last_commit_micros)),
        " (mean ", fmtMicros(s.journal.mean_commit_micros), ")",
        " · compacted ", el("b", {}, s.journal.last_compaction_ms ? fmtMs(now - s.journal.last_compaction_ms) + " ago" : "never")),
      st ? el("span", {}, "incarnation ", el("b", {}, st.incarnation)) : null,
    );
    const main = $("main");
    const sections = [];
    if (!st) {
      sections.push(card("unavailable", "State", null, el("p", { class: "empty" }, s.state_unavailable || "not serving")));
    } else {
      sections.push(wide(workersCard(st)));
      sections.push(iterationsCard(st, now));
      sections.push(splitPlotCard(st));
      sections.push(rateCard(s, now));
      sections.push(datasetsCard(st));
      sections.push(jobsCard(st));
      sections.push(clientsCard(st));
    }
    if (st === null) sections.push(rateCard(s, now));
    sections.push(clusterCard(s.cluster));
    main.replaceChildren(...sections);
    colorLegend(main);
  }

  function workersCard(st) {
    const rows = st.workers.map((w) => el("tr", { class: w.alive ? null : "lost", "data-worker": w.worker_address },
      td(w.worker_address, "address"),
      td(w.alive ? pill("alive", "ok") : pill("lost", "bad")),
      td(w.kind),
      td(w.tags.map((t) => pill(t))),
      td(w.tasks.join(", ") || "–"),
      td(w.since_heartbeat_ms === null ? "–" : fmtMs(w.since_heartbeat_ms) + " ago", "num")));
    const t = st.totals;
    return card("workers", "Workers", fmtNum(t.workers_alive) + " alive of " + fmtNum(t.workers),
      table(["address", "state", "kind", "tags", "tasks", { label: "last heartbeat", num: true }], rows, "No worker registered."),
      capped(st.workers.length, t.workers));
  }

  function iterationsCard(st, now) {
    const rows = st.iterations.map((i) => {
      let progress = "–";
      if (i.splits) {
        const p = i.splits;
        const h = splitHistory.get(i.iteration_id) || [];
        const last = h[h.length - 1];
        if (!last || last.t < now - 200) h.push({ t: now, all: p.acknowledged_all_epochs });
        while (h.length > HISTORY) h.shift();
        splitHistory.set(i.iteration_id, h);
        progress = el("div", {},
          progressBar(p),
          el("div", { class: "figures" },
            "epoch ", p.repetition, ": ",
            el("span", { class: "acknowledged" }, fmtNum(p.acknowledged)), " acknowledged · ",
            el("span", { class: "leased" }, fmtNum(p.leased)), " leased · ",
            el("span", { class: "requeued" }, fmtNum(p.requeued)), " to re-issue · ",
            el("span", { class: "remaining" }, fmtNum(p.remaining)), " remaining of ", fmtNum(p.total),
            " · ", el("span", { class: "reissued" }, fmtNum(p.reissued)), " re-issued"));
      } else if (i.tf_splits) {
        progress = el("div", { class: "figures" }, i.tf_splits.map((c, k) =>
          el("div", {}, "provider " + k + ": epoch " + c.repetition + ", " + fmtNum(c.handed_out) + " handed out")));
      }
      return el("tr", { "data-iteration": i.iteration_id },
        td(i.iteration_id, "num"),
        td([i.job_name, " (", i.job_id, ")"]),
        num(i.repetition),
        num(i.num_clients),
        td(i.garbage_collected ? pill("collected") : i.finished ? pill("finished", "ok") : pill("running")),
        td(i.tasks.join(", ") || "–"),
        td(progress));
    });
    return wide(card("iterations", "Iterations", fmtNum(st.totals.iterations_open) + " open of " + fmtNum(st.totals.iterations),
      barLegend(),
      table([{ label: "id", num: true }, "job", { label: "repetition", num: true }, { label: "clients", num: true }, "state", "tasks", "split progress (DYNAMIC)"],
        rows, "No iteration."),
      capped(st.iterations.length, st.totals.iterations)));
  }

  function wide(section) {
    section.classList.add("wide");
    return section;
  }

  function splitPlotCard(st) {
    const ids = st.iterations.filter((i) => i.splits && !i.garbage_collected).slice(0, COLORS.length).map((i) => i.iteration_id);
    for (const k of splitHistory.keys()) if (!st.iterations.some((i) => i.iteration_id === k)) splitHistory.delete(k);
    const series = ids.map((id) => ({
      label: "iteration " + id + " acknowledged splits",
      points: (splitHistory.get(id) || []).map((p) => [p.t, p.all]),
    }));
    return card("split-plot", "Split progress", "acknowledged splits, every epoch",
      legend(ids.map((id) => "iteration " + id)), plot("split-svg", series, ""));
  }

  function rateCard(s, now) {
    const byRoute = new Map(s.routes.map((r) => [r.method + " " + r.route, r.requests]));
    const total = s.routes.reduce((a, r) => a + r.requests, 0);
    if (lastCounts && now > lastCounts.t) {
      const dt = (now - lastCounts.t) / 1000;
      const rates = new Map();
      for (const [k, v] of byRoute) rates.set(k, Math.max(0, v - (lastCounts.byRoute.get(k) || 0)) / dt);
      rateHistory.push({ t: now, total: Math.max(0, total - lastCounts.total) / dt, rates });
      while (rateHistory.length > HISTORY) rateHistory.shift();
    }
    lastCounts = { t: now, total, byRoute };
    // The busiest routes over the window, and the total.
    const sums = new Map();
    for (const h of rateHistory) for (const [k, v] of h.rates) sums.set(k, (sums.get(k) || 0) + v);
    const top = [...sums.entries()].filter((e) => e[1] > 0).sort((a, b) => b[1] - a[1]).slice(0, 5).map((e) => e[0]);
    const series = [{ label: "total", points: rateHistory.map((h) => [h.t, h.total]) }]
      .concat(top.map((k) => ({ label: k, points: rateHistory.map((h) => [h.t, h.rates.get(k) || 0]) })));
    const current = rateHistory.length ? rateHistory[rateHistory.length - 1].total : 0;
    return card("rate", "Request rate", current.toFixed(1) + " req/s (this page's polls included)",
      legend(series.map((x) => x.label)), plot("rate-svg", series, "/s"));
  }

  function datasetsCard(st) {
    const rows = st.datasets.map((d) => el("tr", {}, td(d.dataset_id), td(d.kind), td(el("code", {}, d.summary))));
    return card("datasets", "Datasets", fmtNum(st.totals.datasets),
      table(["id", "kind", "definition"], rows, "No dataset."), capped(st.datasets.length, st.totals.datasets));
  }

  function jobsCard(st) {
    const rows = st.jobs.map((j) => el("tr", {},
      td(j.job_id, "num"), td(j.job_name), td(j.dataset_id), td(j.sharding_policy),
      num(j.num_consumers), num(j.split_size)));
    return card("jobs", "Jobs", fmtNum(st.totals.jobs),
      table([{ label: "id", num: true }, "name", "dataset", "sharding", { label: "consumers", num: true }, { label: "split size", num: true }], rows, "No job."),
      capped(st.jobs.length, st.totals.jobs));
  }

  function clientsCard(st) {
    const rows = st.clients.map((c) => el("tr", {}, td(c.client_id, "num"), td(c.iteration_id, "num"), num(c.consumer_index)));
    return card("clients", "Clients", fmtNum(st.totals.clients),
      table([{ label: "id", num: true }, { label: "iteration", num: true }, { label: "consumer", num: true }], rows, "No client lease."),
      capped(st.clients.length, st.totals.clients));
  }

  function clusterCard(c) {
    if (!c) return card("cluster", "Cluster", null, el("p", { class: "empty" }, "No --cluster-config."));
    const state = c.error ? pill("unknown", "bad") : c.stale ? pill("stale " + fmtMs(c.stale_for_ms), "bad") : pill(c.live ? "live" : "static", "ok");
    const rows = c.members.map((m) => el("tr", {}, td(m.job), num(m.index), td(m.address)));
    return card("cluster", "Cluster", fmtNum(c.total_members) + " members",
      el("p", {}, state, " version " + c.version + " · changed " + fmtMs(c.since_change_ms) + " ago"),
      c.error ? el("p", { class: "empty" }, c.error) : null,
      c.members_hidden
        ? el("p", { class: "empty" }, "Members are not shown to a monitor token (an admin token shows them).")
        : table(["job", { label: "index", num: true }, "address"], rows, "No member."),
      c.members_hidden ? null : capped(c.members.length, c.total_members));
  }

  // ---- worker page -------------------------------------------------------------------

  const servedHistory = [];
  let lastServed = null;

  function renderWorker(s) {
    const now = Date.now();
    $("title").textContent = "Shardwise worker";
    $("summary").replaceChildren(
      el("span", {}, "address ", el("b", { id: "worker-address" }, s.worker_address)),
      el("span", {}, "dispatcher ", el("b", {}, s.dispatcher)),
      el("span", {}, "tags ", s.tags.length ? s.tags.map((t) => pill(t)) : "none"),
      s.dispatcher_incarnation ? el("span", {}, "incarnation ", el("b", {}, s.dispatcher_incarnation)) : null);
    const served = s.tasks.reduce((a, t) => a + t.elements_served, 0);
    const produced = s.tasks.reduce((a, t) => a + t.elements_produced, 0);
    if (lastServed && now > lastServed.t) {
      const dt = (now - lastServed.t) / 1000;
      servedHistory.push({ t: now, served: Math.max(0, served - lastServed.served) / dt, produced: Math.max(0, produced - lastServed.produced) / dt });
      while (servedHistory.length > HISTORY) servedHistory.shift();
    }
    lastServed = { t: now, served, produced };
    const rows = s.tasks.map((t) => {
      const fill = el("div", { class: "bar", title: "buffer fill" });
      const part = el("span", { class: "acknowledged" });
      part.style.width = (t.buffer_capacity > 0 ? Math.min(100, (100 * t.buffered_elements) / t.buffer_capacity) : 0) + "%";
      fill.appendChild(part);
      return el("tr", { "data-task": t.task_id },
        td(t.task_id, "num"), td(t.iteration_id, "num"), td(t.dataset_id), td(t.sharding_policy),
        td(pill(t.state, t.state === "failed" ? "bad" : t.state === "finished" ? "ok" : null)),
        num(t.elements_produced), num(t.elements_served),
        td([fill, el("div", { class: "figures" }, fmtNum(t.buffered_elements) + " / " + fmtNum(t.buffer_capacity) + " elements · " + fmtBytes(t.buffered_bytes))]),
        num(t.splits_held));
    });
    const series = [
      { label: "served/s", points: servedHistory.map((h) => [h.t, h.served]) },
      { label: "produced/s", points: servedHistory.map((h) => [h.t, h.produced]) },
    ];
    const main = $("main");
    main.replaceChildren(
      // Nine columns: the whole row, so the table fits at common widths without scrolling.
      wide(card("tasks", "Tasks", fmtNum(s.tasks.length),
        table([{ label: "id", num: true }, { label: "iteration", num: true }, "dataset", "sharding", "state",
          { label: "produced", num: true }, { label: "served", num: true }, "buffer", { label: "splits held", num: true }],
        rows, "No task."))),
      card("rate", "Elements", "per second", legend(series.map((x) => x.label)), plot("rate-svg", series, "/s")));
    colorLegend(main);
  }

  // ---- polling and the token ---------------------------------------------------------

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  function showAuth(message) {
    $("auth").hidden = false;
    $("auth-message").textContent = message;
    $("token").value = "";
    $("token").focus();
  }

  function setConn(text, error) {
    const c = $("conn");
    c.textContent = text;
    c.classList.toggle("error", !!error);
  }

  async function poll() {
    timer = null;
    if (document.hidden || inFlight) return;
    inFlight = true;
    const headers = { Accept: "application/json" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    try {
      const res = await fetch(SOURCE, { headers, cache: "no-store", redirect: "follow" });
      if (res.status === 401 || res.status === 403) {
        const detail = await problemDetail(res);
        showAuth((res.status === 401 ? "A token is needed: " : "This token may not read the status: ") + detail);
        setConn("waiting for a token", true);
        inFlight = false;
        return; // polling resumes when a token is given
      }
      if (!res.ok) throw new Error(res.status + " " + (await problemDetail(res)));
      const body = await res.json();
      $("auth").hidden = true;
      if (KIND === "worker") renderWorker(body); else renderDispatcher(body);
      lastOk = Date.now();
      delay = PERIOD_MS;
      setConn("updated " + new Date(lastOk).toLocaleTimeString());
    } catch (e) {
      delay = Math.min(MAX_BACKOFF_MS, delay * 2);
      setConn("cannot reach " + SOURCE + " (" + (e && e.message ? e.message : e) + "); retrying in " + Math.round(delay / 1000) + " s", true);
    }
    inFlight = false;
    schedule();
  }

  async function problemDetail(res) {
    try {
      const p = await res.json();
      return typeof p.detail === "string" ? p.detail : res.statusText;
    } catch (_) {
      return res.statusText;
    }
  }

  function schedule() {
    if (timer === null && !document.hidden) timer = setTimeout(poll, delay);
  }

  function useToken() {
    const v = $("token").value.trim();
    if (!v) return;
    sessionStorage.setItem(TOKEN_KEY, v);
    $("auth").hidden = true;
    setConn("trying the token…");
    delay = PERIOD_MS;
    if (timer !== null) { clearTimeout(timer); timer = null; }
    poll();
  }

  $("token-save").addEventListener("click", useToken);
  $("token").addEventListener("keydown", (e) => { if (e.key === "Enter") useToken(); });
  $("token-forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showAuth("Token forgotten."); });
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      if (timer !== null) { clearTimeout(timer); timer = null; }
    } else {
      delay = PERIOD_MS;
      schedule();
    }
  });
  $("source").textContent = SOURCE;
  if (KIND === "worker") $("title").textContent = "Shardwise worker";
  poll();
})();
