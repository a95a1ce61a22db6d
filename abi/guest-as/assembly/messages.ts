// The ABI v1 wire messages (abi/volhost.proto) as views in the call arena,
// with their decoders (requests) and encoders (responses).
//
// A view is an @unmanaged class placed in the arena: no header, no GC.
// String fields are Bytes into the request buffer (zero copy); repeated
// message fields are Vecs of view addresses (use the typed accessors, e.g.
// PolicyRequest.claim(i)); maps are Vecs of key, value pairs (mapGet).
// Decoding follows proto3 merge rules like abi/codec.go: a singular message
// field seen twice merges, the last scalar wins, repeated and map fields
// accumulate.

import { blen, Bytes, bytesEqual, eq } from "./bytes";
import { alloc, allocZero, arenaCommit, arenaTop, ensure, MAX_MESSAGE_SIZE, MAX_REPEATED } from "./mem";
import {
  copyShort, decodeError, enter, fail, leave, LEN, putMap, putStr, putStrAlways, putStrInline, putTag, putU64, putVarint,
  readLen, readStart, readTag, readVarint, rp, sizeLenField, sizeMap, sizeStr, sizeU64, skipValue, takeBody, takeStr, takeVarint,
  VARINT, Vec, wantType, wp, writeStart,
} from "./wire";

// ---- enums ----

/** Action of a Decision (volhost.proto enum Action). */
export const ACTION_UNSPECIFIED: i32 = 0;
export const ACTION_RELEASE: i32 = 1;
export const ACTION_WAIT: i32 = 2;
export const ACTION_RELEASE_SKIP_NODE: i32 = 3;

/** Outcome of a ClassifyResponse (volhost.proto enum Outcome). */
export const OUTCOME_UNSPECIFIED: i32 = 0;
export const OUTCOME_DONE: i32 = 1;
export const OUTCOME_RETRY: i32 = 2;
export const OUTCOME_FATAL: i32 = 3;

// ---- maps ----

/** Number of entries of map m on the wire (a repeated key counts each time). */
export function mapSize(m: Vec): i32 { return m.len >> 1; }
/** Key of entry i of map m. */
export function mapKey(m: Vec, i: i32): Bytes { return m.at(i << 1); }
/** Value of entry i of map m. */
export function mapValue(m: Vec, i: i32): Bytes { return m.at((i << 1) + 1); }

/** The value of key (an ASCII literal) in map m, "" when absent; the last entry wins. */
export function mapGet(m: Vec, key: string): Bytes {
  for (let i = mapSize(m) - 1; i >= 0; i--) {
    if (eq(mapKey(m, i), key)) return mapValue(m, i);
  }
  return 0;
}

/** The value of key in map m, "" when absent; the last entry wins. */
export function mapGetBytes(m: Vec, key: Bytes): Bytes {
  for (let i = mapSize(m) - 1; i >= 0; i--) {
    if (bytesEqual(mapKey(m, i), key)) return mapValue(m, i);
  }
  return 0;
}

function newVec(): Vec { return changetype<Vec>(allocZero(offsetof<Vec>())); }

// newVecRoom is an empty Vec with room for n items, in one arena block and
// without a memory.fill (its fields are stored one by one).
// @ts-ignore: decorator
@inline function newVecRoom(n: i32): Vec {
  const v = changetype<Vec>(alloc(16 + (<usize>n << 3)));
  v.ptr = changetype<usize>(v) + 16;
  v.len = 0;
  v.cap = n;
  return v;
}

// ---- decoding helpers ----

// str reads string field num of wire type typ, keeping old on error.
// @ts-ignore: decorator
@inline function str(end: usize, num: u32, typ: u32, old: Bytes): Bytes {
  if (typ == LEN) return readLen(end, num);
  return strSlow(end, num, typ, old);
}

function strSlow(end: usize, num: u32, typ: u32, old: Bytes): Bytes {
  if (!wantType(num, typ, LEN)) return old;
  return readLen(end, num);
}

// varint reads varint field num of wire type typ.
// @ts-ignore: decorator
@inline function varint(end: usize, num: u32, typ: u32): u64 {
  if (typ == VARINT) return readVarint(end, num);
  return varintSlow(end, num, typ);
}

