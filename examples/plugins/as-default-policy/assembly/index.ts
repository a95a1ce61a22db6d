// as-default-policy: the default release policy (abi/defaultpolicy) as an
// AssemblyScript module. It gives the same decisions, reasons and
// retry_after_ms as defaultpolicy.Decide for every request, in claim order
// (plugins/asguest_test.go compares them), at a fraction of a Go guest's
// per-call cost (BenchmarkGuestCost).
//
// For each claim: its allocation pending, running or of an unknown status:
// WAIT (retry 0: the host's backoff), "allocation <status>"; terminal
// (complete, failed, lost) or gone (status "gone" or absent): RELEASE,
// or RELEASE_SKIP_NODE when the claim is still "taken" and its node is down
// or gone (a dead node cannot answer NodeUnpublish, and waiting for it
// leaves its claims never freed: hashicorp/nomad#12346).

import {
  ACTION_RELEASE, ACTION_RELEASE_SKIP_NODE, ACTION_WAIT, AllocView, blen, bptr, byteAt, Bytes, bytesEqual, ConfigureRequest,
  ConfigureResponse, eq, lit, mapKey, mapSize, NodeView, PolicyRequest, PolicyResponse, serveConfigure,
  serveRelease, text, textBytes, textEnd, textQuote, textStart,
} from "../../../../abi/guest-as/assembly/index";
import { sortedDistinctKeys } from "../../../../abi/guest-as/assembly/keys";

export { volhost_abi_version, volhost_buffer } from "../../../../abi/guest-as/assembly/index";

export function volhost_configure(n: i32): i64 { return serveConfigure(n, configure); }
export function volhost_decide_release(n: i32): i64 { return serveRelease(n, decide); }

// configure takes no settings; a key is a manifest mistake and is refused
// with the Go module's words: `default-policy takes no config, got keys ["a" "b"]`.
function configure(req: ConfigureRequest, resp: ConfigureResponse): void {
  resp.version = lit("1.0.0");
  if (mapSize(req.config) == 0) return;
  const keys = sortedDistinctKeys(req.config);
  textStart();
  text("default-policy takes no config, got keys [");
  for (let i = 0; i < keys.len; i++) {
    if (i > 0) text(" ");
    textQuote(keys.at(i));
  }
  text("]");
  resp.error = textEnd();
}

// Allocation status kinds (defaultpolicy's allocKind).
const KIND_OTHER = 0;
const KIND_PENDING = 1;
const KIND_RUNNING = 2;
const KIND_COMPLETE = 3;
const KIND_FAILED = 4;
const KIND_LOST = 5;
const KIND_GONE = 6;

// kindOf classifies status as defaultpolicy's kindOf does: its first byte
// picks the one candidate, whose length and two 4-byte words (the first
// four bytes and the last four, little-endian, overlapping for a 4-byte
// status) are then compared: no loop over the bytes and no call, each a
// probe under the host's call timeout (ABI.md section 12).
// @ts-ignore: decorator
@inline function kindOf(status: Bytes): i32 {
  const n = blen(status);
  if (n < 4) return KIND_OTHER; // no known status is shorter
  const p = bptr(status);
  const first = load<u32>(p), last = load<u32>(p + <usize>n - 4);
  switch (<u32>load<u8>(p)) {
    case 0x70: return n == 7 && first == 0x646e6570 && last == 0x676e6964 ? KIND_PENDING : KIND_OTHER; // "pend" "ding"
    case 0x72: return n == 7 && first == 0x6e6e7572 && last == 0x676e696e ? KIND_RUNNING : KIND_OTHER; // "runn" "ning"
    case 0x63: return n == 8 && first == 0x706d6f63 && last == 0x6574656c ? KIND_COMPLETE : KIND_OTHER; // "comp" "lete"
    case 0x66: return n == 6 && first == 0x6c696166 && last == 0x64656c69 ? KIND_FAILED : KIND_OTHER; // "fail" "iled"
    case 0x6c: return n == 4 && first == 0x74736f6c ? KIND_LOST : KIND_OTHER; // "lost"
    case 0x67: return n == 4 && first == 0x656e6f67 ? KIND_GONE : KIND_OTHER; // "gone"
  }
  return KIND_OTHER;
}

// sameId compares two IDs: lengths and last bytes first (the IDs of one
// request usually differ there: alloc-1, alloc-2), the rest only then.
// @ts-ignore: decorator
@inline function sameId(a: Bytes, b: Bytes): bool {
  const n = blen(a);
  return n == blen(b) && (n == 0 || (byteAt(a, n - 1) == byteAt(b, n - 1) && bytesEqual(a, b)));
}

// findAlloc is the allocation with id, the last one when IDs repeat (as
// defaultpolicy.Index), or null.
// @ts-ignore: decorator
@inline function findAlloc(req: PolicyRequest, id: Bytes): AllocView | null {
  for (let i = req.allocCount - 1; i >= 0; i--) {
    const a = req.alloc(i);
    if (sameId(a.id, id)) return a;
  }
  return null;
}

