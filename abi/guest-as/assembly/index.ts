// volhost guest SDK for AssemblyScript: ABI v1 exports over the wire
// messages, with no runtime, no GC and no imports (see ../README.md).
//
// A module's entry file re-exports the fixed exports and defines the
// decision exports of its kind by handing its handler to serve*:
//
//   export { volhost_abi_version, volhost_buffer } from ".../abi/guest-as/assembly/index";
//   export function volhost_configure(n: i32): i64 { return serveConfigure(n, configure); }
//   export function volhost_decide_release(n: i32): i64 { return serveRelease(n, decide); }
//
// A handler fills in the response it is given; setting its error field
// fails the call (ABI.md section 7: guest-error), and the SDK then sends a
// response holding only the error, as the Go SDK does. Bad input never
// traps: a request that does not decode is answered with an error.

import { Bytes, bytesOf, text, textEnd, textStart, textU64 } from "./bytes";
import { alloc, arenaReset, requestBase, requestBuffer, requestCap } from "./mem";
import {
  AdapterRequest, AdapterResponse, ClassifyRequest, ClassifyResponse, ConfigureRequest, ConfigureResponse,
  decodeAdapterRequest, decodeClassifyRequest, decodeConfigureRequest, decodeFenceRequest, decodePolicyRequest,
  FenceRequest, FenceResponse, newAdapterResponse, newClassifyResponse, newConfigureResponse, newFenceResponse,
  encodePolicyResponse, newPolicyResponse, putFenceResponse, sizeFenceResponse,
  PolicyRequest, PolicyResponse, putAdapterResponse, putClassifyResponse, putConfigureResponse,
  sizeAdapterResponse, sizeClassifyResponse, sizeConfigureResponse,
} from "./messages";
import { decodeError, putStr, sizeStr, wp, writeStart } from "./wire";

export * from "./bytes";
export * from "./messages";
export { Vec } from "./wire";
export { MAX_MESSAGE_SIZE, MAX_REPEATED } from "./mem";

/** The ABI version this SDK speaks (ABI.md section 10). */
export const ABI_VERSION: i32 = 1;
/**
 * The minor version it knows: 1.1 adds the optional export
 * volhost_confirm_fence (serveConfirmFence). A module speaks 1.1 by
 * defining that export; the host checks its signature at load.
 */
export const ABI_MINOR_VERSION: i32 = 1;

/** Export volhost_abi_version: the version marker. */
export function volhost_abi_version(): i32 { return ABI_VERSION; }

/** Export volhost_buffer: room for a request of size bytes (0 when it cannot). */
export function volhost_buffer(size: i32): i32 { return <i32>requestBuffer(size); }

/** Handlers: fill in resp from req; set resp.error to fail the call. */
export type ConfigureHandler = (req: ConfigureRequest, resp: ConfigureResponse) => void;
export type ReleaseHandler = (req: PolicyRequest, resp: PolicyResponse) => void;
export type AdaptHandler = (req: AdapterRequest, resp: AdapterResponse) => void;
export type ClassifyHandler = (req: ClassifyRequest, resp: ClassifyResponse) => void;
export type ConfirmFenceHandler = (req: FenceRequest, resp: FenceResponse) => void;

// pack is ABI.md section 5's result: ptr << 32 | len (len 0: empty response).
function pack(p: usize, n: i32): i64 {
  if (n == 0) return 0;
  return <i64>((<u64>p << 32) | <u64><u32>n);
}

// lengthError checks the host's request length against the buffer: 0 when
// it fits, else the error the Go SDK gives. Inline: the check is two
// compares, where a call is a probe (ABI.md section 12).
// @ts-ignore: decorator
@inline function lengthError(n: i32): Bytes {
  if (n >= 0 && <usize>n <= requestCap()) return 0;
  return lengthErrorText(n);
}

function lengthErrorText(n: i32): Bytes {
  textStart();
  text("request length ");
  if (n < 0) { text("-"); textU64(<u64>(-(<i64>n))); } else textU64(<u64>n);
  text(" does not fit the ");
  textU64(<u64>requestCap());
  text("-byte buffer from volhost_buffer");
  return textEnd();
}

// errorOnly encodes a response holding only field 15, error.
function errorOnly(err: Bytes): i64 {
  const n = sizeStr(err);
  const p = alloc(<usize>n);
  writeStart(p);
  putStr(15, err);
  return pack(p, n);
}

// The module name the host gave in its configure call, kept beyond the call
// (the arena is not) in a static buffer.
const MODULE_NAME_MAX = 256;
const moduleNameBuf = memory.data(MODULE_NAME_MAX);
let moduleNameLen: i32 = 0;

/** The module's name from the configure request (at most 256 bytes kept). */
export function moduleName(): Bytes { return bytesOf(moduleNameBuf, moduleNameLen); }