function varintSlow(end: usize, num: u32, typ: u32): u64 {
  if (!wantType(num, typ, VARINT)) return 0;
  return readVarint(end, num);
}

// item checks that repeated field num may take one more item.
// @ts-ignore: decorator
@inline function item(v: Vec, num: u32): bool {
  if (v.len < MAX_REPEATED) return true;
  fail(num, "more than 10000 items");
  return false;
}

// mapEntry decodes one map<string,string> entry of field num into m.
function mapEntry(m: Vec, end: usize, num: u32, typ: u32): void {
  if (!wantType(num, typ, LEN)) return;
  if ((m.len >> 1) >= MAX_REPEATED) { fail(num, "more than 10000 entries"); return; }
  const body = readLen(end, num);
  if (decodeError != 0) return;
  const e = rp;
  rp = e - <usize><u32>body;
  let k: Bytes = 0, v: Bytes = 0;
  enter(num, -1);
  while (rp < e && decodeError == 0) {
    const tag = readTag(e);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    if (f == 1) k = str(e, f, t, k);
    else if (f == 2) v = str(e, f, t, v);
    else skipValue(e, f, t);
  }
  leave();
  rp = e;
  m.push(k);
  m.push(v);
}

// body reads the length of message field num, leaves rp at the start of
// its body and returns the body's end (0: error).
// @ts-ignore: decorator
@inline function body(end: usize, num: u32, typ: u32): usize {
  if (typ != LEN) {
    wantType(num, typ, LEN);
    return 0;
  }
  const b = readLen(end, num);
  if (decodeError != 0) return 0;
  const e = rp;
  rp = e - <usize><u32>b;
  return e;
}

// ---- ConfigureRequest / ConfigureResponse ----

/** volhost_configure's request. */
@unmanaged
export class ConfigureRequest {
  /** The manifest's file name without .hcl. */
  moduleName: Bytes;
  /** The manifest's config block: use mapSize, mapKey, mapValue, mapGet. */
  config: Vec;
}

/** volhost_configure's response. */
@unmanaged
export class ConfigureResponse {
  /** The module's own version, shown in status and logs. */
  version: Bytes;
  /** csi-adapter only: the steps whose requests volhost_adapt_request changes (Bytes items). */
  adaptSteps: Vec;
  /** Non-empty: configuration refused. */
  error: Bytes;
}

export function decodeConfigureRequest(p: usize, n: i32): ConfigureRequest {
  const m = changetype<ConfigureRequest>(allocZero(offsetof<ConfigureRequest>()));
  m.config = newVec();
  if (!start("ConfigureRequest", p, n)) return m;
  const end = p + <usize>n;
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.moduleName = str(end, f, t, m.moduleName); break;
      case 2: mapEntry(m.config, end, f, t); break;
      default: skipValue(end, f, t);
    }
  }
  return m;
}

export function newConfigureResponse(): ConfigureResponse {
  const m = changetype<ConfigureResponse>(allocZero(offsetof<ConfigureResponse>()));
  m.adaptSteps = newVec();
  return m;
}

export function sizeConfigureResponse(m: ConfigureResponse): i32 {
  let s = sizeStr(m.version) + sizeStr(m.error);
  for (let i = 0; i < m.adaptSteps.len; i++) s += sizeLenField(blen(m.adaptSteps.at(i)));
  return s;
}

export function putConfigureResponse(m: ConfigureResponse): void {
  putStr(1, m.version);
  for (let i = 0; i < m.adaptSteps.len; i++) putStrAlways(2, m.adaptSteps.at(i));
  putStr(15, m.error);
}


// start begins decoding a top-level message of n bytes at p.
// @ts-ignore: decorator
@inline function start(name: string, p: usize, n: i32): bool {
  readStart(name, p);
  if (n > MAX_MESSAGE_SIZE) {
    fail(0, "too large", <u64>n);
    return false;
  }
  return true;
}

// ---- views ----

/** The volume a request is about. */
@unmanaged
export class VolumeView {
  namespace: Bytes;
  id: Bytes;
  pluginId: Bytes;
  accessMode: Bytes;
  attachmentMode: Bytes;
  /** The driver's volume ID. */
  externalId: Bytes;
  /** map<string,string>: mapGet etc. */
  context: Vec;
}

