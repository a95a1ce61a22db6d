// app.js: the volhost web UI. A single page app with real links
// (/ui/volumes, /ui/volume?namespace=..&id=..): the agent answers every
// page path with index.html and this module renders the page from API
// calls (api.js). Pages that show changing state keep a blocking query
// open and redraw when the agent's index moves, so a release in progress
// updates without a reload.

import {APIError, Caps, capabilities, get, pause, request, setToken, token, watch} from "./api.js";
import {barChart, stepChart} from "./charts.js";

// ---- DOM helpers: elements are built, never parsed from strings, so no
// API value can become markup.

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) on(e, k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (v === true) e.setAttribute(k, "");
    else e.setAttribute(k, v);
  }
  append(e, children);
  return e;
}

function append(e, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
}

// on routes an event through e.handlers, so that patch can keep an
// element and still give it the newest render's handler (a kept button's
// old closure could name a module version the page no longer shows).
function on(e, type, fn) {
  if (!e.handlers) e.handlers = {};
  if (!(type in e.handlers)) e.addEventListener(type, (ev) => e.handlers[type](ev));
  e.handlers[type] = fn;
}

// fill replaces e's children (arrays flattened, null/false skipped).
function fill(e, ...children) {
  e.replaceChildren();
  append(e, children);
}

// patch makes e's children equal to the given ones while keeping every
// node that is still there: the live pages redraw on every index move
// (a failing release moves it at each attempt), and replacing the nodes
// would take the keyboard focus off the button an operator tabbed to,
// clear a text selection, and drop a click whose press landed on the old
// button before its release landed on the new one.
function patch(e, ...children) {
  const next = document.createElement(e.tagName);
  append(next, children);
  morph(e, next);
}

// morph turns old's children into neu's: a node of the same kind (text,
// or an element of the same tag) is kept and updated in place (text,
// attributes, handlers, then its own children); any other is replaced.
function morph(old, neu) {
  const olds = [...old.childNodes];
  const news = [...neu.childNodes];
  news.forEach((n, i) => {
    const o = olds[i];
    if (!o) old.append(n);
    else if (o.nodeType === Node.TEXT_NODE && n.nodeType === Node.TEXT_NODE) {
      if (o.data !== n.data) o.data = n.data;
    } else if (o.nodeType === Node.ELEMENT_NODE && n.nodeType === Node.ELEMENT_NODE && o.tagName === n.tagName && o.namespaceURI === n.namespaceURI) {
      for (const a of [...o.attributes]) if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
      for (const a of n.attributes) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
      for (const type of Object.keys(o.handlers || {})) if (!(n.handlers && type in n.handlers)) o.handlers[type] = () => {};
      for (const [type, fn] of Object.entries(n.handlers || {})) on(o, type, fn);
      morph(o, n);
    } else o.replaceWith(n);
  });
  for (const o of olds.slice(news.length)) o.remove();
}

const main = document.getElementById("main");

function isZeroTime(t) {
  return !t || t.startsWith("0001-01-01");
}

function fmtTime(t) {
  if (isZeroTime(t)) return "—";
  const d = new Date(t);
  return h("time", {datetime: t, title: t}, d.toLocaleString());
}

function ago(t, style) {
  if (isZeroTime(t)) return "never";
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (style === "ends") return s < 0 ? `ends in ${fmtDur(-s)}` : s === 0 ? "ends now" : `ended ${fmtDur(s)} ago`;
  if (Math.abs(s) <= 1) return "now";
  return s < 0 ? `in ${fmtDur(-s)}` : `${fmtDur(s)} ago`;
}

// rel is a time shown relative to now ("in 12s", "3m ago"), kept current
// by the ticker below: a page redraws only when the agent's index moves,
// and a claim that is held or waiting for its backoff moves nothing, so a
// relative time computed at render went stale for good. style "ends"
// reads "ends in 12s" / "ended 3s ago" (a hold's until).
function rel(t, style) {
  if (isZeroTime(t)) return "never";
  return h("time", {class: "rel", datetime: t, "data-style": style, title: new Date(t).toLocaleString()}, ago(t, style));
}

setInterval(() => {
  for (const e of document.querySelectorAll("time.rel")) {
    const text = ago(e.getAttribute("datetime"), e.dataset.style);
    if (e.textContent !== text) e.textContent = text;
  }
}, 1000);

