// Package attach is the one attachment model below both directions of a
// claim: the claim path's publish (host/server) and the release
// (watcher). Whatever the two must do alike about a volume's CSI steps on
// a machine lives here once, so publish and release cannot drift apart:
//
//   - the adapter's request for a step (Subject.Request, the views a
//     module sees) and the bounds the host puts on its answer
//     (Subject.Adapt, with abi.CheckAdapterIDs: the volume's external ID, and the
//     external node ID the claim's steps go to);
//   - the secrets a call sends (Secrets): a key the volume lacks is the
//     adapter's bad-output fault, at publish as at release;
//   - the CSI requests of a claim's six steps (Requests): each step and
//     its undo built from the same claim record and adapter answer, so
//     the claim path's rollback and the release send the undo the same
//     way and name what the step named;
//   - how a module's failure is named on a claim (ModuleError, Fault);
//   - the per-volume lock that serialises a claim's publish with a
//     release's destructive node and controller steps (VolumeLocks);
//   - the node-step interface (NodeSteps, NodeRelease, NodeAgents) and
//     where a node's steps go (AgentOf);
//   - the idempotency key a release step carries to a node agent's
//     journal (Key, WithStepKey, StepKey, Ack);
//   - the fenced CSI call: nothing is sent unless leadership of the
//     caller's term is confirmed first (Call).
//
// The rules of who holds a staging path and an attachment on a machine
// (structs.Volume.StagedFor, NeedsStaging, HoldsAttachment, SelectSecrets)
// are pure methods of the domain types in host/structs, asked by this
// package's callers and by host/state's validation alike. This package
// holds the plumbing both paths share around those rules; the decisions
// of each direction (what to stage, what to undo, when to release) stay
// with its path.
//
// Dependencies: attach imports abi and host/structs only; host/server,
// host/nodeconn, host/nodestep, host/client and the watcher import it.
package attach
