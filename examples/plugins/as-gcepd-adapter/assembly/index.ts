// as-gcepd-adapter: the GCE persistent-disk CSI adapter
// (examples/plugins/gcepd-adapter) as an AssemblyScript module, with the
// same responses for every adapt and classify request and the same
// adapt_steps (plugins/asguest_test.go compares them with the Go module).
//
// adapt: the volume ID is the volume's external ID
// (projects/P/zones/Z/disks/D); the node ID is built from node metadata
// when gce.project and gce.zone are set (instance from gce.instance, else
// the node's ID, else the claim's node ID), otherwise it is the ID the
// node's plugin reported (NodeGetInfo), then the one recorded on the claim,
// which survives the node being gone (hashicorp/nomad#25349: "missing
// external node ID" after the node went). The driver rejects
// an empty node ID, so no ID is an error, not a guess.
//
// classify: NotFound is retried at every step (at an unpublish or unstage
// step saying the disk or instance may be gone: the host refuses DONE for
// a failed step). Unimplemented, InvalidArgument and
// PermissionDenied are fatal; Aborted, Unavailable, DeadlineExceeded,
// ResourceExhausted, Canceled and Internal may still be in progress: retry
// after the host's backoff; any other code: retry.

import {
  AdapterRequest, AdapterResponse, Bytes, ClassifyRequest, ClassifyResponse, ConfigureRequest,
  ConfigureResponse, hasSuffix, lit, mapGet, mapSize, OUTCOME_FATAL, OUTCOME_RETRY,
  serveAdapt, serveClassify, serveConfigure, text, textBytes, textEnd, textQuote, textStart, textU64,
} from "../../../../abi/guest-as/assembly/index";
import { sortedDistinctKeys } from "../../../../abi/guest-as/assembly/keys";

export { volhost_abi_version, volhost_buffer } from "../../../../abi/guest-as/assembly/index";

export function volhost_configure(n: i32): i64 { return serveConfigure(n, configure); }
export function volhost_adapt_request(n: i32): i64 { return serveAdapt(n, adapt); }
export function volhost_classify_error(n: i32): i64 { return serveClassify(n, classify); }

// configure takes no settings; a key is a manifest mistake and is refused.
// adapt_steps: only the controller calls carry a node ID, and the driver
// wants its own projects/P/zones/Z/instances/N form there; NodeUnpublish and
// NodeUnstage carry the volume ID alone, the spec's default, so the host
// builds those without a Wasm call (ABI.md section 4).
function configure(req: ConfigureRequest, resp: ConfigureResponse): void {
  resp.version = lit("1.0.0");
  resp.adaptSteps.push(lit("controller-publish"));
  resp.adaptSteps.push(lit("controller-unpublish"));
  if (mapSize(req.config) == 0) return;
  const keys = sortedDistinctKeys(req.config);
  textStart();
  text("gcepd-adapter takes no config, got keys [");
  for (let i = 0; i < keys.len; i++) {
    if (i > 0) text(" ");
    textQuote(keys.at(i));
  }
  text("]");
  resp.error = textEnd();
}

function adapt(req: AdapterRequest, resp: AdapterResponse): void {
  const vol = req.volume;
  if (vol.externalId == 0) {
    textStart();
    text("volume ");
    textBytes(vol.namespace);
    text("/");
    textBytes(vol.id);
    text(" has no external ID");
    resp.error = textEnd();
    return;
  }
  let nodeId: Bytes = 0;
  const meta = req.node.meta;
  const project = mapGet(meta, "gce.project"), zone = mapGet(meta, "gce.zone");
  if (project != 0 && zone != 0) {
    let instance = mapGet(meta, "gce.instance");
    if (instance == 0) instance = req.node.id;
    if (instance == 0) instance = req.claim.nodeId;
    if (instance != 0) {
      textStart();
      text("projects/");
      textBytes(project);
      text("/zones/");
      textBytes(zone);
      text("/instances/");
      textBytes(instance);
      nodeId = textEnd();
    }
  }
  if (nodeId == 0) nodeId = req.node.externalId;
  if (nodeId == 0) nodeId = req.claim.externalNodeId;
  if (nodeId == 0) {
    textStart();
    text("no external node ID for node ");
    textQuote(req.claim.nodeId);
    text(": set node meta gce.project and gce.zone, or register the node's plugin");
    resp.error = textEnd();
    return;
  }
  resp.volumeId = vol.externalId;
  resp.nodeId = nodeId;
  // Stage and publish carry the volume context; release steps have none.
  if (mapSize(vol.context) > 0 && !releaseStep(req.step)) resp.volumeContext = vol.context;
}