function newVolumeView(): VolumeView {
  const m = changetype<VolumeView>(allocZero(offsetof<VolumeView>()));
  m.context = newVec();
  return m;
}

// newVolumeViewFast is newVolumeView with the fields stored one by one
// (no memory.fill) and the context map's Vec in the same block.
// @ts-ignore: decorator
@inline function newVolumeViewFast(): VolumeView {
  const m = changetype<VolumeView>(alloc(offsetof<VolumeView>() + offsetof<Vec>()));
  const ctx = changetype<Vec>(changetype<usize>(m) + offsetof<VolumeView>());
  ctx.ptr = 0;
  ctx.len = 0;
  ctx.cap = 0;
  m.context = ctx;
  return m;
}

function mergeVolumeView(m: VolumeView, end: usize): void {
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.namespace = str(end, f, t, m.namespace); break;
      case 2: m.id = str(end, f, t, m.id); break;
      case 3: m.pluginId = str(end, f, t, m.pluginId); break;
      case 4: m.accessMode = str(end, f, t, m.accessMode); break;
      case 5: m.attachmentMode = str(end, f, t, m.attachmentMode); break;
      case 6: m.externalId = str(end, f, t, m.externalId); break;
      case 7: mapEntry(m.context, end, f, t); break;
      default: skipValue(end, f, t);
    }
  }
}

/** One claim on the volume. */
@unmanaged
export class ClaimView {
  allocId: Bytes;
  nodeId: Bytes;
  /** read | write */
  mode: Bytes;
  /** taken | node-detached | controller-detached | ready-to-free */
  state: Bytes;
  attempts: u32;
  /** gRPC code of the last CSI error, 0 for none. */
  lastErrorCode: u32;
  lastErrorKind: Bytes;
  externalNodeId: Bytes;
  accessMode: Bytes;
  attachmentMode: Bytes;
}

function mergeClaimView(m: ClaimView, end: usize): void {
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.allocId = str(end, f, t, m.allocId); break;
      case 2: m.nodeId = str(end, f, t, m.nodeId); break;
      case 3: m.mode = str(end, f, t, m.mode); break;
      case 4: m.state = str(end, f, t, m.state); break;
      case 5: m.attempts = <u32>varint(end, f, t); break;
      case 6: m.lastErrorCode = <u32>varint(end, f, t); break;
      case 7: m.lastErrorKind = str(end, f, t, m.lastErrorKind); break;
      case 8: m.externalNodeId = str(end, f, t, m.externalNodeId); break;
      case 9: m.accessMode = str(end, f, t, m.accessMode); break;
      case 10: m.attachmentMode = str(end, f, t, m.attachmentMode); break;
      default: skipValue(end, f, t);
    }
  }
}

/** An allocation holding a claim. */
@unmanaged
export class AllocView {
  id: Bytes;
  /** pending | running | complete | failed | lost | gone */
  clientStatus: Bytes;
  /** ms since the allocation became terminal; 0: not terminal or unknown. */
  terminalAgeMs: i64;
}

function mergeAllocView(m: AllocView, end: usize): void {
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.id = str(end, f, t, m.id); break;
      case 2: m.clientStatus = str(end, f, t, m.clientStatus); break;
      case 3: m.terminalAgeMs = <i64>varint(end, f, t); break;
      default: skipValue(end, f, t);
    }
  }
}

/** A node a claim is on. */
@unmanaged
export class NodeView {
  id: Bytes;
  /** ready | down | gone */
  status: Bytes;
  lastSeenAgeMs: i64;
  /** map<string,string>, adapter requests only. */
  meta: Vec;
  /** NodeGetInfo's node ID for the volume's plugin. */
  externalId: Bytes;
}

function newNodeView(): NodeView {
  const m = changetype<NodeView>(allocZero(offsetof<NodeView>()));
  m.meta = newVec();
  return m;
}

function mergeNodeView(m: NodeView, end: usize): void {
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.id = str(end, f, t, m.id); break;
      case 2: m.status = str(end, f, t, m.status); break;
      case 3: m.lastSeenAgeMs = <i64>varint(end, f, t); break;
      case 4: mapEntry(m.meta, end, f, t); break;
      case 5: m.externalId = str(end, f, t, m.externalId); break;
      default: skipValue(end, f, t);
    }
  }
}