// @ts-ignore: decorator
@inline function findNode(req: PolicyRequest, id: Bytes): NodeView | null {
  for (let i = req.nodeCount - 1; i >= 0; i--) {
    const n = req.node(i);
    if (sameId(n.id, id)) return n;
  }
  return null;
}

// The hash set distinctIds uses: 1,024 slots, each the call number that
// last set it, so that no call clears it (a memory.fill, or 128 stores).
// The numbers wrap after 2^32 calls, and then the set is cleared once.
const SEEN_SLOTS = 1024;
const seen = memory.data(SEEN_SLOTS * 4);
let seenCall: u32 = 0;

// distinctIds reports whether the allocations' IDs certainly differ, as
// defaultpolicy's distinctIDs judges it: a hash of each ID's length and
// three of its bytes in a 1,024-slot set, one loop iteration per
// allocation and no comparison of IDs. A collision only means "not known":
// the lookups then scan.
// @ts-ignore: decorator
@inline function distinctIds(req: PolicyRequest): bool {
  if (++seenCall == 0) {
    memory.fill(seen, 0, SEEN_SLOTS * 4);
    seenCall = 1;
  }
  const call = seenCall;
  for (let i = 0, n = req.allocCount; i < n; i++) {
    const id = req.alloc(i).id;
    const len = blen(id);
    if (len == 0) return false;
    let h = <u32>len ^ (<u32>byteAt(id, 0) << 8) ^ (<u32>byteAt(id, len >> 1) << 16) ^ (<u32>byteAt(id, len - 1) << 24);
    h = (h * 0x9e3779b1) >>> 22; // Fibonacci hashing to 10 bits
    const slot = seen + (<usize>h << 2);
    if (load<u32>(slot) == call) return false;
    store<u32>(slot, call);
  }
  return true;
}

// decide is defaultpolicy.DecideInto: the allocation at the claim's own
// position when the IDs are distinct (the watcher lists one allocation per
// claim, in claim order), else the backward scan. Everything per claim is
// inline, so the call's only function entries are the SDK's, and the
// literals the claims are compared with are looked up once per call.
function decide(req: PolicyRequest, resp: PolicyResponse): void {
  const taken = lit("taken"), down = lit("down"), gone = lit("gone");
  const distinct = distinctIds(req);
  for (let i = 0, n = req.claimCount; i < n; i++) {
    const c = req.claim(i);
    let a: AllocView | null = null;
    if (distinct && i < req.allocCount && sameId(req.alloc(i).id, c.allocId)) a = req.alloc(i);
    else a = findAlloc(req, c.allocId);

    // allocStatus: absent is "gone", an empty status "unknown".
    let status: Bytes = 0;
    let kind = KIND_GONE;
    if (a != null) {
      if (a.clientStatus == 0) { kind = KIND_OTHER; status = lit("unknown"); }
      else { status = a.clientStatus; kind = kindOf(status); }
    }
    if (kind < KIND_COMPLETE) {
      resp.add(c.allocId, ACTION_WAIT, 0, reason(kind, status));
      continue;
    }
    if (bytesEqual(c.state, taken)) {
      const nd = findNode(req, c.nodeId);
      // nodeStatus: absent is "gone".
      const isDown = nd != null && bytesEqual(nd.status, down);
      if (isDown || nd == null || bytesEqual(nd.status, gone)) {
        resp.add(c.allocId, ACTION_RELEASE_SKIP_NODE, 0, skipReason(kind, isDown));
        continue;
      }
    }
    resp.add(c.allocId, ACTION_RELEASE, 0, reason(kind, status));
  }
}

// skipReason explains a release that skips the node step (kind is terminal).
// @ts-ignore: decorator
@inline function skipReason(kind: i32, down: bool): Bytes {
  if (down) {
    switch (kind) {
      case KIND_COMPLETE: return lit("allocation complete, node down: skip node step");
      case KIND_FAILED: return lit("allocation failed, node down: skip node step");
      case KIND_LOST: return lit("allocation lost, node down: skip node step");
    }
    return lit("allocation gone, node down: skip node step");
  }
  switch (kind) {
    case KIND_COMPLETE: return lit("allocation complete, node gone: skip node step");
    case KIND_FAILED: return lit("allocation failed, node gone: skip node step");
    case KIND_LOST: return lit("allocation lost, node gone: skip node step");
  }
  return lit("allocation gone, node gone: skip node step");
}

// reason is "allocation <status>", a cached literal for the known statuses.
// @ts-ignore: decorator
@inline function reason(kind: i32, status: Bytes): Bytes {
  switch (kind) {
    case KIND_PENDING: return lit("allocation pending");
    case KIND_RUNNING: return lit("allocation running");
    case KIND_COMPLETE: return lit("allocation complete");
    case KIND_FAILED: return lit("allocation failed");
    case KIND_LOST: return lit("allocation lost");
    case KIND_GONE: return lit("allocation gone");
  }
  return otherReason(status);
}

// otherReason is "allocation <status>" for a status this version does not know.
function otherReason(status: Bytes): Bytes {
  textStart();
  text("allocation ");
  textBytes(status);
  return textEnd();
}
