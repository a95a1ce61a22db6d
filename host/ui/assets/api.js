// api.js: every call the UI makes goes through request(), to the agent's
// public /v1 API, with the operator's token (if any) in X-Volhost-Token.
// The token lives in sessionStorage: it ends with the browser tab and is
// never put in a cookie, so no other site can make the browser act with it
// (the agent's Origin guard and JSON-only writes close the rest).

const TOKEN_KEY = "volhost.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// APIError carries the HTTP status and the API's error text.
export class APIError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field || "";
  }
}

// request calls the API. It returns {body, index, next}: the decoded JSON,
// the X-Volhost-Index and the X-Volhost-NextToken headers.
export async function request(method, path, {query, body, signal} = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = {"Accept": "application/json"};
  const t = token();
  if (t) headers["X-Volhost-Token"] = t;
  const init = {method, headers, signal, credentials: "omit", cache: "no-store"};
  if (method !== "GET" && method !== "HEAD") {
    // Writes are JSON, always (the API answers 415 otherwise).
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body || {});
  }
  const resp = await fetch(url, init);
  let data = null;
  const text = await resp.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = {error: text}; }
  }
  if (!resp.ok) {
    throw new APIError(resp.status, (data && data.error) || resp.statusText, data && data.field);
  }
  return {
    body: data,
    index: Number(resp.headers.get("X-Volhost-Index") || 0),
    next: resp.headers.get("X-Volhost-NextToken") || "",
  };
}

export const get = (path, query, signal) => request("GET", path, {query, signal});

// watch runs a blocking query loop: fn gets every new answer; it stops when
// signal aborts. An error is passed to onError and retried after a pause
// (the pause is the only timer: the server holds each request until
// something changes).
export async function watch(path, query, signal, fn, onError) {
  let index = 0;
  while (!signal.aborted) {
    try {
      const r = await request("GET", path, {query: {...query, index: index || undefined, wait: index ? "60s" : undefined}, signal});
      if (r.index < index) index = 0; // the store was restored: start over
      else index = r.index;
      await fn(r);
    } catch (e) {
      if (signal.aborted) return;
      if (onError && onError(e) === false) return;
      await pause(2000, signal);
    }
  }
}

export function pause(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal && signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, {once: true});
  });
}

// Capabilities: what the caller's token may do (GET
// /v1/acl/token/self/capabilities). With ACL off everything is allowed.
export async function capabilities(namespace) {
  const r = await get("/v1/acl/token/self/capabilities", {namespace});
  return new Caps(r.body);
}

export class Caps {
  constructor(c) {
    this.raw = c;
    this.acl = c.acl_enabled;
    this.global = new Set(c.global);
    this.ns = new Set(c.in_namespace);
    this.everywhere = new Set(c.everywhere);
  }
  has(cap) {
    return this.raw.management || this.global.has(cap) || this.ns.has(cap);
  }
  hasEverywhere(cap) {
    return this.raw.management || this.everywhere.has(cap);
  }
}