/** The CSI plugin serving the volume. */
@unmanaged
export class PluginView {
  id: Bytes;
  provider: Bytes;
  publishUnpublish: bool;
  stageUnstage: bool;
}

function mergePluginView(m: PluginView, end: usize): void {
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.id = str(end, f, t, m.id); break;
      case 2: m.provider = str(end, f, t, m.provider); break;
      case 3: m.publishUnpublish = varint(end, f, t) != 0; break;
      case 4: m.stageUnstage = varint(end, f, t) != 0; break;
      default: skipValue(end, f, t);
    }
  }
}

// ---- PolicyRequest / PolicyResponse ----

/** volhost_decide_release's request. */
@unmanaged
export class PolicyRequest {
  nowUnixMs: i64;
  volume: VolumeView;
  claims: Vec;
  allocs: Vec;
  nodes: Vec;

  /** Number of claims. */
  // @ts-ignore: decorator
  @inline get claimCount(): i32 { return this.claims.len; }
  /** Claim i. */
  // @ts-ignore: decorator
  @inline claim(i: i32): ClaimView { return changetype<ClaimView>(<usize>this.claims.at(i)); }
  /** Number of allocations. */
  // @ts-ignore: decorator
  @inline get allocCount(): i32 { return this.allocs.len; }
  /** Allocation i. */
  // @ts-ignore: decorator
  @inline alloc(i: i32): AllocView { return changetype<AllocView>(<usize>this.allocs.at(i)); }
  /** Number of nodes. */
  // @ts-ignore: decorator
  @inline get nodeCount(): i32 { return this.nodes.len; }
  /** Node i. */
  // @ts-ignore: decorator
  @inline node(i: i32): NodeView { return changetype<NodeView>(<usize>this.nodes.at(i)); }
}

// The items a request's repeated fields have room for before their Vecs
// grow: a Vec that grows copies its items (a memory.copy, ABI.md section
// 12), which the usual request should not pay.
const ITEMS_ROOM = 16;

/**
 * Decodes a PolicyRequest at [p, p+n) into views in the call arena (see
 * wire.ts "fast readers"): the fields in volhost's order are read inline,
 * one compare each, and the field loop reads what is left, with the same
 * values and errors as it would have had alone.
 */