function fmtDur(s) {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? (s % 60) + "s" : ""}`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
}

// volLink links a volume's page. With full set the text is
// "namespace/id": where namespaces mix (events, audit) an ID alone is
// ambiguous, since two namespaces may hold the same volume ID.
function volLink(ns, id, full) {
  return h("a", {href: `/ui/volume?namespace=${encodeURIComponent(ns)}&id=${encodeURIComponent(id)}`}, full ? `${ns}/${id}` : id);
}

function table(caption, headers, rows, attrs) {
  return h("div", {class: "table-wrap"},
    h("table", attrs || {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", {scope: "col"}, x)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", {colspan: headers.length, class: "empty"}, "None.")))));
}

function section(title, ...children) {
  const id = "s-" + title.toLowerCase().replace(/[^a-z0-9]+/g, "-");
  return h("section", {"aria-labelledby": id}, h("h2", {id}, title), children);
}

function badge(text, kind) {
  return h("span", {class: `badge ${kind || text}`}, text);
}

function errorBox(e) {
  const msg = e instanceof APIError ? `${e.status}: ${e.message}` : String(e && e.message ? e.message : e);
  return h("p", {class: "error", role: "alert"}, msg);
}

function toast(msg, isError) {
  const t = document.getElementById("toast");
  t.className = isError ? "error" : "ok";
  t.textContent = msg;
}

// ---- identity and permissions

let caps = null; // Caps for the "default" namespace and the global capabilities

// anonymousCaps is what a caller without a token has when ACL is on and
// the agent lets anonymous callers do nothing, not even introspect.
const anonymousCaps = new Caps({acl_enabled: true, accessor: "anonymous", management: false, global: [], in_namespace: [], everywhere: []});

async function loadIdentity() {
  const box = document.getElementById("identity");
  try {
    caps = await capabilities();
  } catch (e) {
    if (e instanceof APIError && e.status === 403 && token()) {
      setToken(""); // a stale or revoked token: ask again
      caps = await capabilities().catch(() => anonymousCaps);
      toast("The stored token was not accepted: " + e.message, true);
    } else if (e instanceof APIError && e.status === 403) {
      caps = anonymousCaps; // ACL on, and no anonymous access at all
    } else {
      caps = null;
    }
  }
  fill(box);
  if (!caps || !caps.acl) return;
  if (token()) {
    box.append(h("span", {id: "whoami"}, `Token: ${caps.raw.name || caps.raw.accessor}`),
      h("button", {type: "button", onclick: () => { setToken(""); start(); }}, "Sign out"));
    return;
  }
  const input = h("input", {id: "token-input", type: "password", autocomplete: "off", required: true, spellcheck: "false"});
  box.append(h("form", {class: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    try {
      await capabilities();
      start();
    } catch (e) {
      setToken("");
      toast("Token not accepted: " + e.message, true);
    }
  }}, h("label", {for: "token-input"}, "ACL token"), input, h("button", {type: "submit"}, "Sign in")));
}

// allowed reports whether the caller may use cap (in ns for a namespaced
// capability; c is that namespace's Caps when given).
function allowed(cap, c) {
  const k = c || caps;
  return !k || k.has(cap);
}

// actionButton is a button that is disabled, saying why, when the token
// lacks the capability the API will check.
function actionButton(label, cap, c, onclick, extra) {
  const ok = allowed(cap, c);
  return h("button", {type: "button", class: "action", disabled: !ok, "data-cap": cap,
    title: ok ? undefined : `Your token lacks ${cap}`, onclick, ...(extra || {})},
  label, ok ? null : h("span", {class: "why"}, ` (needs ${cap})`));
}

// confirmAction shows what will happen and resolves true on Confirm.
function confirmAction(title, body, okLabel) {
  const dlg = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  fill(document.getElementById("confirm-body"), ...[body].flat());
  document.getElementById("confirm-ok").textContent = okLabel || "Confirm";
  dlg.returnValue = "";
  dlg.showModal();
  document.getElementById("confirm-cancel").focus();
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), {once: true});
  });
}

// lastEvents walks the event pages (oldest first) and keeps the last n.
async function lastEvents(query, n, signal) {
  let out = [];
  let next = "";
  let index = 0;
  for (let page = 0; page < 50; page++) {
    const r = await get("/v1/events", {...query, per_page: 1000, next_token: next || undefined}, signal);
    index = r.index;
    out = out.concat(r.body || []);
    if (out.length > n) out = out.slice(out.length - n);
    if (!r.next) break;
    next = r.next;
  }
  return {events: out, index};
}

// ---- pages

// markRendered records how long the page took (render start to data on
// screen) and, once per document, the time since navigation started: the
// browser tests read both (BENCHMARKS.md "Web UI").
function markRendered(started) {
  const ms = performance.now() - started;
  main.dataset.renderMs = ms.toFixed(1);
  if (!main.dataset.firstRenderMs) main.dataset.firstRenderMs = performance.now().toFixed(1);
  main.dataset.rendered = String(Number(main.dataset.rendered || 0) + 1);
}

async function overview(q, signal, started) {
  const title = h("h1", {}, "Overview");
  const cluster = h("div", {id: "cluster"});
  const stats = h("div", {id: "stats"});
  const audit = h("div", {id: "audit"});
  fill(main, title, cluster, stats, audit);

  const [leader, raft] = await Promise.all([
    get("/v1/status/leader").catch((e) => e),
    get("/v1/operator/raft/configuration").catch((e) => e),
  ]);
  const peers = raft instanceof Error ? errorBox(raft) : table("Servers", ["ID", "Raft address", "HTTP address", "Role"],
    raft.body.servers.map((p) => h("tr", {}, h("td", {}, p.id), h("td", {}, p.raft_addr), h("td", {}, p.http_addr),
      h("td", {}, p.leader ? badge("leader", "ok") : p.voter ? "voter" : "non-voter"))));
  fill(cluster, section("Cluster",
    leader instanceof Error ? errorBox(leader) :
      h("p", {}, "Leader: ", h("strong", {id: "leader"}, leader.body.address || "this agent"), leader.body.is_leader ? " (this agent)" : ""),
    peers));

  const auditRes = await lastEvents({type: "audit"}, 10, signal).catch((e) => e);
  fill(audit, section("Recent privileged actions", auditRes instanceof Error ? errorBox(auditRes) :
    table("Audit events, newest first", ["Time", "Action", "Accessor", "Request", "Volume"],
      auditRes.events.slice().reverse().map((e) => h("tr", {}, h("td", {}, fmtTime(e.time)), h("td", {}, (e.fields || {}).action),
        h("td", {}, (e.fields || {}).accessor), h("td", {}, e.message), h("td", {}, e.volume_id ? volLink(e.namespace || "default", e.volume_id, true) : "—"))))));

  await watch("/v1/stats", {}, signal, (r) => {
    patch(stats, renderStats(r.body));
    markRendered(started);
  }, (e) => { fill(stats, errorBox(e)); markRendered(started); return !(e instanceof APIError && e.status === 403); });
}

const STATES = ["publishing", "taken", "node-detached", "controller-detached", "ready-to-free"];

function renderStats(s) {
  const counts = h("dl", {class: "counts"},
    h("div", {}, h("dt", {}, "Volumes"), h("dd", {id: "count-volumes"}, s.volumes)),
    h("div", {}, h("dt", {}, "Claims"), h("dd", {id: "count-claims"}, s.claims)),
    STATES.map((st) => h("div", {}, h("dt", {}, st), h("dd", {"data-state": st}, s.claims_by_state[st] || 0))),
    h("div", {class: s.stuck_count ? "warn" : ""}, h("dt", {}, "Stuck"), h("dd", {id: "count-stuck"}, s.stuck_count)));
  const stuck = table(`Stuck volumes, longest first (${s.stuck_count})`, ["Volume", "Namespace", "Plugin", "Since", "Reason", "Attempts"],
    s.stuck.map((v) => h("tr", {}, h("td", {}, volLink(v.namespace, v.id)), h("td", {}, v.namespace), h("td", {}, v.plugin_id),
      h("td", {}, rel(v.stuck.since)), h("td", {}, v.stuck.reason, v.stuck.code_name ? ` (${v.stuck.code_name})` : ""), h("td", {}, v.stuck.attempts))));
  const minuteLabel = (m) => new Date(m).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
  const charts = h("div", {class: "charts"},
    h("figure", {}, barChart("Releases per minute", s.releases_per_minute.map((m) => minuteLabel(m.minute)), s.releases_per_minute.map((m) => m.count)),
      h("figcaption", {}, "Releases per minute (last 30 min)")),
    h("figure", {}, barChart("Release latency", s.release_latency.map((b) => b.label), s.release_latency.map((b) => b.count), {everyLabel: true}),
      h("figcaption", {}, "Release latency: ", s.release_latency_basis)),
    h("figure", {}, stepChart("Stuck volumes", s.stuck_over_time.map((x) => ({t: new Date(x.time), v: x.count}))),
      h("figcaption", {}, "Stuck volumes over time (sampled every 10 s by this agent)")));
  return [section("Volumes and claims", counts), section("Stuck volumes", stuck), section("Charts", charts)];
}

// Volumes: one page of the API's list (server-side filters and
// pagination: X-Volhost-NextToken), so 10,000 volumes cost one page.
async function volumes(q, signal, started) {
  const stats = await get("/v1/stats", {}, signal).catch(() => null);
  const field = (id, label, input) => h("div", {class: "field"}, h("label", {for: id}, label), input);
  const select = (id, name, options, value) => h("select", {id, name},
    options.map(([v, l]) => h("option", {value: v, selected: v === value}, l)));
  const keys = (m) => Object.keys(m || {}).sort();
  const form = h("form", {class: "filters", role: "search", onsubmit: (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(ev.target)) if (v) p.set(k, v);
    navigate("/ui/volumes" + (p.toString() ? "?" + p : ""));
  }},
  field("f-search", "Search by ID", h("input", {id: "f-search", name: "search", type: "search", value: q.get("search") || ""})),
  field("f-namespace", "Namespace", select("f-namespace", "namespace", [["", "any"], ...keys(stats && stats.body.volumes_by_namespace).map((n) => [n, n])], q.get("namespace") || "")),
  field("f-plugin", "Plugin", select("f-plugin", "plugin_id", [["", "any"], ...keys(stats && stats.body.volumes_by_plugin).map((n) => [n, n])], q.get("plugin_id") || "")),
  field("f-state", "Claim state", select("f-state", "claim_state", [["", "any"], ["unclaimed", "no claims"], ...STATES.map((s) => [s, s])], q.get("claim_state") || "")),
  h("div", {class: "field check"}, h("input", {id: "f-stuck", name: "stuck", type: "checkbox", value: "true", checked: q.get("stuck") === "true"}), h("label", {for: "f-stuck"}, "Stuck only")),
  h("button", {type: "submit"}, "Apply"));

  const params = {namespace: q.get("namespace"), plugin_id: q.get("plugin_id"), claim_state: q.get("claim_state"),
    stuck: q.get("stuck"), search: q.get("search"), per_page: 50, next_token: q.get("page")};
  const r = await get("/v1/volumes", params, signal);
  const rows = r.body.map((v) => {
    const claims = Object.values(v.claims || {});
    const byState = {};
    for (const c of claims) byState[c.state] = (byState[c.state] || 0) + 1;
    return h("tr", {"data-volume": v.id},
      h("td", {}, volLink(v.namespace, v.id)), h("td", {}, v.namespace), h("td", {}, v.plugin_id), h("td", {class: "mono"}, v.external_id),
      h("td", {}, claims.length ? Object.entries(byState).map(([s, n]) => badge(`${n} ${s}`, s)) : "—"),
      h("td", {}, v.stuck ? badge("stuck", "stuck") : "—"));
  });
  const here = new URLSearchParams(location.search);
  const pager = h("nav", {class: "pager", "aria-label": "Pages of volumes"});
  if (q.get("page")) {
    here.delete("page");
    pager.append(h("a", {href: "/ui/volumes" + (here.toString() ? "?" + here : ""), id: "first-page"}, "← First page"));
  }
  if (r.next) {
    const n = new URLSearchParams(location.search);
    n.set("page", r.next);
    pager.append(h("a", {href: "/ui/volumes?" + n, id: "next-page", rel: "next"}, "Next page →"));
  }
  fill(main, h("h1", {}, "Volumes"), form,
    table(`Volumes (${r.body.length} on this page${stats ? `, ${stats.body.volumes} in total` : ""})`,
      ["Volume", "Namespace", "Plugin", "External ID", "Claims", "Stuck"], rows, {id: "volumes-table"}), pager);
  markRendered(started);
}

async function volume(q, signal, started) {
  const ns = q.get("namespace") || "default";
  const id = q.get("id") || "";
  const nsCaps = await capabilities(ns).catch(() => caps);
  const head = h("h1", {}, "Volume ", h("span", {class: "mono"}, `${ns}/${id}`));
  const body = h("div", {id: "volume-body"});
  const timeline = h("div", {id: "timeline"});
  const left = h("div", {id: "leftovers"});
  fill(main, head, body, timeline, left);
  let current = null;
  let gone = false;

  const refreshSide = async () => {
    const ev = await get("/v1/events", {volume_id: id, namespace: ns, per_page: 1000}, signal).catch((e) => e);
    patch(timeline, section("Timeline", ev instanceof Error ? errorBox(ev) : renderTimeline(ev.body)));
    const lo = await allLeftovers(signal).catch((e) => e);
    patch(left, section("Leftovers", lo instanceof Error ? errorBox(lo) : renderLeftovers(lo.filter((l) => l.namespace === ns && l.volume_id === id))));
  };

  const forceDeregister = async () => {
    const claims = Object.values(current.claims || {}).sort((a, b) => a.alloc_id.localeCompare(b.alloc_id));
    const ok = await confirmAction(`Force deregister ${ns}/${id}?`, [
      // The disk itself, as the storage names it: what the operator
      // looks up on the storage side to clean a leftover up.
      h("p", {id: "confirm-external"}, "External volume: ", h("span", {class: "mono"}, current.external_id), ` (plugin ${current.plugin_id})`),
      h("p", {}, "The volume is removed from volhost now, without any CSI call. ",
        claims.length ? `Its ${claims.length} unreleased claim(s) are recorded as leftovers, which may still be attached:` : "It has no claims: nothing is left over."),
      claims.length ? table("Leftovers this will record", ["Allocation", "Node", "External node", "Release state reached"],
        claims.map((c) => h("tr", {}, h("td", {}, c.alloc_id), h("td", {}, c.node_id), h("td", {}, c.external_node_id || "—"), h("td", {}, c.state))), {id: "confirm-leftovers"}) : null,
      h("p", {}, "Clean them up by hand on the storage side, then clear them (volhost volume leftovers -clear)."),
    ], "Force deregister");
    if (!ok) return;
    try {
      const r = await request("DELETE", `/v1/volume/${encodeURIComponent(id)}`, {query: {namespace: ns, force: "true"}});
      gone = true;
      fill(body, h("p", {class: "ok", role: "status", id: "deregistered"}, `Volume ${ns}/${id} force-deregistered; ${r.body.leftovers.length} leftover(s) recorded.`),
        section("Recorded leftovers", renderLeftovers(r.body.leftovers)));
      toast(`Force-deregistered ${ns}/${id}`);
      await refreshSide();
    } catch (e) {
      toast("Force deregister failed: " + e.message, true);
    }
  };

  // A volume without claims goes with a plain deregister: no force, no
  // leftovers (the store refuses it while a claim remains).
  const deregister = async () => {
    const ok = await confirmAction(`Deregister ${ns}/${id}?`, [
      h("p", {}, `The volume ${ns}/${id} (external volume `, h("span", {class: "mono"}, current.external_id),
        `, plugin ${current.plugin_id}) is removed from volhost. It has no claims, so nothing is attached through volhost and nothing is left over; the disk itself is not touched.`),
    ], "Deregister");
    if (!ok) return;
    try {
      await request("DELETE", `/v1/volume/${encodeURIComponent(id)}`, {query: {namespace: ns}});
      gone = true;
      fill(body, h("p", {class: "ok", role: "status", id: "deregistered"}, `Volume ${ns}/${id} deregistered.`));
      toast(`Deregistered ${ns}/${id}`);
      await refreshSide();
    } catch (e) {
      toast("Deregister failed: " + e.message, true);
    }
  };

  const detach = async (node) => {
    const ok = await confirmAction(`Detach ${ns}/${id} from node ${node}?`,
      h("p", {}, `volhost will release this volume's claims on node ${node} now: NodeUnpublish and NodeUnstage on the node, then ControllerUnpublish, as the watcher would once the allocations end. Claims whose allocation is still running are refused.`), "Detach");
    if (!ok) return;
    try {
      await request("PUT", `/v1/volume/${encodeURIComponent(id)}/detach`, {query: {namespace: ns, node}});
      toast(`Detach of ${ns}/${id} from ${node} done`);
    } catch (e) {
      toast("Detach failed: " + e.message, true);
    }
  };

  await watch(`/v1/volume/${encodeURIComponent(id)}`, {namespace: ns}, signal, async (r) => {
    if (gone) return;
    current = r.body;
    patch(body, renderVolume(current, nsCaps, {forceDeregister, deregister, detach}));
    await refreshSide();
    markRendered(started);
  }, (e) => {
    if (e instanceof APIError && e.status === 404) {
      // Not registered (any more): a deregistered volume's page is still
      // its retained timeline and leftovers, reached from an event or an
      // audit row. That is no error, so no red box above the timeline.
      if (!gone) fill(body, h("p", {class: "notice", role: "status", id: "not-registered"},
        `Volume ${ns}/${id} is not registered: it was deregistered, or never existed. The events volhost retains for it and its leftovers follow.`));
      refreshSide();
      markRendered(started);
      return false;
    }
    if (e instanceof APIError && e.status === 403) {
      if (!gone) fill(body, errorBox(e));
      refreshSide();
      markRendered(started);
      return false;
    }
    body.prepend(errorBox(e));
    return true;
  });
}