// releaseStep reports whether step detaches (unpublish or unstage).
function releaseStep(step: Bytes): bool {
  return hasSuffix(step, "-unpublish") || hasSuffix(step, "-unstage");
}

// gRPC status codes (google.golang.org/grpc/codes).
const CODE_OK: u32 = 0;
const CODE_CANCELED: u32 = 1;
const CODE_INVALID_ARGUMENT: u32 = 3;
const CODE_DEADLINE_EXCEEDED: u32 = 4;
const CODE_NOT_FOUND: u32 = 5;
const CODE_PERMISSION_DENIED: u32 = 7;
const CODE_RESOURCE_EXHAUSTED: u32 = 8;
const CODE_ABORTED: u32 = 10;
const CODE_UNIMPLEMENTED: u32 = 12;
const CODE_INTERNAL: u32 = 13;
const CODE_UNAVAILABLE: u32 = 14;

// textCodeName appends the code's name as grpc-go spells it.
function textCodeName(c: u32): void {
  switch (c) {
    case 0: text("OK"); return;
    case 1: text("Canceled"); return;
    case 2: text("Unknown"); return;
    case 3: text("InvalidArgument"); return;
    case 4: text("DeadlineExceeded"); return;
    case 5: text("NotFound"); return;
    case 6: text("AlreadyExists"); return;
    case 7: text("PermissionDenied"); return;
    case 8: text("ResourceExhausted"); return;
    case 9: text("FailedPrecondition"); return;
    case 10: text("Aborted"); return;
    case 11: text("OutOfRange"); return;
    case 12: text("Unimplemented"); return;
    case 13: text("Internal"); return;
    case 14: text("Unavailable"); return;
    case 15: text("DataLoss"); return;
    case 16: text("Unauthenticated"); return;
  }
  text("Code(");
  textU64(<u64>c);
  text(")");
}

function classify(req: ClassifyRequest, resp: ClassifyResponse): void {
  const c = req.code;
  if (c == CODE_OK) {
    resp.error = lit("code OK is not an error");
    return;
  }
  textStart();
  textBytes(req.step);
  switch (c) {
    case CODE_NOT_FOUND:
      if (releaseStep(req.step)) {
        resp.outcome = OUTCOME_RETRY;
        text(": NotFound, the disk or instance may be gone; force-deregister if so");
      } else {
        resp.outcome = OUTCOME_RETRY;
        text(": NotFound, verify and retry");
      }
      break;
    case CODE_UNIMPLEMENTED:
    case CODE_INVALID_ARGUMENT:
    case CODE_PERMISSION_DENIED:
      resp.outcome = OUTCOME_FATAL;
      text(": ");
      textCodeName(c);
      text(" will not succeed on retry");
      break;
    case CODE_ABORTED:
    case CODE_UNAVAILABLE:
    case CODE_DEADLINE_EXCEEDED:
    case CODE_RESOURCE_EXHAUSTED:
    case CODE_CANCELED:
    case CODE_INTERNAL:
      resp.outcome = OUTCOME_RETRY;
      text(": ");
      textCodeName(c);
      text(", may still be in progress");
      break;
    default:
      resp.outcome = OUTCOME_RETRY;
      text(": ");
      textCodeName(c);
  }
  resp.reason = textEnd();
}