export function decodePolicyRequest(p: usize, n: i32): PolicyRequest {
  const m = changetype<PolicyRequest>(alloc(offsetof<PolicyRequest>()));
  m.nowUnixMs = 0;
  const vol = newVolumeViewFast();
  m.volume = vol;
  m.claims = newVecRoom(ITEMS_ROOM);
  m.allocs = newVecRoom(ITEMS_ROOM);
  m.nodes = newVecRoom(ITEMS_ROOM);
  if (!start("PolicyRequest", p, n)) return m;
  const end = p + <usize>n;
  // takeVarint reads up to 9 bytes past a tag: memory reaches well past
  // the request already (the arena, holding the views above, starts after
  // the request buffer), so this never grows it; it states the need.
  ensure(end + 16);

  m.nowUnixMs = <i64>takeVarint(end, 0x08);
  // Without the volume here (e == 0) every takeStr is 0: the fields are
  // set either way.
  let e = takeBody(end, 0x12);
  vol.namespace = takeStr(e, 0x0a);
  vol.id = takeStr(e, 0x12);
  vol.pluginId = takeStr(e, 0x1a);
  vol.accessMode = takeStr(e, 0x22);
  vol.attachmentMode = takeStr(e, 0x2a);
  vol.externalId = takeStr(e, 0x32);
  if (e != 0) {
    if (rp < e) { enter(2, -1); mergeVolumeView(vol, e); leave(); }
    rp = e;
    if (decodeError != 0) return m;
  }
  const claims = m.claims;
  while (claims.len < MAX_REPEATED && (e = takeBody(end, 0x1a)) != 0) {
    const c = changetype<ClaimView>(alloc(offsetof<ClaimView>()));
    c.allocId = takeStr(e, 0x0a);
    c.nodeId = takeStr(e, 0x12);
    c.mode = takeStr(e, 0x1a);
    c.state = takeStr(e, 0x22);
    c.attempts = <u32>takeVarint(e, 0x28);
    c.lastErrorCode = <u32>takeVarint(e, 0x30);
    c.lastErrorKind = takeStr(e, 0x3a);
    c.externalNodeId = takeStr(e, 0x42);
    c.accessMode = takeStr(e, 0x4a);
    c.attachmentMode = takeStr(e, 0x52);
    if (rp < e) { enter(3, claims.len); mergeClaimView(c, e); leave(); }
    rp = e;
    claims.push(<u64>changetype<usize>(c));
    if (decodeError != 0) return m;
  }
  const allocs = m.allocs;
  while (allocs.len < MAX_REPEATED && (e = takeBody(end, 0x22)) != 0) {
    const a = changetype<AllocView>(alloc(offsetof<AllocView>()));
    a.id = takeStr(e, 0x0a);
    a.clientStatus = takeStr(e, 0x12);
    a.terminalAgeMs = <i64>takeVarint(e, 0x18);
    if (rp < e) { enter(4, allocs.len); mergeAllocView(a, e); leave(); }
    rp = e;
    allocs.push(<u64>changetype<usize>(a));
    if (decodeError != 0) return m;
  }
  const nodes = m.nodes;
  while (nodes.len < MAX_REPEATED && (e = takeBody(end, 0x2a)) != 0) {
    const nd = changetype<NodeView>(alloc(offsetof<NodeView>() + offsetof<Vec>()));
    const meta = changetype<Vec>(changetype<usize>(nd) + offsetof<NodeView>());
    meta.ptr = 0;
    meta.len = 0;
    meta.cap = 0;
    nd.meta = meta;
    nd.id = takeStr(e, 0x0a);
    nd.status = takeStr(e, 0x12);
    nd.lastSeenAgeMs = <i64>takeVarint(e, 0x18);
    nd.externalId = takeStr(e, 0x2a); // 0 behind a meta entry (field 4): the loop reads both
    if (rp < e) { enter(5, nodes.len); mergeNodeView(nd, e); leave(); }
    rp = e;
    nodes.push(<u64>changetype<usize>(nd));
    if (decodeError != 0) return m;
  }
  // What is left, if anything: the field loop.
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.nowUnixMs = <i64>varint(end, f, t); break;
      case 2: {
        const e = body(end, f, t);
        if (e == 0) break;
        enter(f, -1);
        mergeVolumeView(m.volume, e);
        leave();
        break;
      }
      case 3: {
        if (!item(m.claims, f)) break;
        const e = body(end, f, t);
        if (e == 0) break;
        const c = changetype<ClaimView>(allocZero(offsetof<ClaimView>()));
        enter(f, m.claims.len);
        mergeClaimView(c, e);
        leave();
        m.claims.push(<u64>changetype<usize>(c));
        break;
      }
      case 4: {
        if (!item(m.allocs, f)) break;
        const e = body(end, f, t);
        if (e == 0) break;
        const a = changetype<AllocView>(allocZero(offsetof<AllocView>()));
        enter(f, m.allocs.len);
        mergeAllocView(a, e);
        leave();
        m.allocs.push(<u64>changetype<usize>(a));
        break;
      }
      case 5: {
        if (!item(m.nodes, f)) break;
        const e = body(end, f, t);
        if (e == 0) break;
        const nd = newNodeView();
        enter(f, m.nodes.len);
        mergeNodeView(nd, e);
        leave();
        m.nodes.push(<u64>changetype<usize>(nd));
        break;
      }
      default: skipValue(end, f, t);
    }
  }
  return m;
}

/** One claim's decision. */
@unmanaged
export class Decision {
  allocId: Bytes;
  action: i32;
  retryAfterMs: i64;
  reason: Bytes;
}

/** volhost_decide_release's response. */
@unmanaged
export class PolicyResponse {
  decisions: Vec;
  error: Bytes;