async function allLeftovers(signal) {
  let out = [];
  let next = "";
  for (let i = 0; i < 20; i++) {
    const r = await get("/v1/volumes/leftovers", {next_token: next || undefined}, signal);
    out = out.concat(r.body);
    if (!r.next) break;
    next = r.next;
  }
  return out;
}

function renderLeftovers(list) {
  return table("Leftovers (claims a forced deregister left possibly attached)", ["Allocation", "Node", "External node", "External volume", "State reached", "In doubt", "Reason", "Time"],
    list.map((l) => h("tr", {"data-leftover": l.id}, h("td", {}, l.alloc_id), h("td", {}, l.node_id), h("td", {class: "mono"}, l.external_node_id || "—"),
      h("td", {class: "mono"}, l.external_id), h("td", {}, l.state), h("td", {}, l.in_doubt || "—"), h("td", {}, l.reason), h("td", {}, fmtTime(l.time)))));
}

function renderVolume(v, nsCaps, act) {
  const claims = Object.values(v.claims || {}).sort((a, b) => a.alloc_id.localeCompare(b.alloc_id));
  const kv = (k, val) => h("div", {}, h("dt", {}, k), h("dd", {}, val === undefined || val === "" ? "—" : val));
  const map = (m) => Object.keys(m || {}).length ? Object.entries(m).map(([k, x]) => `${k}=${x}`).join(", ") : "—";
  const attrs = h("dl", {class: "attrs"}, kv("Namespace", v.namespace), kv("ID", v.id), kv("Name", v.name), kv("External ID", h("span", {class: "mono"}, v.external_id)),
    kv("Plugin", v.plugin_id), kv("Access mode", v.access_mode), kv("Attachment mode", v.attachment_mode), kv("File system", v.fs_type),
    kv("Secrets", Object.keys(v.secrets || {}).join(", ") || "—"), kv("Parameters", map(v.parameters)), kv("Context", map(v.context)),
    kv("Modify index", v.modify_index));
  const stuck = v.stuck ? h("p", {class: "error", role: "alert", id: "stuck"}, `Stuck since ${new Date(v.stuck.since).toLocaleString()}: ${v.stuck.reason}`,
    v.stuck.code_name ? ` (${v.stuck.code_name})` : "", v.stuck.module ? `, module ${v.stuck.module}` : "", ` after ${v.stuck.attempts} attempts`) : null;
  const nodes = [...new Set(claims.map((c) => c.node_id))];
  const rows = claims.map((c) => h("tr", {"data-alloc": c.alloc_id, "data-state": c.state},
    h("td", {}, c.alloc_id), h("td", {}, c.node_id, c.external_node_id ? h("div", {class: "sub mono"}, c.external_node_id) : null), h("td", {}, c.mode),
    h("td", {}, stepper(c.state)), h("td", {}, c.attempts),
    h("td", {class: "next-attempt"}, isZeroTime(c.next_attempt) ? "—" : rel(c.next_attempt)),
    h("td", {class: "last-error"}, c.last_error ? [
      h("strong", {}, c.last_error.code_name || c.last_error.kind), c.last_error.step ? ` at ${c.last_error.step}` : "", ": ", c.last_error.message,
      c.last_error.module ? h("div", {class: "sub"}, `judged by ${c.last_error.module}${c.last_error.module_version ? "@" + c.last_error.module_version : ""}${c.last_error.fault ? ", fault " + c.last_error.fault : ""}`) : null,
    ] : "—"),
    h("td", {class: "hold"}, c.hold ? [h("strong", {}, c.hold.module ? `${c.hold.module}${c.hold.module_version ? "@" + c.hold.module_version : ""}` : "policy"), ": ", c.hold.reason || "waiting",
      h("div", {class: "sub"}, "held since ", rel(c.hold.since), isZeroTime(c.hold.until) ? "" : [", ", rel(c.hold.until, "ends")])] : "—")));
  const fc = v.force_deregister || {};
  // Deregister is the way out for a free volume; force deregister only
  // for one whose claims cannot be released (a free volume needs none).
  const actions = h("div", {class: "actions"},
    nodes.map((n) => actionButton(`Detach from ${n}…`, "namespace:detach", nsCaps, () => act.detach(n), {"data-node": n})),
    actionButton("Deregister…", "namespace:deregister", nsCaps, act.deregister, {id: "deregister", disabled: !allowed("namespace:deregister", nsCaps) || claims.length > 0,
      ...(claims.length ? {title: `Deregister needs the volume free: ${claims.length} claim(s) not yet released`} : {})}),
    claims.length ? actionButton("Force deregister…", "namespace:force-deregister", nsCaps, act.forceDeregister, {id: "force-deregister", disabled: !allowed("namespace:force-deregister", nsCaps) || !fc.allowed}) : null,
    claims.length && !fc.allowed ? h("p", {class: "sub"}, `Force deregister is refused while allocations still run: ${(fc.live_allocs || []).join(", ")}.`) : null);
  return [stuck, section("Attributes", attrs),
    section("Claims", table("Claims and their release state", ["Allocation", "Node", "Mode", "State", "Attempts", "Next attempt", "Last error", "Waiting on"], rows, {id: "claims-table"})),
    section("Actions", actions)];
}

