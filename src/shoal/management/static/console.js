// Shoal console: plain JavaScript over the JSON API, polled every 2 s.
// Views: overview (#/), queue (#/queue/NAME), connections (#/connections),
// connection (#/connection/ID), cluster (#/cluster, on a cluster node).
// Text always goes in via textContent.
"use strict";
(() => {
  const POLL_MS = 2000;
  const SVG = "http://www.w3.org/2000/svg";
  const STATES = ["ready", "owned", "draining", "parked"];
  const view = document.getElementById("view");
  const statusDot = document.getElementById("status");
  const meta = document.getElementById("broker-meta");
  const BIG_QUEUE_GROUPS = 20000; // above this, the group table refreshes every 10 s
  let current = null; // {refresh}
  let timer = null;
  let userAction = false; // the next refresh follows something the user did
  // /api/cluster once: null on a single broker (404) or when it cannot be read
  const clusterProbe = fetch("/api/cluster", { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((r) => (r.ok ? r.json() : null), () => null);

  // --- DOM helpers ----------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") el.textContent = String(v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  function s(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }
  const replace = (el, ...kids) => { el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined)); };

  // --- formatting -----------------------------------------------------------
  function num(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(1);
  }
  const rate = (v) => (v === null || v === undefined ? "–" : num(v) + "/s");
  function age(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    const sec = ms / 1000;
    if (sec < 60) return sec.toFixed(1) + " s";
    if (sec < 3600) return (sec / 60).toFixed(1) + " min";
    if (sec < 86400) return (sec / 3600).toFixed(1) + " h";
    return (sec / 86400).toFixed(1) + " d";
  }
  const when = (epochS) => (epochS ? new Date(epochS * 1000).toLocaleString() : "–");
  const enc = encodeURIComponent;

  // --- API ------------------------------------------------------------------
  async function api(path, options) {
    const opts = Object.assign({ credentials: "same-origin", headers: { Accept: "application/json" } }, options || {});
    if (opts.json !== undefined) {
      opts.body = JSON.stringify(opts.json);
      opts.headers = Object.assign({ "Content-Type": "application/json" }, opts.headers);
      delete opts.json;
    }
    const r = await fetch(path, opts);
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const err = new Error(body && body.message ? body.message : r.status + " " + r.statusText);
      err.status = r.status;
      throw err;
    }
    return body;
  }
  function toast(text, bad) {
    const t = h("div", { class: bad ? "toast bad" : "toast", role: "status", text });
    document.body.append(t);
    setTimeout(() => t.remove(), 3500);
  }
  async function act(question, call, done) {
    if (!window.confirm(question)) return;
    userAction = true;
    try {
      const result = await call();
      toast(done(result));
    } catch (e) {
      toast(e.message, true);
    }
    refreshNow();
  }

  // --- widgets --------------------------------------------------------------
  function card(label, value, cls) {
    return h("div", { class: "card" + (cls ? " " + cls : "") }, h("div", { class: "v", text: value }), h("div", { class: "k", text: label }));
  }
  function table(columns, rows, emptyText) {
    // columns: [{label, num, cls, sortKey}], rows: array of <tr>
    const head = h("tr", {}, columns.map((c) => c.th || h("th", { class: c.num ? "num" : null, text: c.label })));
    const body = h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { class: "empty", colspan: columns.length, text: emptyText || "none" })));
    return h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, head), body));
  }
  const td = (text, cls) => h("td", { class: cls || null, text });
  const tdn = (text, cls) => h("td", { class: "num" + (cls ? " " + cls : ""), text });

  function sparkline(values) {
    const w = 110, hgt = 22;
    const svg = s("svg", { class: "spark", viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: "none" });
    if (!values || values.length < 2) return svg;
    const max = Math.max(1, ...values);
    const pts = values.map((v, i) => `${((i / (values.length - 1)) * (w - 2) + 1).toFixed(1)},${(hgt - 2 - (v / max) * (hgt - 4)).toFixed(1)}`);
    svg.append(s("polyline", { points: pts.join(" "), fill: "none", stroke: "#1f6feb", "stroke-width": 1.5 }));
    return svg;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function rateChart(points, nowS) {
    const W = 900, H = 180, L = 46, R = 10, T = 10, B = 22;
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "message rates" });
    const span = 600; // seconds shown
    const t0 = nowS - span;
    const pts = (points || []).filter((p) => p.t >= t0);
    const series = [["enqueue", "#1f6feb"], ["deliver", "#1a9e5a"], ["ack", "#9a6700"]];
    let max = 0;
    for (const p of pts) for (const [k] of series) if (p[k] !== null && p[k] > max) max = p[k];
    max = niceMax(max);
    const x = (t) => L + ((t - t0) / span) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    for (const f of [0, 0.5, 1]) {
      svg.append(s("line", { class: "axis", x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }));
      const label = s("text", { x: L - 6, y: y(max * f) + 4, "text-anchor": "end" });
      label.textContent = num(max * f) + "/s";
      svg.append(label);
    }
    for (const [mins, anchor] of [[10, "start"], [5, "middle"], [0, "end"]]) {
      const label = s("text", { x: x(nowS - mins * 60), y: H - 6, "text-anchor": anchor });
      label.textContent = mins ? `-${mins} min` : "now";
      svg.append(label);
    }
    for (const [key, colour] of series) {
      const line = pts.filter((p) => p[key] !== null).map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`);
      if (line.length > 1) {
        const attrs = { points: line.join(" "), fill: "none", stroke: colour, "stroke-width": 2, "data-series": key };
        if (key === "ack") attrs["stroke-dasharray"] = "5 4";
        svg.append(s("polyline", attrs));
      }
    }
    return h("div", { class: "chart" }, svg,
      h("div", { class: "legend" },
        h("span", {}, h("i", { class: "l-enq" }), "enqueued"),
        h("span", {}, h("i", { class: "l-deq" }), "delivered"),
        h("span", {}, h("i", { class: "l-ack" }), "acknowledged")));
  }

  function settled(promise) {
    return promise.then((v) => ({ ok: true, v }), (e) => ({ ok: false, e }));
  }
  const errorBox = (e) => h("div", { class: "error", text: e.status === 403 ? "Not permitted: " + e.message : e.message });

  // --- views ----------------------------------------------------------------
  function overview() {
    const cards = h("div", { class: "cards", id: "cards" });
    const chart = h("div", { class: "panel", id: "rates" }, h("h2", { text: "Message rates" }), h("div", { class: "body" }));
    const queues = h("div", { class: "panel", id: "queues" }, h("h2", { text: "Queues" }), h("div", { class: "body" }));
    const forwarding = h("div", { class: "panel hidden", id: "forwarding" },
      h("h2", { text: "Cluster forwarding" }),
      h("p", { class: "hint", text: "The broker's own queues: messages waiting to go over the cluster link to the node holding their group." }),
      h("div", { class: "body" }));
    const conns = h("div", { class: "panel", id: "connections" }, h("h2", { text: "Connections" }), h("div", { class: "body" }));
    replace(view, h("h1", { text: "Overview" }), cards, chart, queues, forwarding, conns);
    const body = (panel) => panel.querySelector(".body");

    async function refresh() {
      const [b, hist, qs, cs] = await Promise.all([
        settled(api("/api/broker")), settled(api("/api/history")),
        settled(api("/api/queues")), settled(api("/api/connections")),
      ]);
      if (b.ok) {
        const r = b.v.rates || {};
        replace(cards,
          card("enqueued", rate(r.enqueue)), card("delivered", rate(r.deliver)), card("acknowledged", rate(r.ack)),
          card("waiting", num(b.v.depth)), card("in flight", num(b.v.in_flight)),
          card("connections", num(b.v.connections)), card("consumers", num(b.v.consumers)),
          card("queues", num(qs.ok ? qs.v.queues.filter((q) => !q.internal).length : b.v.queues)));
      } else replace(cards, errorBox(b.e));
      if (hist.ok) replace(body(chart), rateChart(hist.v.points, b.ok ? b.v.time : Date.now() / 1000));
      else replace(body(chart), errorBox(hist.e));
      if (qs.ok) {
        const spark = hist.ok ? hist.v.queues : {};
        const internal = qs.v.queues.filter((q) => q.internal);
        forwarding.classList.toggle("hidden", internal.length === 0);
        replace(body(forwarding), forwardingTable(internal));
        const rows = qs.v.queues.filter((q) => !q.internal).map((q) => h("tr", { "data-queue": q.name },
          h("td", {}, h("a", { href: "#/queue/" + enc(q.name), text: q.name })),
          td(q.type), tdn(num(q.depth)), h("td", {}, sparkline(spark[q.name])),
          tdn(num(q.in_flight)), tdn(num(q.consumers)),
          tdn(rate(q.rates && q.rates.enqueue)), tdn(rate(q.rates && q.rates.deliver)), tdn(rate(q.rates && q.rates.ack)),
          tdn(age(q.oldest_age_ms)), tdn(num(q.groups))));
        replace(body(queues), table([
          { label: "queue" }, { label: "type" }, { label: "waiting", num: true }, { label: "depth (last minutes)" },
          { label: "in flight", num: true }, { label: "consumers", num: true }, { label: "enq/s", num: true },
          { label: "deliver/s", num: true }, { label: "ack/s", num: true }, { label: "oldest", num: true },
          { label: "groups", num: true }], rows, "no queues yet"));
      } else replace(body(queues), errorBox(qs.e));
      if (cs.ok) replace(body(conns), connectionsTable(cs.v.connections));
      else replace(body(conns), errorBox(cs.e));
      if (b.ok) {
        meta.textContent = `shoal ${b.v.version} · up ${age(Math.round(b.v.uptime_s * 1000))}` + (b.v.user ? ` · ${b.v.user}` : "");
      }
    }
    return { refresh };
  }

  function forwardingTable(list) {
    const rows = list.map((q) => h("tr", { "data-queue": q.name },
      td(q.forwards_to, "to"), h("td", {}, h("a", { href: "#/queue/" + enc(q.name), text: q.name })),
      tdn(num(q.depth), "waiting"), tdn(num(q.in_flight), "in-flight"), tdn(rate(q.rates && q.rates.enqueue)),
      tdn(rate(q.rates && q.rates.deliver)), tdn(age(q.oldest_age_ms))));
    return table([{ label: "to node" }, { label: "queue" }, { label: "waiting", num: true }, { label: "unacked by the node", num: true },
      { label: "enq/s", num: true }, { label: "sent/s", num: true }, { label: "oldest", num: true }], rows, "nothing forwarded");
  }

  function connectionsTable(list) {
    const rows = list.map((c) => h("tr", { "data-connection": c.id },
      h("td", {}, h("a", { href: "#/connection/" + c.id, text: String(c.id) })),
      td(c.client_address || "–"), td(c.user || "–"), td(c.client_id || "–", "wrap"),
      td(c.subscriptions.join(", ") || "–", "wrap"), tdn(num(c.unsettled)),
      tdn(c.credit === null ? "∞" : num(c.credit)), tdn(num(c.sent)), td(when(c.connected_at))));
    return table([{ label: "id" }, { label: "client address" }, { label: "user" }, { label: "client id" },
      { label: "subscriptions" }, { label: "unsettled", num: true }, { label: "credit", num: true },
      { label: "sent", num: true }, { label: "connected" }], rows, "no connections");
  }

  function connectionsView() {
    const panel = h("div", { class: "panel" });
    replace(view, h("h1", { text: "Connections" }), panel);
    return {
      async refresh() {
        try { replace(panel, connectionsTable((await api("/api/connections")).connections)); }
        catch (e) { replace(panel, errorBox(e)); }
      },
    };
  }

  function consumersTable(list, showConnection) {
    const rows = list.map((c) => h("tr", { "data-consumer": c.id },
      td(c.id, "consumer wrap"), showConnection ? h("td", {}, h("a", { href: "#/connection/" + c.connection, text: String(c.connection) })) :
        h("td", {}, h("a", { href: "#/queue/" + enc(c.queue), text: c.queue })),
      td(c.client_address || "–"), td(c.user || "–"), td(c.ack_mode || "–"),
      tdn(c.prefetch === null ? "–" : num(c.prefetch)), tdn(c.credit === null ? "∞" : num(c.credit)),
      tdn(num(c.unsettled)), tdn(num(c.delivered)), tdn(num(c.groups)), td(c.active ? "active" : "standby")));
    return table([{ label: "consumer" }, { label: showConnection ? "connection" : "queue" }, { label: "client address" },
      { label: "user" }, { label: "ack" }, { label: "prefetch", num: true }, { label: "credit", num: true },
      { label: "unsettled", num: true }, { label: "delivered", num: true }, { label: "groups", num: true },
      { label: "status" }], rows, "no consumers");
  }

  function queueView(name) {
    const st = { sort: "group", order: "asc", offset: 0, limit: 50, state: "", owner: "", q: "", groupsAt: 0, bindingsAt: 0, bindings: 0 };
    const qpath = "/api/queues/" + enc(name);
    const cards = h("div", { class: "cards" });
    const settings = h("div", { class: "panel" }, h("h2", { text: "Settings in force" }), h("div", { class: "body" }));
    const consumers = h("div", { class: "panel", id: "consumers" }, h("h2", { text: "Consumers" }), h("div", { class: "body" }));
    const groupBody = h("div", { class: "body", id: "group-table" });
    // On a cluster node: which node holds each group, as this node knows (every group it routed).
    const bindingSummary = h("span", { class: "state-summary" });
    const bindingBody = h("div", { class: "body" });
    const bindings = h("div", { class: "bindings hidden", id: "group-bindings" },
      h("h3", {}, "Where the groups live ", bindingSummary), bindingBody);
    const pager = h("div", { class: "pager" });
    const browse = h("div", { class: "body" });
    const err = h("div", {});
    let debounce = null;
    const touched = () => { userAction = true; refreshNow(); };
    const changed = () => { st.offset = 0; clearTimeout(debounce); debounce = setTimeout(touched, 250); };
    const stateSel = h("select", { id: "group-state", "aria-label": "filter by state", onchange: (e) => { st.state = e.target.value; changed(); } },
      h("option", { value: "", text: "all states" }), STATES.map((x) => h("option", { value: x, text: x })));
    const ownerIn = h("input", { id: "group-owner", placeholder: "owner: consumer, connection or none", size: 34, oninput: (e) => { st.owner = e.target.value.trim(); changed(); } });
    const searchIn = h("input", { id: "group-search", placeholder: "group id contains…", size: 22, oninput: (e) => { st.q = e.target.value; changed(); } });
    const toolbar = h("div", { class: "toolbar" },
      stateSel, ownerIn, searchIn, h("span", { class: "grow" }),
      h("button", { class: "reset-all", onclick: () => act(`Reset every group of queue "${name}"? Each group moves to a consumer again once its in-flight messages are settled.`,
        () => api(qpath + "/groups/reset", { method: "POST", json: {} }), (r) => `${r.reset} group(s) reset`) }, "Reset all groups"));
    const actions = h("div", { class: "toolbar" },
      h("button", { class: "purge danger", onclick: () => act(`Purge queue "${name}"? Every waiting message is dropped.`,
        () => api(qpath + "/purge", { method: "POST" }), (r) => `${r.purged} message(s) purged`) }, "Purge"),
      h("button", { class: "delete danger", onclick: () => act(`Delete queue "${name}"? Its consumers are closed and its messages dropped.`,
        () => api(qpath, { method: "DELETE" }).then((r) => { location.hash = "#/"; return r; }), () => "queue deleted") }, "Delete queue"));
    const stateSummary = h("span", { class: "state-summary" });
    replace(view,
      h("h1", { text: name }, h("small", { id: "queue-kind" })), actions, err, cards,
      h("div", { class: "panel", id: "groups" }, h("h2", {}, "Groups ", stateSummary), toolbar, groupBody, pager, bindings),
      consumers, settings,
      h("div", { class: "panel", id: "browse" }, h("h2", { text: "Waiting messages" }),
        h("div", { class: "toolbar" }, h("button", { class: "browse", onclick: () => loadMessages() }, "Browse first 50 (not consumed)")), browse));

    const cols = [["group", "group"], ["owner", "owner"], ["backlog", "backlog", true], ["in_flight", "in flight", true],
      ["oldest_age_ms", "oldest", true], ["state", "state"], ["reassigned", "reassigned", true]];
    // On a cluster node every row names the node holding the group (C10).
    function header(clustered) {
      const th = cols.map(([key, label, isNum]) => {
        const cls = ["sortable", isNum ? "num" : "", st.sort === key ? "sorted-" + st.order : ""].filter(Boolean).join(" ");
        return { th: h("th", { class: cls, "data-sort": key, onclick: () => {
          if (st.sort === key) st.order = st.order === "asc" ? "desc" : "asc";
          else { st.sort = key; st.order = isNum ? "desc" : "asc"; }
          st.offset = 0; touched();
        } }, label) };
      });
      if (clustered) th.splice(2, 0, { th: h("th", { class: "node", title: "the cluster node holding the group", text: "node" }) });
      return th.concat([{ label: "" }]);
    }
    function groupRow(g) {
      const parked = g.state === "parked";
      return h("tr", { "data-group": g.group, class: "state-" + g.state },
        td(g.group, "group"), td(g.owner || "–", "owner"), g.node ? td(g.node, "node") : null,
        tdn(num(g.backlog), "backlog"), tdn(num(g.in_flight), "in-flight"),
        tdn(age(g.oldest_age_ms), "oldest"), h("td", { class: "state" }, h("span", { class: "badge " + g.state, text: g.state })),
        tdn(String(g.reassigned), "reassigned"),
        h("td", { class: "actions" },
          h("button", { class: "reset", title: "free the group; it moves once its in-flight messages are settled",
            onclick: () => act(`Reset group "${g.group}" of queue "${name}"? It moves to a consumer again once its in-flight messages are settled.`,
              () => api(qpath + "/groups/reset", { method: "POST", json: { group: g.group } }), () => `group ${g.group} reset`) }, "Reset"),
          " ",
          parked
            ? h("button", { class: "resume", onclick: () => act(`Resume group "${g.group}"?`,
              () => api(qpath + "/groups/" + enc(g.group) + "/resume", { method: "POST" }), () => `group ${g.group} resumed`) }, "Resume")
            : h("button", { class: "park danger", onclick: () => act(`Park group "${g.group}"? Nothing of it is delivered until it is resumed.`,
              () => api(qpath + "/groups/" + enc(g.group) + "/park", { method: "POST" }), () => `group ${g.group} parked`) }, "Park")));
    }
    async function loadMessages() {
      try {
        const r = await api(qpath + "/messages?limit=50");
        const rows = r.messages.map((m) => h("tr", { "data-message": m.id },
          tdn(String(m.id)), td(m.group || "–"), td(when(m.timestamp / 1000)), tdn(String(m.delivery_count)),
          td(Object.entries(m.headers).map(([k, v]) => k + ":" + v).join("  ")),
          h("td", { class: "msg-body", title: m.body_encoding, text: m.body_encoding === "base64" ? "(base64) " + m.body : m.body })));
        replace(browse, table([{ label: "id", num: true }, { label: "group" }, { label: "accepted" }, { label: "deliveries", num: true },
          { label: "headers" }, { label: "body" }], rows, "no waiting messages"));
      } catch (e) { replace(browse, errorBox(e)); }
    }

    function renderLog(info) {
      replace(err);
      document.getElementById("queue-kind").textContent = `log · ${info.log_buckets} buckets`;
      replace(cards, card("lag", num(info.lag)), card("records", num(info.enqueued)), card("bytes", num(info.bytes)));
      toolbar.classList.add("hidden"); pager.classList.add("hidden");
      for (const b of actions.querySelectorAll("button.purge")) b.classList.add("hidden");
      document.querySelector("#groups h2").firstChild.textContent = "Buckets ";
      const rows = (info.buckets || []).map((b) => h("tr", { "data-bucket": b.bucket },
        tdn(String(b.bucket)), tdn(num(b.start)), tdn(num(b.end)), tdn(num(b.committed)), tdn(num(b.lag), "lag"), tdn(num(b.bytes))));
      replace(groupBody, table([{ label: "bucket", num: true }, { label: "start", num: true }, { label: "end", num: true },
        { label: "committed", num: true }, { label: "lag", num: true }, { label: "bytes", num: true }], rows, "no buckets"));
      const dl = h("dl", { class: "settings" });
      for (const [k, v] of Object.entries(info.settings || {})) dl.append(h("dt", { text: k }), h("dd", { text: v === null ? "–" : String(v) }));
      replace(settings.querySelector(".body"), dl);
      replace(consumers.querySelector(".body"), h("div", { class: "empty", text: "log queues are read by offset (Spark connector), not by subscription" }));
    }

    function renderBindings(b, cluster) {
      const consoles = {};
      for (const n of (cluster && cluster.nodes) || []) if (n.http && !n.self) consoles[n.node] = `http://${n.http}/#/queue/${enc(name)}`;
      replace(bindingSummary, Object.entries(b.nodes).map(([n, count]) => h("span", { class: "badge node", "data-node-count": n, text: `${n}: ${num(count)}` })));
      const rows = b.bindings.map((x) => h("tr", { "data-binding": x.group },
        td(x.group, "group"),
        h("td", { class: "node" }, consoles[x.node] ? h("a", { href: consoles[x.node], title: "that node's console", text: x.node }) : (x.node === b.node ? x.node + " (this node)" : x.node))));
      const more = b.total > b.bindings.length ? h("div", { class: "pager", text: `first ${b.bindings.length} of ${num(b.total)}: search narrows them` }) : null;
      replace(bindingBody, table([{ label: "group" }, { label: "node" }], rows, st.q ? "no groups match" : "no groups routed through this node yet"), more);
    }

    async function refresh() {
      const params = new URLSearchParams({ sort: st.sort, order: st.order, limit: st.limit, offset: st.offset });
      if (st.state) params.set("state", st.state);
      if (st.owner) params.set("owner", st.owner);
      if (st.q) params.set("q", st.q);
      const q = await settled(api(qpath));
      if (!q.ok) { replace(err, errorBox(q.e)); return; }
      if (q.v.type === "log") { renderLog(q.v); return; }
      // Listing groups costs the broker time per group: poll huge queues less often.
      const forced = userAction;
      userAction = false;
      const big = (q.v.groups || 0) > BIG_QUEUE_GROUPS;
      const due = forced || !big || Date.now() - st.groupsAt > 10000;
      const gs = due ? await settled(api(qpath + "/groups?" + params)) : null;
      if (due) st.groupsAt = Date.now();
      // The same for the bindings a cluster node knows (a producer's node may know many).
      const cluster = await clusterProbe;
      const bindingsDue = cluster && (forced || st.bindings <= BIG_QUEUE_GROUPS || Date.now() - st.bindingsAt > 10000);
      const bs = bindingsDue ? await settled(api(qpath + "/bindings?" + new URLSearchParams({ limit: 50, q: st.q }))) : null;
      if (bindingsDue) st.bindingsAt = Date.now();
      replace(err);
      const info = q.v;
      document.getElementById("queue-kind").textContent = (info.internal ? `internal · forwards to node ${info.forwards_to} · ` : "") +
        `${info.type} · ${info.routing}` + (info.address !== info.name ? ` · address ${info.address}` : "");
      const r = info.rates || {};
      const gsCounts = info.group_states || {};
      replace(cards, card("waiting", num(info.depth)), card("in flight", num(info.in_flight)), card("consumers", num(info.consumers)),
        card("enqueued", rate(r.enqueue)), card("delivered", rate(r.deliver)), card("acknowledged", rate(r.ack)),
        card("oldest waiting", age(info.oldest_age_ms)), card("redelivered", num(info.redelivered)),
        card("dead-lettered", num(info.dead_lettered)));
      replace(stateSummary, STATES.map((x) => h("span", { class: "badge " + x, "data-state-count": x, text: `${num(gsCounts[x] || 0)} ${x}` })));
      const dl = h("dl", { class: "settings" });
      for (const [k, v] of Object.entries(info.settings || {})) dl.append(h("dt", { text: k }), h("dd", { text: v === null ? "–" : String(v) }));
      replace(settings.querySelector(".body"), dl);
      replace(consumers.querySelector(".body"), consumersTable(info.consumer_list || [], true));
      if (bs !== null) {
        bindings.classList.remove("hidden");
        if (bs.ok) { st.bindings = Object.values(bs.v.nodes).reduce((a, n) => a + n, 0); renderBindings(bs.v, cluster); } else replace(bindingBody, errorBox(bs.e));
      }
      if (gs === null) return; // not due: keep the table as it is
      if (!gs.ok) {
        replace(groupBody, errorBox(gs.e));
        return;
      }
      const g = gs.v;
      const clustered = g.groups.some((x) => x.node);
      const none = g.total === 0 && !st.state && !st.owner && !st.q;
      replace(groupBody, table(header(clustered), g.groups.map(groupRow),
        none && cluster ? "no groups held on this node (where they live is below)" : "no groups match"));
      const first = g.total ? st.offset + 1 : 0, last = Math.min(g.total, st.offset + st.limit);
      replace(pager, `${first}–${last} of ${g.total}`,
        h("button", { class: "prev", disabled: st.offset === 0 || null, onclick: () => { st.offset = Math.max(0, st.offset - st.limit); touched(); } }, "‹ prev"),
        h("button", { class: "next", disabled: last >= g.total || null, onclick: () => { st.offset += st.limit; touched(); } }, "next ›"));
    }
    return { refresh };
  }

  function connectionView(id) {
    const details = h("div", { class: "panel" });
    const consumers = h("div", { class: "panel" }, h("h2", { text: "Consumers" }), h("div", { class: "body" }));
    replace(view, h("h1", { text: "Connection " + id }),
      h("div", { class: "toolbar" }, h("button", { class: "close-connection danger", onclick: () => act(`Close connection ${id}? The client gets an ERROR frame; its unsettled messages return to their queues.`,
        () => api("/api/connections/" + enc(id), { method: "DELETE" }).then((r) => { location.hash = "#/connections"; return r; }), () => `connection ${id} closed`) }, "Close connection")),
      details, consumers);
    return {
      async refresh() {
        let c;
        try { c = await api("/api/connections/" + enc(id)); } catch (e) { replace(details, errorBox(e)); replace(consumers.querySelector(".body")); return; }
        const dl = h("dl", { class: "settings" });
        const fields = [["client address", c.client_address], ["user", c.user], ["client id", c.client_id], ["connected", when(c.connected_at)],
          ["subscriptions", c.subscriptions.join(", ")], ["unsettled", c.unsettled], ["credit", c.credit === null ? "∞" : c.credit],
          ["messages sent", c.sent], ["frames in", c.frames_in], ["messages out", c.messages_out], ["transactions", c.transactions],
          ["blocked (flow control)", c.blocked ? "yes" : "no"]];
        for (const [k, v] of fields) dl.append(h("dt", { text: k }), h("dd", { text: v === null || v === undefined || v === "" ? "–" : String(v) }));
        replace(details, dl);
        replace(consumers.querySelector(".body"), consumersTable(c.consumers || [], false));
      },
    };
  }

  // A node's link state: up (green), this node (blue), on its way (orange), lost (red).
  function linkBadge(state) {
    const cls = state === "up" ? "up" : state === "self" ? "self" : /^(connecting|handshake)$/.test(state) ? "pending" : "lost";
    return h("span", { class: "badge link-" + cls, text: state === "self" ? "this node" : state });
  }

  function clusterView() {
    const cards = h("div", { class: "cards", id: "cluster-cards" });
    const nodes = h("div", { class: "panel", id: "cluster-nodes" }, h("h2", { text: "Nodes" }), h("div", { class: "body" }));
    const title = h("h1", { text: "Cluster" });
    replace(view, title, cards, nodes);
    return {
      async refresh() {
        let c;
        try { c = await api("/api/cluster"); } catch (e) {
          replace(cards); replace(nodes.querySelector(".body"), errorBox(e.status === 404 ? { message: "This broker is not a cluster node (no [cluster] section)." } : e));
          return;
        }
        replace(title, "Cluster ", h("small", { text: `${c.cluster} · node ${c.node} · grouping ${c.grouping}` }));
        const ms = (v) => (v === null || v === undefined ? "–" : v.toFixed(1) + " ms");
        replace(cards, card("ZooKeeper", c.zookeeper.state, c.zookeeper.state === "connected" ? "word" : "word bad"),
          card("nodes", num(c.nodes.length)), card("bindings known", num(c.bindings_cached)),
          card("decisions", num(c.decisions)), card("pending", num(c.decisions_pending)),
          card("timeouts", num(c.decision_timeouts), c.decision_timeouts ? "bad" : null),
          card("decision p50", ms(c.decision_ms_p50)), card("decision p99", ms(c.decision_ms_p99)),
          card("forwarded", num(c.forwarded)), card("duplicates dropped", num(c.duplicates_dropped)));
        const rows = c.nodes.map((n) => h("tr", { "data-node": n.node, class: n.self ? "self" : null },
          h("td", { class: "node" }, n.http && !n.self ? h("a", { href: `http://${n.http}/#/cluster`, title: "this node's console", text: n.node }) : n.node),
          td(n.link || "–", "link"), h("td", { class: "state" }, linkBadge(n.state)), td(n.member ? "yes" : "no", "member"),
          td((n.queues_with_consumers || []).join(", ") || "–", "queues"), tdn(num(n.bindings_held), "bindings"),
          tdn(n.self ? "–" : num(n.forward_backlog), "backlog"), tdn(n.self ? "–" : num(n.forwarded), "forwarded")));
        replace(nodes.querySelector(".body"), table([{ label: "node" }, { label: "link address" }, { label: "link state" },
          { label: "member" }, { label: "queues with consumers" }, { label: "bindings held", num: true },
          { label: "forward backlog", num: true }, { label: "forwarded", num: true }], rows, "no nodes"));
      },
    };
  }

  // --- routing and polling -------------------------------------------------------
  function route() {
    for (const t of document.querySelectorAll(".toast")) t.remove();
    const hash = location.hash.replace(/^#/, "") || "/";
    const parts = hash.split("/").filter(Boolean);
    let nav = "overview";
    if (parts[0] === "queue" && parts[1]) { current = queueView(decodeURIComponent(parts.slice(1).join("/"))); nav = ""; }
    else if (parts[0] === "connection" && parts[1]) { current = connectionView(decodeURIComponent(parts[1])); nav = "connections"; }
    else if (parts[0] === "connections") { current = connectionsView(); nav = "connections"; }
    else if (parts[0] === "cluster") { current = clusterView(); nav = "cluster"; }
    else current = overview();
    for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === nav);
    refreshNow();
  }
  let seq = 0;
  async function refreshNow() {
    clearTimeout(timer);
    const mine = current;
    const my = ++seq;
    try {
      await mine.refresh();
      statusDot.className = "status ok";
      statusDot.title = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      statusDot.className = "status err";
      statusDot.title = e.message;
    }
    if (mine === current && my === seq) timer = setTimeout(refreshNow, POLL_MS);
  }
  window.addEventListener("hashchange", route);
  // The Cluster tab shows on cluster nodes only.
  clusterProbe.then((c) => { if (c) document.getElementById("nav-cluster").classList.remove("hidden"); });
  route();
})();
