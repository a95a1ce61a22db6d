// Package nodeconn owns the server side of the node agents' connection:
// the gRPC bidirectional stream a node agent (`volhost agent -client`,
// host/client) opens to a server, the node steps the leader sends down it,
// and the heartbeat tracker that marks a node down after heartbeat_ttl
// without one and gone after node_gc_threshold down.
//
// The agent opens the connection, so a node behind NAT or a firewall needs
// no inbound port; the leader multiplexes step requests over it, each with
// an ID, the caller's deadline and a cancellation. Messages are JSON over
// gRPC (a registered codec), with the CSI requests inside as protobuf
// bytes: the CSI messages travel unchanged, and this package needs no
// generated code of its own.
package nodeconn

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/volhost/volhost/host/structs"
)

// Codec is the name of the JSON codec the stream uses (content-subtype).
const Codec = "volhost-json"

// DefaultPort is where servers listen for node agents by default
// (node_rpc.address "127.0.0.1:4749"): next to the HTTP API (4747) and
// raft (4748), a dedicated port as Nomad's 4647 is for its clients.
const DefaultPort = 4749

// ConnectMethod is the stream's full method name.
const ConnectMethod = "/volhost.nodeconn.v1.NodeConn/Connect"

// TokenMetadata carries the agent's ACL token secret.
const TokenMetadata = "x-volhost-token"

// Step methods: the four CSI node steps.
const (
	MethodStage     = "NodeStageVolume"
	MethodPublish   = "NodePublishVolume"
	MethodUnpublish = "NodeUnpublishVolume"
	MethodUnstage   = "NodeUnstageVolume"
)

// AgentMsg flows from the node agent to the server; exactly one field set.
type AgentMsg struct {
	Hello     *Hello      `json:"hello,omitempty"`
	Heartbeat *Heartbeat  `json:"heartbeat,omitempty"`
	Result    *StepResult `json:"result,omitempty"`
}

// Hello opens the stream: the node as its agent probed it (NodeGetInfo,
// NodeGetCapabilities on each local plugin socket), a plugin whose probe
// failed with its ProbeError. Later in the stream, to a server whose
// welcome says TakesUpdates, a Hello registers the node again: the agent
// sends one when a plugin stops or starts answering its probe, or
// answers differently.
type Hello struct {
	Node *structs.Node `json:"node"`
}

// Heartbeat says the agent is alive.
type Heartbeat struct {
	Seq uint64 `json:"seq"`
}

// StepResult answers a StepRequest; Code is the gRPC code (0 OK), kept as
// the driver answered it.
type StepResult struct {
	ID      uint64 `json:"id"`
	Code    uint32 `json:"code"`
	Message string `json:"message,omitempty"`
}

// ServerMsg flows from the server to the agent; exactly one field set.
type ServerMsg struct {
	Welcome   *Welcome     `json:"welcome,omitempty"`
	NotLeader *NotLeader   `json:"not_leader,omitempty"`
	Step      *StepRequest `json:"step,omitempty"`
	Cancel    *Cancel      `json:"cancel,omitempty"`
	Ack       *Ack         `json:"ack,omitempty"`
	// HeartbeatAck answers a heartbeat (servers whose Welcome says
	// AcksHeartbeats): an agent that hears nothing from its leader for a
	// few intervals knows it is gone even when no read or write fails.
	HeartbeatAck *Heartbeat `json:"heartbeat_ack,omitempty"`
}

// Welcome accepts the agent: heartbeat every HeartbeatIntervalMs.
type Welcome struct {
	HeartbeatIntervalMs int64 `json:"heartbeat_interval_ms"`
	// AcksHeartbeats: the server answers every heartbeat (HeartbeatAck).
	// An agent holds only such a server to silence: one of an older
	// version never answers.
	AcksHeartbeats bool `json:"acks_heartbeats,omitempty"`
	// TakesUpdates: the server registers the node again on a later
	// Hello in the stream. One of an older version ignores it, so the
	// agent reconnects instead, and its hello registers the change.
	TakesUpdates bool `json:"takes_updates,omitempty"`
}

// NotLeader refuses the agent: only the leader drives node steps. The
// agent tries its next server.
type NotLeader struct {
	Leader string `json:"leader,omitempty"` // raft address, for the log line
}

// StepRequest is one node step. Request is the CSI request, protobuf
// encoded; DeadlineUnixNano is the leader's deadline (0: none).
//
// Key, when set, is the idempotency key of the release step it runs
// (attach.StepKey: volume, allocation, the claim's create index and the
// step): the same for every retry of that step, by this leader or the
// next. The agent journals a keyed step's success before answering and
// answers a retry with the same key from its journal instead of calling
// the driver again (exactly one NodeUnpublish per claim). The claim path's steps carry none.
type StepRequest struct {
	ID               uint64 `json:"id"`
	Method           string `json:"method"`
	Endpoint         string `json:"endpoint"`
	Request          []byte `json:"request"`
	DeadlineUnixNano int64  `json:"deadline_unix_nano,omitempty"`
	Key              string `json:"key,omitempty"`
}

// Ack says the outcome of the keyed step is committed on the servers: the
// agent may drop its journal entry.
type Ack struct {
	Key string `json:"key"`
}

// Cancel cancels a step in flight (the leader's caller gave up).
type Cancel struct {
	ID uint64 `json:"id"`
}

// StreamDesc describes the Connect stream for clients.
var StreamDesc = grpc.StreamDesc{StreamName: "Connect", ServerStreams: true, ClientStreams: true}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("nodeconn: decode %T: %w", v, err)
	}
	return nil
}
func (jsonCodec) Name() string { return Codec }

func init() { encoding.RegisterCodec(jsonCodec{}) }