function stepper(state) {
  const at = STATES.indexOf(state);
  return h("ol", {class: "stepper", "aria-label": `state ${state}`}, STATES.map((s, i) =>
    h("li", {class: i < at ? "done" : i === at ? "current" : "", "aria-current": i === at ? "step" : undefined}, s)));
}

function renderTimeline(events) {
  if (!events.length) return h("p", {}, "No events retained for this volume.");
  return h("ol", {class: "timeline"}, events.map((e) => h("li", {"data-type": e.type},
    fmtTime(e.time), " ", badge(e.type, "type"), " ", e.message, e.alloc_id ? h("span", {class: "sub"}, ` alloc ${e.alloc_id}`) : "",
    e.fields && e.fields.code ? h("span", {class: "sub"}, ` code ${e.fields.code}`) : "",
    e.fields && e.fields.error ? h("div", {class: "sub"}, e.fields.error) : "")));
}

async function modules(q, signal, started) {
  const [list, evs] = await Promise.all([get("/v1/modules", {}, signal), lastEvents({type: "module"}, 2000, signal).catch(() => ({events: []}))]);
  const lastEvent = {};
  for (const e of evs.events) if (e.module) lastEvent[e.module] = e;
  const infos = await Promise.all(list.body.modules.map((m) => get(`/v1/module/${encodeURIComponent(m.name)}`, {}, signal).then((r) => r.body).catch(() => null)));
  const ms = (ns) => ns ? `${(ns / 1e6).toFixed(ns < 1e6 ? 3 : 1)} ms` : "—";
  // rolloutCell says where the module's rollout stands, whatever it is:
  // the column was empty for a module with no candidate and nothing to
  // roll back to, which read as a missing value.
  const rolloutCell = (m) => {
    const changes = (m.shadow && m.shadow.manifest_changes) || [];
    return [
      m.shadow ? [
        changes.length ? h("ul", {class: "changes"}, changes.map((c) => h("li", {class: c.selection ? "selection" : ""}, `${c.field}: ${c.from || "—"} → ${c.to || "—"}`, c.selection ? " (changes what it serves)" : ""))) : null,
        actionButton("Promote…", "modules:reload", null, () => rollout(m, "promote"), {"data-action": "promote"}),
        actionButton("Discard…", "modules:reload", null, () => rollout(m, "discard"), {"data-action": "discard"})] : null,
      m.promoted ? h("div", {}, badge("promoted", "ok")) : null,
      m.last_known_good ? [h("div", {class: "sub"}, `last known good: ${m.last_known_good.version || "?"} (generation ${m.last_known_good.generation})`),
        actionButton("Roll back…", "modules:reload", null, () => rollout(m, "rollback"), {"data-action": "rollback"})] : null,
      m.shadow || m.promoted || m.last_known_good ? null : m.state === "serving"
        ? [h("div", {}, "no candidate"), h("div", {class: "sub"}, "try one in shadow: ", h("code", {}, `volhost module shadow ${m.name} FILE.wasm`))]
        : h("div", {}, "none: fix the module's files, then reload"),
    ];
  };
  const rows = list.body.modules.map((m, i) => {
    const info = infos[i];
    const ev = lastEvent[m.name];
    return h("tr", {"data-module": m.name, "data-state": m.state},
      // Fourteen columns ran off a 1280-pixel screen and broke names
      // over three lines: the kind, generation, SHA-256, breaker and
      // faults ride in the cells they qualify.
      h("th", {scope: "row"}, h("span", {class: "module-name"}, m.name), h("div", {class: "sub nowrap"}, m.kind || "", m.default ? " · default" : "")),
      h("td", {title: m.sha256 ? `sha256 ${m.sha256}` : undefined}, m.version || "—",
        h("div", {class: "sub nowrap"}, `generation ${m.generation}`, m.sha256 ? h("span", {class: "mono"}, ` ${m.sha256.slice(0, 8)}…`) : "")),
      h("td", {title: ev ? ev.message : undefined}, ev ? fmtTime(ev.time) : "—"),
      h("td", {class: "module-state"}, badge(m.state, {serving: "ok", loading: "loading"}[m.state] || "stuck"), m.refusal ? h("div", {class: "refusal"}, m.refusal) : null),
      h("td", {class: "calls"}, m.calls, m.breaker_open || m.state === "open-circuit" ? [" ", badge("breaker open", "stuck")] : "",
        h("div", {class: "sub"}, Object.keys(m.faults || {}).length ? "faults " + Object.entries(m.faults).map(([k, n]) => `${k}: ${n}`).join(", ") : "no faults")),
      h("td", {class: "nowrap"}, `p50 ${ms(m.p50_ns)}`, h("br"), `p99 ${ms(m.p99_ns)}`),
      h("td", {}, info ? `${info.served_volume_count ?? (info.served_volumes || []).length} volume(s)` : (m.volumes || []).join(", ") || "—"),
      h("td", {class: "shadow"}, m.shadow
        ? [`${m.shadow.agreement_percent.toFixed(1)}% of ${m.shadow.calls} call(s)`, h("div", {class: "sub"}, `candidate ${m.shadow.version || "?"} (generation ${m.shadow.generation})`)]
        : "no shadow"),
      h("td", {class: "rollout"}, rolloutCell(m)));
  });
  // Promote makes the shadow candidate serve (the serving generation is
  // kept as the last known good); roll back returns to that one; discard
  // drops the candidate. A candidate whose manifest changes what the
  // module serves is promoted only with that change shown and confirmed
  // here (the API refuses it otherwise: allow_selection_change).
  const rollout = async (m, action) => {
    const changes = (m.shadow && m.shadow.manifest_changes) || [];
    const selection = changes.some((c) => c.selection);
    const candidate = m.shadow ? m.shadow.version || "" : "";
    const what = {
      promote: `The shadow candidate ${candidate} of ${m.name} starts serving on this agent; the generation serving now is kept as the last known good, and a promoted version that faults past its rollback limit is rolled back automatically.`,
      rollback: m.last_known_good ? `${m.name} returns to its last known good generation ${m.last_known_good.version || ""} (generation ${m.last_known_good.generation}) on this agent; the files rolled back from are not loaded again until they change.` : "",
      discard: `The shadow candidate ${candidate} of ${m.name} is dropped; the generation serving now keeps serving, and a reload does not load the same files again.`,
    }[action];
    const title = {promote: `Promote ${m.name}?`, rollback: `Roll back ${m.name}?`, discard: `Discard the candidate of ${m.name}?`}[action];
    const label = {promote: "Promote", rollback: "Roll back", discard: "Discard"}[action];
    const body = [h("p", {}, what),
      action === "promote" && changes.length ? [h("p", {}, selection ? "Its manifest changes what the module serves:" : "Its manifest changes:"),
        h("ul", {id: "confirm-changes"}, changes.map((c) => h("li", {}, `${c.field}: ${c.from || "—"} → ${c.to || "—"}`)))] : null];
    if (!await confirmAction(title, body, label)) return;
    try {
      const path = `/v1/module/${encodeURIComponent(m.name)}`;
      if (action === "discard") await request("DELETE", `${path}/shadow`);
      else await request("PUT", `${path}/${action}`, {query: action === "promote" && selection ? {allow_selection_change: "true"} : {}});
      toast(`${m.name}: ${{promote: "promoted", rollback: "rolled back", discard: "candidate discarded"}[action]}`);
      render();
    } catch (e) {
      toast(`${action} failed: ` + e.message, true);
    }
  };
  const reload = async () => {
    const ok = await confirmAction("Reload modules?", h("p", {}, "This agent re-reads its module directory: new or changed modules are validated, compiled and swapped in; a candidate that fails validation is refused and the generation serving now keeps serving. Calls in flight finish on the generation they started on."), "Reload");
    if (!ok) return;
    try {
      await request("PUT", "/v1/modules/reload");
      toast("Modules reloaded");
      render();
    } catch (e) {
      toast("Reload failed: " + e.message, true);
    }
  };
  // The agent compiles its modules after it starts listening: while any
  // is loading the page says so and asks again, until each serves or is
  // refused (a module's state moves nothing a blocking query sees).
  const loading = list.body.modules.filter((m) => m.state === "loading").length;
  fill(main, h("h1", {}, "Modules"),
    loading ? h("p", {id: "modules-loading", class: "sub", role: "status"},
      `${loading} of ${list.body.modules.length} module(s) loading: the agent compiles them after it starts (seconds each without a warm cache); the leader releases nothing until they are loaded. This page refreshes by itself.`) : null,
    h("div", {class: "actions"}, actionButton("Reload modules…", "modules:reload", null, reload, {id: "reload-modules"})),
    table("Modules on this agent",
      ["Module", "Version", "Loaded", "State", "Calls", "Latency", "Serves", "Shadow agreement", "Rollout"], rows, {id: "modules-table"}));
  markRendered(started);
  if (loading) {
    await new Promise((res) => setTimeout(res, MODULES_LOADING_REFRESH_MS));
    if (!signal.aborted) await modules(q, signal, started);
  }
}

