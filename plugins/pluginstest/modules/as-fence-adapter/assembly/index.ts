// as-fence-adapter: the fence-adapter test module (../fence-adapter) in
// AssemblyScript, honest mode only: a csi-adapter speaking ABI 1.1 that
// confirms the fence of a lost node whose external ID or meta "instance"
// is listed in config "terminated" (comma separated), and otherwise says
// no with config "retry_after_ms". plugins/confirmfence_test.go checks it
// answers as the Go module does. Its CSI requests are the spec's defaults.

import {
  AdapterRequest, AdapterResponse, blen, Bytes, byteAt, bptr, ClassifyRequest, ClassifyResponse,
  ConfigureRequest, ConfigureResponse, FenceRequest, FenceResponse, lit, mapGet, OUTCOME_RETRY,
  serveAdapt, serveClassify, serveConfigure, serveConfirmFence, text, textBytes, textEnd, textStart, textU64,
} from "../../../../../abi/guest-as/assembly/index";

export { volhost_abi_version, volhost_buffer } from "../../../../../abi/guest-as/assembly/index";

export function volhost_configure(n: i32): i64 { return serveConfigure(n, configure); }
export function volhost_adapt_request(n: i32): i64 { return serveAdapt(n, adapt); }
export function volhost_classify_error(n: i32): i64 { return serveClassify(n, classify); }
export function volhost_confirm_fence(n: i32): i64 { return serveConfirmFence(n, confirm); }

// The config outlives the configure call (the arena does not): copied here.
const TERMINATED_MAX = 4096;
const terminatedBuf = memory.data(TERMINATED_MAX);
let terminatedLen: i32 = 0;
let retryAfterMs: i64 = 0;

function configure(req: ConfigureRequest, resp: ConfigureResponse): void {
  resp.version = lit("1.1.0");
  const t = mapGet(req.config, "terminated");
  terminatedLen = blen(t) < TERMINATED_MAX ? blen(t) : TERMINATED_MAX;
  if (terminatedLen > 0) memory.copy(terminatedBuf, bptr(t), <usize>terminatedLen);
  retryAfterMs = 0;
  const r = mapGet(req.config, "retry_after_ms");
  for (let i = 0; i < blen(r); i++) {
    const c = byteAt(r, i);
    if (c < 0x30 || c > 0x39) {
      textStart();
      text("config retry_after_ms is not a number of milliseconds");
      resp.error = textEnd();
      return;
    }
    retryAfterMs = retryAfterMs * 10 + <i64>(c - 0x30);
  }
}

function isSpace(c: u8): bool { return c == 0x20 || c == 0x09; }

// listed reports whether b is one of the comma-separated, trimmed items of
// the config's terminated list.
function listed(b: Bytes): bool {
  const n = blen(b);
  if (n == 0) return false;
  let i = 0;
  while (i < terminatedLen) {
    let j = i;
    while (j < terminatedLen && load<u8>(terminatedBuf + <usize>j) != 0x2c) j++;
    let s = i, e = j;
    while (s < e && isSpace(load<u8>(terminatedBuf + <usize>s))) s++;
    while (e > s && isSpace(load<u8>(terminatedBuf + <usize>(e - 1)))) e--;
    if (e - s == n && memory.compare(terminatedBuf + <usize>s, bptr(b), <usize>n) == 0) return true;
    i = j + 1;
  }
  return false;
}

function confirm(req: FenceRequest, resp: FenceResponse): void {
  const ext = req.node.externalId;
  const instance = mapGet(req.node.meta, "instance");
  let hit: Bytes = 0;
  if (listed(ext)) hit = ext;
  else if (listed(instance)) hit = instance;
  if (hit == 0) {
    resp.reason = lit("instance not listed as terminated");
    resp.retryAfterMs = retryAfterMs;
    return;
  }
  resp.confirmed = true;
  textStart();
  text("instance ");
  textBytes(hit);
  text(" is listed as terminated");
  resp.reason = textEnd();
}

function adapt(req: AdapterRequest, resp: AdapterResponse): void {
  let node = req.node.externalId;
  if (node == 0) node = req.claim.externalNodeId;
  if (node == 0) node = req.node.id;
  resp.volumeId = req.volume.externalId;
  resp.nodeId = node;
  resp.volumeContext = req.volume.context;
}

function classify(req: ClassifyRequest, resp: ClassifyResponse): void {
  resp.outcome = OUTCOME_RETRY;
  textStart();
  text("code ");
  textU64(<u64>req.code);
  text(": retry");
  resp.reason = textEnd();
}