  /** Appends a decision and returns it (filled by the caller). */
  // @ts-ignore: decorator
  @inline add(allocId: Bytes, action: i32, retryAfterMs: i64, reason: Bytes): Decision {
    // Every field stored: no memory.fill (ABI.md section 12).
    const d = changetype<Decision>(alloc(offsetof<Decision>()));
    d.allocId = allocId;
    d.action = action;
    d.retryAfterMs = retryAfterMs;
    d.reason = reason;
    this.decisions.push(<u64>changetype<usize>(d));
    return d;
  }
  /** Decision i. */
  // @ts-ignore: decorator
  @inline decision(i: i32): Decision { return changetype<Decision>(<usize>this.decisions.at(i)); }
}

export function newPolicyResponse(): PolicyResponse {
  const m = changetype<PolicyResponse>(alloc(offsetof<PolicyResponse>()));
  m.decisions = newVecRoom(ITEMS_ROOM);
  m.error = 0;
  return m;
}

// Inline: encodePolicyResponse needs it per decision.
// @ts-ignore: decorator
@inline function sizeDecision(d: Decision): i32 {
  return sizeStr(d.allocId) + sizeU64(<u64><u32>d.action) + sizeU64(<u64>d.retryAfterMs) + sizeStr(d.reason);
}

export function sizePolicyResponse(m: PolicyResponse): i32 {
  let s = sizeStr(m.error);
  for (let i = 0; i < m.decisions.len; i++) s += sizeLenField(sizeDecision(m.decision(i)));
  return s;
}

export function putPolicyResponse(m: PolicyResponse): void {
  for (let i = 0; i < m.decisions.len; i++) {
    const d = m.decision(i);
    putTag(1, LEN);
    putVarint(<u64>sizeDecision(d));
    putStrInline(1, d.allocId);
    putU64(2, <u64><u32>d.action);
    putU64(3, <u64>d.retryAfterMs);
    putStrInline(4, d.reason);
  }
  putStr(15, m.error);
}

// putShortStr writes string field tag (one-byte tag, wire type LEN) of v
// at w, nothing when v is empty, and returns the end: a one-byte length
// inline, a longer one through putVarint.
// @ts-ignore: decorator
@inline function putShortStr(w: usize, tag: u32, v: Bytes): usize {
  const n = <usize><u32>v;
  if (n == 0) return w;
  store<u8>(w, <u8>tag);
  if (n < 0x80) {
    store<u8>(w + 1, <u8>n);
    w += 2;
  } else {
    writeStart(w + 1);
    putVarint(<u64>n);
    w = wp;
  }
  copyShort(w, <usize>(v >>> 32), n);
  return w + n;
}

// putSmallVarint writes varint field tag of x at w, nothing when x is 0,
// and returns the end: a value under 128 inline.
// @ts-ignore: decorator
@inline function putSmallVarint(w: usize, tag: u32, x: u64): usize {
  if (x == 0) return w;
  store<u8>(w, <u8>tag);
  if (x < 0x80) {
    store<u8>(w + 1, <u8>x);
    return w + 2;
  }
  writeStart(w + 1);
  putVarint(x);
  return wp;
}

/**
 * Encodes m (without error: serveRelease answers an error alone) at the
 * call arena's end in one pass over the decisions, each written inline
 * with its field header, and returns where it starts; wp is its end.
 */
export function encodePolicyResponse(m: PolicyResponse): usize {
  let w = arenaTop();
  const start = w;
  const ds = m.decisions;
  for (let i = 0, n = ds.len; i < n; i++) {
    const d = changetype<Decision>(<usize>ds.at(i));
    const size = sizeDecision(d);
    // The decision's tag, at most 5 bytes of length and its body.
    ensure(w + 6 + <usize>size);
    store<u8>(w, 0x0a);
    if (size < 0x80) {
      store<u8>(w + 1, <u8>size);
      w += 2;
    } else {
      writeStart(w + 1);
      putVarint(<u64>size);
      w = wp;
    }
    w = putShortStr(w, 0x0a, d.allocId);
    w = putSmallVarint(w, 0x10, <u64><u32>d.action);
    w = putSmallVarint(w, 0x18, <u64>d.retryAfterMs);
    w = putShortStr(w, 0x22, d.reason);
  }
  arenaCommit(w);
  wp = w;
  return start;
}

// ---- AdapterRequest / AdapterResponse ----