// MODULES_LOADING_REFRESH_MS is how often the Modules page asks again
// while a module loads.
const MODULES_LOADING_REFRESH_MS = 1000;

async function nodes(q, signal, started) {
  let list = [];
  let next = "";
  for (let i = 0; i < 20; i++) {
    const r = await get("/v1/nodes", {next_token: next || undefined}, signal);
    list = list.concat(r.body);
    if (!r.next) break;
    next = r.next;
  }
  const stats = await get("/v1/stats", {}, signal).catch(() => null);
  const setStatus = async (n, status) => {
    const what = status === "down"
      ? `The watcher treats node ${n.id} as down: release policies may skip its node steps (the default policy skips NodeUnpublish/NodeUnstage on a down node) and go straight to the controller detach.`
      : `The watcher treats node ${n.id} as ready again: node steps run on it.`;
    if (!await confirmAction(`Mark node ${n.id} ${status}?`, h("p", {}, what), `Mark ${status}`)) return;
    try {
      await request("PUT", `/v1/node/${encodeURIComponent(n.id)}/status`, {body: {status}});
      toast(`Node ${n.id} marked ${status}`);
      render();
    } catch (e) {
      toast("Failed: " + e.message, true);
    }
  };
  // A fence is an operator's attestation that the node is off: its claims
  // skip their node steps and go to the controller detach.
  const fence = async (n) => {
    const reason = h("input", {id: "confirm-reason", type: "text", "aria-required": "true", placeholder: "e.g. powered off in the cloud console"});
    const body = [
      h("p", {}, `You attest that node ${n.id} is off. Its claims skip NodeUnpublish and NodeUnstage and go straight to ControllerUnpublish, which detaches its disks; the claims and events carry your reason. The node refuses new claims until it is unfenced. Fence only a node you know is down: a forced detach under a running workload corrupts data.`),
      h("div", {class: "field"}, h("label", {for: "confirm-reason"}, "Reason (required)"), reason)];
    if (!await confirmAction(`Fence node ${n.id}?`, body, "Fence")) return;
    if (!reason.value.trim()) {
      toast("Not fenced: a reason is required", true);
      return;
    }
    try {
      await request("PUT", `/v1/node/${encodeURIComponent(n.id)}/fence`, {body: {reason: reason.value.trim()}});
      toast(`Node ${n.id} fenced`);
      render();
    } catch (e) {
      toast("Fence failed: " + e.message, true);
    }
  };
  const unfence = async (n) => {
    if (!await confirmAction(`Unfence node ${n.id}?`, h("p", {}, `Node ${n.id} takes new claims again, and releases run its node steps again.`), "Unfence")) return;
    try {
      await request("DELETE", `/v1/node/${encodeURIComponent(n.id)}/fence`);
      toast(`Node ${n.id} unfenced`);
      render();
    } catch (e) {
      toast("Unfence failed: " + e.message, true);
    }
  };
  const fenceCell = (n) => {
    if (!n.fence) return "no";
    const heartbeating = n.agent && !n.heartbeat_lost && n.status === "ready";
    return [badge(heartbeating ? "fenced, heartbeating" : "fenced", "stuck"),
      h("div", {class: "sub fence-reason"}, n.fence.reason, n.fence.accessor ? ` (by ${n.fence.accessor})` : "")];
  };
  const rows = list.map((n) => h("tr", {"data-node": n.id, "data-fenced": n.fence ? "true" : "false"},
    h("th", {scope: "row"}, n.id), h("td", {}, badge(n.status, n.status === "ready" ? "ok" : "stuck"),
      n.status_reason ? h("div", {class: "sub"}, n.status_reason) : null),
    h("td", {}, n.agent ? rel(n.status_since || n.last_seen) : "direct mode"),
    h("td", {}, fenceCell(n)),
    h("td", {}, Object.values(n.plugins || {}).map((p) => h("div", {"data-plugin": p.plugin_id}, p.plugin_id, h("span", {class: "sub mono"}, ` ${p.external_node_id || ""}`),
      p.probe_error ? [" ", badge("not answering", "stuck"), h("div", {class: "sub probe-error"}, p.probe_error)] : null)), Object.keys(n.plugins || {}).length ? null : "—"),
    h("td", {}, stats ? (stats.body.claims_by_node[n.id] || 0) : "—"),
    h("td", {}, actionButton(n.status === "down" ? "Mark ready…" : "Mark down…", "node:write", null, () => setStatus(n, n.status === "down" ? "ready" : "down")),
      n.fence
        ? actionButton("Unfence…", "operator:write", null, () => unfence(n), {"data-action": "unfence"})
        : actionButton("Fence…", "operator:write", null, () => fence(n), {"data-action": "fence"}))));
  fill(main, h("h1", {}, "Nodes"),
    table("Nodes (a node agent's heartbeats decide down and gone; a fence is an operator's attestation)", ["Node", "Status", "Status since", "Fenced", "Plugins", "Claims", "Actions"], rows, {id: "nodes-table"}));
  markRendered(started);
}

