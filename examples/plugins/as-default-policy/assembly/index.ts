// as-default-policy: the default release policy (abi/defaultpolicy) as an
// AssemblyScript module. It gives the same decisions, reasons and
// retry_after_ms as defaultpolicy.Decide for every request, in claim order
// (plugins/asguest_test.go compares them), at a fraction of a Go guest's
// per-call cost (issue 4).
//
// For each claim: its allocation pending, running or of an unknown status:
// WAIT (retry 0: the host's backoff), "allocation <status>"; terminal
// (complete, failed, lost) or gone (status "gone" or absent): RELEASE,
// or RELEASE_SKIP_NODE when the claim is still "taken" and its node is down
// or gone (ANCHORS pain 1: a dead node cannot answer NodeUnpublish).

import {
  ACTION_RELEASE, ACTION_RELEASE_SKIP_NODE, ACTION_WAIT, AllocView, blen, byteAt, Bytes, bytesEqual, ConfigureRequest,
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

function kindOf(status: Bytes): i32 {
  if (eq(status, "pending")) return KIND_PENDING;
  if (eq(status, "running")) return KIND_RUNNING;
  if (eq(status, "complete")) return KIND_COMPLETE;
  if (eq(status, "failed")) return KIND_FAILED;
  if (eq(status, "lost")) return KIND_LOST;
  if (eq(status, "gone")) return KIND_GONE;
  return KIND_OTHER;
}

// sameId compares two IDs: lengths and last bytes inline (the IDs of one
// request usually differ there: alloc-1, alloc-2), the rest only then.
// @ts-ignore: decorator
@inline function sameId(a: Bytes, b: Bytes): bool {
  const n = blen(a);
  return n == blen(b) && (n == 0 || (byteAt(a, n - 1) == byteAt(b, n - 1) && bytesEqual(a, b)));
}

// findAlloc is the allocation with id, the last one when IDs repeat (as
// defaultpolicy.Index), or null.
function findAlloc(req: PolicyRequest, id: Bytes): AllocView | null {
  for (let i = req.allocCount - 1; i >= 0; i--) {
    const a = req.alloc(i);
    if (sameId(a.id, id)) return a;
  }
  return null;
}

function findNode(req: PolicyRequest, id: Bytes): NodeView | null {
  for (let i = req.nodeCount - 1; i >= 0; i--) {
    const n = req.node(i);
    if (sameId(n.id, id)) return n;
  }
  return null;
}

function decide(req: PolicyRequest, resp: PolicyResponse): void {
  for (let i = 0, n = req.claimCount; i < n; i++) {
    const c = req.claim(i);
    const a = findAlloc(req, c.allocId);

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
    if (eq(c.state, "taken")) {
      const nd = findNode(req, c.nodeId);
      // nodeStatus: absent is "gone".
      const down = nd != null && eq(nd.status, "down");
      const gone = nd == null || eq(nd.status, "gone");
      if (down || gone) {
        resp.add(c.allocId, ACTION_RELEASE_SKIP_NODE, 0, skipReason(kind, down));
        continue;
      }
    }
    resp.add(c.allocId, ACTION_RELEASE, 0, reason(kind, status));
  }
}

// skipReason explains a release that skips the node step (kind is terminal).
function skipReason(kind: i32, down: bool): Bytes {
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
function reason(kind: i32, status: Bytes): Bytes {
  switch (kind) {
    case KIND_PENDING: return lit("allocation pending");
    case KIND_RUNNING: return lit("allocation running");
    case KIND_COMPLETE: return lit("allocation complete");
    case KIND_FAILED: return lit("allocation failed");
    case KIND_LOST: return lit("allocation lost");
    case KIND_GONE: return lit("allocation gone");
  }
  textStart();
  text("allocation ");
  textBytes(status);
  return textEnd();
}