/** volhost_adapt_request's request. */
@unmanaged
export class AdapterRequest {
  /** node-unpublish | node-unstage | controller-unpublish | controller-publish | node-stage | node-publish */
  step: Bytes;
  claim: ClaimView;
  volume: VolumeView;
  node: NodeView;
  plugin: PluginView;
  nowUnixMs: i64;
}

export function decodeAdapterRequest(p: usize, n: i32): AdapterRequest {
  const m = changetype<AdapterRequest>(allocZero(offsetof<AdapterRequest>()));
  m.claim = changetype<ClaimView>(allocZero(offsetof<ClaimView>()));
  m.volume = newVolumeView();
  m.node = newNodeView();
  m.plugin = changetype<PluginView>(allocZero(offsetof<PluginView>()));
  if (!start("AdapterRequest", p, n)) return m;
  const end = p + <usize>n;
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    let e: usize = 0;
    switch (f) {
      case 1: m.step = str(end, f, t, m.step); break;
      case 2: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergeClaimView(m.claim, e); leave(); } break;
      case 3: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergeVolumeView(m.volume, e); leave(); } break;
      case 4: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergeNodeView(m.node, e); leave(); } break;
      case 5: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergePluginView(m.plugin, e); leave(); } break;
      case 6: m.nowUnixMs = <i64>varint(end, f, t); break;
      default: skipValue(end, f, t);
    }
  }
  return m;
}

/** volhost_adapt_request's response. */
@unmanaged
export class AdapterResponse {
  volumeId: Bytes;
  /** The host refuses an empty one. */
  nodeId: Bytes;
  /** Bytes items: secret keys the host fills in. */
  secretKeys: Vec;
  /** map<string,string>: push key, value pairs (or assign a request's map). */
  volumeContext: Vec;
  error: Bytes;
}

export function newAdapterResponse(): AdapterResponse {
  const m = changetype<AdapterResponse>(allocZero(offsetof<AdapterResponse>()));
  m.secretKeys = newVec();
  m.volumeContext = newVec();
  return m;
}

export function sizeAdapterResponse(m: AdapterResponse): i32 {
  let s = sizeStr(m.volumeId) + sizeStr(m.nodeId) + sizeMap(m.volumeContext) + sizeStr(m.error);
  for (let i = 0; i < m.secretKeys.len; i++) s += sizeLenField(blen(m.secretKeys.at(i)));
  return s;
}

export function putAdapterResponse(m: AdapterResponse): void {
  putStr(1, m.volumeId);
  putStr(2, m.nodeId);
  for (let i = 0; i < m.secretKeys.len; i++) putStrAlways(3, m.secretKeys.at(i));
  putMap(4, m.volumeContext);
  putStr(15, m.error);
}

// ---- ClassifyRequest / ClassifyResponse ----

/** volhost_classify_error's request. */
@unmanaged
export class ClassifyRequest {
  step: Bytes;
  /** gRPC status code. */
  code: u32;
  message: Bytes;
  attempts: u32;
  pluginId: Bytes;
  volumeId: Bytes;
}

export function decodeClassifyRequest(p: usize, n: i32): ClassifyRequest {
  const m = changetype<ClassifyRequest>(allocZero(offsetof<ClassifyRequest>()));
  if (!start("ClassifyRequest", p, n)) return m;
  const end = p + <usize>n;
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    switch (f) {
      case 1: m.step = str(end, f, t, m.step); break;
      case 2: m.code = <u32>varint(end, f, t); break;
      case 3: m.message = str(end, f, t, m.message); break;
      case 4: m.attempts = <u32>varint(end, f, t); break;
      case 5: m.pluginId = str(end, f, t, m.pluginId); break;
      case 6: m.volumeId = str(end, f, t, m.volumeId); break;
      default: skipValue(end, f, t);
    }
  }
  return m;
}

/** volhost_classify_error's response. */
@unmanaged
export class ClassifyResponse {
  outcome: i32;
  /** 0 on OUTCOME_RETRY: the host's backoff decides. */
  retryAfterMs: i64;
  reason: Bytes;
  error: Bytes;
}

export function newClassifyResponse(): ClassifyResponse {
  return changetype<ClassifyResponse>(allocZero(offsetof<ClassifyResponse>()));
}