const EVENT_TYPES = ["claim-transition", "claim-failed", "claim-held", "volume-stuck", "force-deregister", "auto-force-deregister", "module", "claim-gc", "node-status", "node-fence", "scheduler", "audit"];

async function events(q, signal, started) {
  const type = q.get("type") || "";
  const text = (q.get("q") || "").toLowerCase();
  const form = h("form", {class: "filters", role: "search", onsubmit: (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(ev.target)) if (v) p.set(k, v);
    navigate("/ui/events" + (p.toString() ? "?" + p : ""));
  }},
  h("div", {class: "field"}, h("label", {for: "e-type"}, "Type"), h("select", {id: "e-type", name: "type"},
    [["", "all"], ...EVENT_TYPES.map((t) => [t, t])].map(([v, l]) => h("option", {value: v, selected: v === type}, l)))),
  h("div", {class: "field"}, h("label", {for: "e-q"}, "Contains"), h("input", {id: "e-q", name: "q", type: "search", value: q.get("q") || "", placeholder: "volume, node, alloc, module, text"})),
  h("button", {type: "submit"}, "Apply"));
  const live = h("p", {id: "live", class: "sub"}, "Connecting…");
  const list = h("ol", {class: "timeline feed", id: "feed", "aria-live": "polite"});
  fill(main, h("h1", {}, "Events"), form, live, list);
  const matches = (e) => !text || [e.volume_id, e.node_id, e.alloc_id, e.module, e.message, e.plugin_id].some((x) => x && x.toLowerCase().includes(text));
  const item = (e) => h("li", {"data-type": e.type}, fmtTime(e.time), " ", badge(e.type, "type"), " ",
    e.volume_id ? [volLink(e.namespace || "default", e.volume_id, true), " "] : "", e.message,
    e.node_id ? h("span", {class: "sub"}, ` node ${e.node_id}`) : "", e.fields && e.fields.accessor ? h("span", {class: "sub"}, ` by ${e.fields.accessor}`) : "");
  const first = await lastEvents({type}, 200, signal);
  fill(list, ...first.events.filter(matches).reverse().map(item));
  markRendered(started);
  let index = first.index;
  while (!signal.aborted) {
    live.textContent = "Live: waiting for new events";
    try {
      const r = await get("/v1/events", {type, index, wait: "60s", per_page: 1000}, signal);
      if (r.index > index) {
        list.prepend(...(r.body || []).filter(matches).reverse().map(item));
        while (list.children.length > 500) list.lastChild.remove();
      }
      index = Math.max(index, r.index);
    } catch (e) {
      if (signal.aborted) return;
      live.textContent = "Disconnected: " + e.message;
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
}

// Scheduler: each scheduler source the leader runs (the Nomad bridge):
// whether it is connected, the scheduler index committed in volhost's
// state (the cursor a new leader resumes from), the failures since it
// was last connected, and the problems it could not mirror or claim. The
// status lives in the leader's memory, not in the state store, so there
// is no index to block on: the page asks again every few seconds, one
// cheap read per open tab, and patches in place.
const SCHEDULER_REFRESH_MS = 2000;

async function scheduler(q, signal, started) {
  const body = h("div", {id: "scheduler-body"});
  fill(main, h("h1", {}, "Scheduler"), body);
  while (!signal.aborted) {
    let res;
    try {
      res = await get("/v1/scheduler/status", {}, signal);
    } catch (e) {
      if (signal.aborted) return;
      patch(body, errorBox(e));
      markRendered(started);
      if (e instanceof APIError && e.status === 403) return; // the token lacks operator:read: asking again will not help
      await pause(SCHEDULER_REFRESH_MS, signal);
      continue;
    }
    const list = (res.body && res.body.schedulers) || [];
    patch(body, list.length ? list.map(renderSource) :
      h("p", {id: "no-scheduler"}, "No scheduler source is configured: volhost's allocations and nodes come from the API. A scheduler \"nomad\" block in the servers' configuration makes the leader mirror a Nomad cluster."));
    markRendered(started);
    await pause(SCHEDULER_REFRESH_MS, signal);
  }
}

function renderSource(s) {
  const connected = s.state === "streaming";
  const kv = (field, k, val) => h("div", {}, h("dt", {}, k), h("dd", {"data-field": field}, val === undefined || val === null || val === "" ? "—" : val));
  const stateKind = connected ? "ok" : s.state === "retrying" ? "stuck" : "type";
  const attrs = h("dl", {class: "attrs"},
    kv("source", "Source", s.source),
    kv("address", "Address", h("span", {class: "mono"}, s.address)),
    kv("state", "State", badge(s.state, stateKind)),
    kv("connected", "Connected", connected ? "yes" : "no"),
    kv("index", "Index (cursor committed)", String(s.index)),
    kv("resets", "Resets", String(s.resets)),
    kv("last-list", "Last list", fmtTime(s.last_list)),
    kv("last-event", "Last event", fmtTime(s.last_event)),
    kv("nodes", "Nodes", String(s.nodes)),
    kv("allocs", "Allocations", `${s.allocs} (${s.live} live, ${s.terminal} terminal, ${s.held} held)`),
    kv("claims", "Claims made", String(s.claims)),
    kv("failures", "Failures since last connected", String(s.failures)),
    kv("last-error", "Last error", s.last_error ? [s.last_error, isZeroTime(s.error_time) ? null : h("div", {class: "sub"}, ago(s.error_time))] : "—"),
    kv("leader-term", "Leader term", s.leader_term ? String(s.leader_term) : "— (this server does not run it)"));
  const problems = (s.problems || []).map((p) => h("tr", {"data-key": p.key},
    h("td", {}, fmtTime(p.since)), h("td", {class: "mono"}, p.key), h("td", {}, p.message)));
  return h("section", {"aria-labelledby": `src-${s.source}`, "data-source": s.source, "data-state": s.state, "data-connected": String(connected)},
    h("h2", {id: `src-${s.source}`}, `Source ${s.source}`),
    s.last_error ? h("p", {class: "error", role: "alert"}, `Not connected to ${s.address}: ${s.failures} failed attempt(s) since it was last connected (last error below). Nothing is released on a guess meanwhile: allocations stay as last mirrored.`) : null,
    attrs,
    table(`Problems (${problems.length}): what the source could not mirror or claim, kept while it lasts; each was also recorded once as a scheduler event`,
      ["Since", "About", "Problem"], problems, {id: `problems-${s.source}`}));
}

function notFound() {
  fill(main, h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", {href: "/ui/"}, "Back to the overview")));
}

// ---- router

const pages = {"": ["overview", overview], volumes: ["volumes", volumes], volume: ["volumes", volume], modules: ["modules", modules],
  nodes: ["nodes", nodes], scheduler: ["scheduler", scheduler], events: ["events", events]};

let pageAbort = null;

async function render() {
  if (pageAbort) pageAbort.abort();
  pageAbort = new AbortController();
  const signal = pageAbort.signal;
  const started = performance.now();
  const name = location.pathname.replace(/^\/ui\/?/, "").replace(/\/$/, "");
  const [nav, page] = pages[name] || ["", notFound];
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `volhost · ${nav || "not found"}`;
  main.dataset.page = name || "overview";
  delete main.dataset.rendered;
  fill(main, h("p", {}, "Loading…"));
  try {
    await page(new URLSearchParams(location.search), signal, started);
  } catch (e) {
    if (signal.aborted) return;
    fill(main, h("h1", {}, "Could not load the page"), errorBox(e),
      e instanceof APIError && e.status === 403 && caps && caps.acl && !token() ? h("p", {}, "Sign in with an ACL token (top right).") : null);
    markRendered(started);
  }
}

function navigate(url) {
  history.pushState(null, "", url);
  render();
  main.focus();
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a[href]");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui/") || /\.[a-z0-9]+$/i.test(url.pathname)) return;
  ev.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", render);

async function start() {
  await loadIdentity();
  render();
}

start();
