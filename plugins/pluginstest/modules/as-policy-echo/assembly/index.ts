// as-policy-echo: answers volhost_decide_release with an error holding
// every field of the request as the AssemblyScript SDK decoded it, so a
// test can compare the SDK's views with abi's decode field by field
// (plugins/asguest_test.go TestASPolicyRequestViews): the default policy
// reads only a few fields, and the SDK's whole-message decoders read them
// all. Strings are written as LEN:BYTES, numbers in decimal, each field
// followed by "|"; maps as their distinct keys in order, each with the
// last value given for it (what abi's map holds). Never loaded by a host.

import {
  Bytes, blen, mapGetBytes, PolicyRequest, PolicyResponse, serveRelease, text, textBytes, textEnd, textStart, textU64, Vec,
} from "../../../../../abi/guest-as/assembly/index";
import { sortedDistinctKeys } from "../../../../../abi/guest-as/assembly/keys";
import { alloc } from "../../../../../abi/guest-as/assembly/mem";

export { volhost_abi_version, volhost_buffer } from "../../../../../abi/guest-as/assembly/index";

export function volhost_decide_release(n: i32): i64 { return serveRelease(n, echo); }

function s(b: Bytes): void {
  textU64(<u64>blen(b));
  text(":");
  textBytes(b);
  text("|");
}

function u(x: u64): void {
  textU64(x);
  text("|");
}

// m writes map v through its sorted distinct keys (sortedDistinctKeys of v,
// made before the text was started: it allocates).
function m(v: Vec, keys: Vec): void {
  u(<u64>keys.len);
  for (let i = 0; i < keys.len; i++) {
    s(keys.at(i));
    s(mapGetBytes(v, keys.at(i)));
  }
}

function echo(req: PolicyRequest, resp: PolicyResponse): void {
  // The maps' keys first: nothing may allocate while the text is built.
  const volKeys = sortedDistinctKeys(req.volume.context);
  const nodeKeys = alloc(<usize>req.nodeCount << 2);
  for (let i = 0; i < req.nodeCount; i++) {
    store<usize>(nodeKeys + (<usize>i << 2), changetype<usize>(sortedDistinctKeys(req.node(i).meta)));
  }
  textStart();
  u(<u64>req.nowUnixMs);
  const v = req.volume;
  s(v.namespace); s(v.id); s(v.pluginId); s(v.accessMode); s(v.attachmentMode); s(v.externalId);
  m(v.context, volKeys);
  u(<u64>req.claimCount);
  for (let i = 0; i < req.claimCount; i++) {
    const c = req.claim(i);
    s(c.allocId); s(c.nodeId); s(c.mode); s(c.state); u(<u64>c.attempts); u(<u64>c.lastErrorCode);
    s(c.lastErrorKind); s(c.externalNodeId); s(c.accessMode); s(c.attachmentMode);
  }
  u(<u64>req.allocCount);
  for (let i = 0; i < req.allocCount; i++) {
    const a = req.alloc(i);
    s(a.id); s(a.clientStatus); u(<u64>a.terminalAgeMs);
  }
  u(<u64>req.nodeCount);
  for (let i = 0; i < req.nodeCount; i++) {
    const nd = req.node(i);
    s(nd.id); s(nd.status); u(<u64>nd.lastSeenAgeMs);
    m(nd.meta, changetype<Vec>(load<usize>(nodeKeys + (<usize>i << 2))));
    s(nd.externalId);
  }
  resp.error = textEnd();
}