/** Serves volhost_configure with handler; adaptSteps may be filled by it. */
export function serveConfigure(n: i32, handler: ConfigureHandler): i64 {
  arenaReset();
  const resp = newConfigureResponse();
  const lerr = lengthError(n);
  if (lerr != 0) return errorOnly(lerr);
  const req = decodeConfigureRequest(requestBase(), n);
  if (decodeError != 0) {
    resp.error = decodeError;
  } else {
    const name = req.moduleName;
    moduleNameLen = <i32><u32>name < MODULE_NAME_MAX ? <i32><u32>name : MODULE_NAME_MAX;
    if (moduleNameLen > 0) memory.copy(moduleNameBuf, <usize>(name >>> 32), <usize>moduleNameLen);
    handler(req, resp);
  }
  const size = sizeConfigureResponse(resp);
  const p = alloc(<usize>size);
  writeStart(p);
  putConfigureResponse(resp);
  return pack(p, <i32>(wp - p));
}

/** Serves volhost_decide_release with handler. */
export function serveRelease(n: i32, handler: ReleaseHandler): i64 {
  arenaReset();
  const lerr = lengthError(n);
  if (lerr != 0) return errorOnly(lerr);
  const req = decodePolicyRequest(requestBase(), n);
  if (decodeError != 0) return errorOnly(decodeError);
  const resp = newPolicyResponse();
  handler(req, resp);
  if (resp.error != 0) return errorOnly(resp.error);
  const p = encodePolicyResponse(resp);
  return pack(p, <i32>(wp - p));
}

/** Serves volhost_adapt_request with handler. */
export function serveAdapt(n: i32, handler: AdaptHandler): i64 {
  arenaReset();
  const lerr = lengthError(n);
  if (lerr != 0) return errorOnly(lerr);
  const req = decodeAdapterRequest(requestBase(), n);
  if (decodeError != 0) return errorOnly(decodeError);
  const resp = newAdapterResponse();
  handler(req, resp);
  if (resp.error != 0) return errorOnly(resp.error);
  const size = sizeAdapterResponse(resp);
  const p = alloc(<usize>size);
  writeStart(p);
  putAdapterResponse(resp);
  return pack(p, <i32>(wp - p));
}

/** Serves volhost_classify_error with handler. */
export function serveClassify(n: i32, handler: ClassifyHandler): i64 {
  arenaReset();
  const lerr = lengthError(n);
  if (lerr != 0) return errorOnly(lerr);
  const req = decodeClassifyRequest(requestBase(), n);
  if (decodeError != 0) return errorOnly(decodeError);
  const resp = newClassifyResponse();
  handler(req, resp);
  if (resp.error != 0) return errorOnly(resp.error);
  const size = sizeClassifyResponse(resp);
  const p = alloc(<usize>size);
  writeStart(p);
  putClassifyResponse(resp);
  return pack(p, <i32>(wp - p));
}

/**
 * Serves volhost_confirm_fence (ABI 1.1, csi-adapter, optional) with
 * handler. Define the export only in a module that answers it:
 *
 *   export function volhost_confirm_fence(n: i32): i64 { return serveConfirmFence(n, confirm); }
 *
 * resp.nodeId starts as req.node.id (the host refuses an answer about
 * another node); set resp.confirmed with a resp.reason (at most 256
 * bytes) to attest the node is off.
 */
export function serveConfirmFence(n: i32, handler: ConfirmFenceHandler): i64 {
  arenaReset();
  const lerr = lengthError(n);
  if (lerr != 0) return errorOnly(lerr);
  const req = decodeFenceRequest(requestBase(), n);
  if (decodeError != 0) return errorOnly(decodeError);
  const resp = newFenceResponse();
  resp.nodeId = req.node.id;
  handler(req, resp);
  if (resp.error != 0) return errorOnly(resp.error);
  const size = sizeFenceResponse(resp);
  const p = alloc(<usize>size);
  writeStart(p);
  putFenceResponse(resp);
  return pack(p, <i32>(wp - p));
}

// ---- logging (imports volhost.log and volhost.log_level only when used) ----

/** Log levels (go-hclog numbering, ABI.md section 3). */
export const LOG_TRACE: i32 = 1;
export const LOG_DEBUG: i32 = 2;
export const LOG_INFO: i32 = 3;
export const LOG_WARN: i32 = 4;
export const LOG_ERROR: i32 = 5;

// @ts-ignore: decorator
@external("volhost", "log")
declare function hostLog(level: i32, ptr: usize, len: i32): void;

// @ts-ignore: decorator
@external("volhost", "log_level")
declare function hostLogLevel(): i32;

/** Reports whether the host records lines at level (format nothing otherwise). */
export function logEnabled(level: i32): bool { return level >= hostLogLevel(); }

/** Writes msg as one log line at level under the module's logger. */
export function log(level: i32, msg: Bytes): void {
  if (msg == 0 || !logEnabled(level)) return;
  hostLog(level, <usize>(msg >>> 32), <i32><u32>msg);
}