export function sizeClassifyResponse(m: ClassifyResponse): i32 {
  return sizeU64(<u64><u32>m.outcome) + sizeU64(<u64>m.retryAfterMs) + sizeStr(m.reason) + sizeStr(m.error);
}

export function putClassifyResponse(m: ClassifyResponse): void {
  putU64(1, <u64><u32>m.outcome);
  putU64(2, <u64>m.retryAfterMs);
  putStr(3, m.reason);
  putStr(15, m.error);
}

// ---- FenceRequest / FenceResponse (ABI 1.1, optional export) ----

/** volhost_confirm_fence's request: a node the host lost (heartbeats stopped, not fenced). */
@unmanaged
export class FenceRequest {
  nowUnixMs: i64;
  /** status down or gone, lastSeenAgeMs, meta, externalId */
  node: NodeView;
  plugin: PluginView;
  /** how long the node has been down or gone through missed heartbeats */
  lostAgeMs: i64;
  statusReason: Bytes;
  /** a volume waiting on the node, and its claims there */
  volume: VolumeView;
  claims: Vec;
  /** earlier answers about this loss of the node */
  attempts: u32;

  /** Number of claims. */
  // @ts-ignore: decorator
  @inline get claimCount(): i32 { return this.claims.len; }
  /** Claim i. */
  // @ts-ignore: decorator
  @inline claim(i: i32): ClaimView { return changetype<ClaimView>(<usize>this.claims.at(i)); }
}

export function decodeFenceRequest(p: usize, n: i32): FenceRequest {
  const m = changetype<FenceRequest>(allocZero(offsetof<FenceRequest>()));
  m.node = newNodeView();
  m.plugin = changetype<PluginView>(allocZero(offsetof<PluginView>()));
  m.volume = newVolumeView();
  m.claims = newVec();
  if (!start("FenceRequest", p, n)) return m;
  const end = p + <usize>n;
  while (rp < end && decodeError == 0) {
    const tag = readTag(end);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    let e: usize = 0;
    switch (f) {
      case 1: m.nowUnixMs = <i64>varint(end, f, t); break;
      case 2: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergeNodeView(m.node, e); leave(); } break;
      case 3: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergePluginView(m.plugin, e); leave(); } break;
      case 4: m.lostAgeMs = <i64>varint(end, f, t); break;
      case 5: m.statusReason = str(end, f, t, m.statusReason); break;
      case 6: if ((e = body(end, f, t)) != 0) { enter(f, -1); mergeVolumeView(m.volume, e); leave(); } break;
      case 7: {
        if (!item(m.claims, f)) break;
        if ((e = body(end, f, t)) == 0) break;
        const c = changetype<ClaimView>(allocZero(offsetof<ClaimView>()));
        enter(f, m.claims.len);
        mergeClaimView(c, e);
        leave();
        m.claims.push(<u64>changetype<usize>(c));
        break;
      }
      case 8: m.attempts = <u32>varint(end, f, t); break;
      default: skipValue(end, f, t);
    }
  }
  return m;
}

/** volhost_confirm_fence's response. */
@unmanaged
export class FenceResponse {
  /** must be the request's node.id */
  nodeId: Bytes;
  /** the module attests the node is off */
  confirmed: bool;
  /** required when confirmed, at most 256 bytes: the fence's reason */
  reason: Bytes;
  /** ask again no sooner (0: the host's backoff) */
  retryAfterMs: i64;
  error: Bytes;
}

export function newFenceResponse(): FenceResponse {
  return changetype<FenceResponse>(allocZero(offsetof<FenceResponse>()));
}

export function sizeFenceResponse(m: FenceResponse): i32 {
  return sizeStr(m.nodeId) + sizeU64(m.confirmed ? 1 : 0) + sizeStr(m.reason) + sizeU64(<u64>m.retryAfterMs) + sizeStr(m.error);
}

export function putFenceResponse(m: FenceResponse): void {
  putStr(1, m.nodeId);
  putU64(2, m.confirmed ? 1 : 0);
  putStr(3, m.reason);
  putU64(4, <u64>m.retryAfterMs);
  putStr(15, m.error);
}
