// Package metrics owns volhost's Prometheus metrics: an own registry (no
// global state, so tests and several servers in one process never clash),
// gauges computed from a state snapshot at scrape time, and the counters and
// histograms the CSI client, the volume watcher and the module
// runtime report into. Stuck claims are visible here because the reference
// system, Nomad, has no metric for them.
//
// Every method is safe on a nil *Metrics, so a component built without
// metrics needs no checks.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// Namespace prefixes every volhost metric.
const Namespace = "volhost"

// Source is what the scrape-time collector reads: a state snapshot's
// maintained volume counts (O(1), not a scan of every volume) and
// its leftovers.
type Source interface {
	VolumeStats() (state.VolumeStats, error)
	Leftovers() ([]*structs.Leftover, error)
}

// Metrics holds the registry and the instruments components report into.
type Metrics struct {
	reg *prometheus.Registry

	csiCalls      *prometheus.CounterVec
	csiDuration   *prometheus.HistogramVec
	released      prometheus.Counter
	releaseFailed *prometheus.CounterVec
	markedStuck   prometheus.Counter
	assessed      prometheus.Counter
	autoForce     prometheus.Counter
	forcedDetach  *prometheus.CounterVec

	checkpointCommit prometheus.Histogram
	checkpointBatch  prometheus.Histogram

	moduleCalls    *prometheus.CounterVec
	moduleFaults   *prometheus.CounterVec
	moduleDuration *prometheus.HistogramVec

	mods *moduleMetrics // module lifecycle (modules.go)
}

// New returns metrics whose gauges read store's current snapshot on scrape.
func New(store *state.Store) *Metrics {
	return NewWithSource(func() Source { return snapshotSource{store.Snapshot()} })
}

// NewWithSource is New over any source; snapshot is called once per scrape
// so every gauge of a scrape reads one consistent view.
func NewWithSource(snapshot func() Source) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		csiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "csi_calls_total",
			Help: "CSI calls by method and gRPC code (the code is kept, never parsed from messages).",
		}, []string{"method", "code"}),
		csiDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "csi_call_duration_seconds",
			Help: "CSI call latency by method.",
			// From a local socket round trip to the 2 minute plugin deadline.
			Buckets: []float64{.001, .005, .025, .1, .5, 1, 5, 15, 30, 60, 120},
		}, []string{"method"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "claims_released_total",
			Help: "Claims that reached ready-to-free and were removed.",
		}),
		releaseFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "claim_release_failures_total",
			Help: "Failed claim release attempts by step and code (gRPC code name, module fault kind or error kind).",
		}, []string{"step", "code"}),
		markedStuck: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "volumes_marked_stuck_total",
			Help: "Times a volume was marked stuck.",
		}),
		assessed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "volume_assessments_total",
			Help: "Watcher passes over a volume.",
		}),
		autoForce: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "auto_force_deregisters_total",
			Help: "Stuck volumes force-deregistered by the automatic escape hatch.",
		}),
		forcedDetach: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "forced_detaches_total",
			Help: "Claims whose node steps were skipped because their node is fenced, by who attested it is off (operator, module); the free-text reason is on the claim and the event.",
		}, []string{"reason"}),
		checkpointCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "checkpoint_commit_duration_seconds",
			Help: "Leader only: how long each group commit of claim checkpoints took from its append to its answer (log write, replication to a quorum, apply). A release waits for one per claim transition.",
			// From a local fsync to the apply timeout.
			Buckets: prometheus.ExponentialBuckets(.001, 2, 15),
		}),
		checkpointBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "checkpoint_commit_checkpoints",
			Help:    "Leader only: how many claim checkpoints each group commit carried (up to 256).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		moduleCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "module_calls_total",
			Help: "Wasm module calls by module and kind (release-policy, csi-adapter).",
		}, []string{"module", "kind"}),
		moduleFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "module_faults_total",
			Help: "Wasm module faults by module and fault kind (trap, timeout, oom, abi, bad-output, open-circuit, unsafe).",
		}, []string{"module", "fault"}),
		moduleDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "module_decision_duration_seconds",
			Help: "Wasm module decision latency by module and kind.",
			// Microsecond calls up to a call timeout.
			Buckets: []float64{1e-6, 5e-6, 25e-6, 1e-4, 5e-4, .0025, .01, .05, .25, 1},
		}, []string{"module", "kind"}),
	}
	for _, r := range []string{"operator-fence", "module-fence"} {
		m.forcedDetach.WithLabelValues(r) // visible at 0 before the first
	}
	m.mods = newModuleMetrics()
	m.reg.MustRegister(m.mods.collectors()...)
	m.reg.MustRegister(
		m.csiCalls, m.csiDuration, m.released, m.releaseFailed, m.markedStuck, m.assessed, m.autoForce, m.forcedDetach,
		m.checkpointCommit, m.checkpointBatch,
		m.moduleCalls, m.moduleFaults, m.moduleDuration,
		newStateCollector(snapshot),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// CheckpointsCommitted records one group commit of claim checkpoints
// (host/cluster's CommitObserver).
func (m *Metrics) CheckpointsCommitted(checkpoints int, took time.Duration) {
	if m == nil {
		return
	}
	m.checkpointBatch.Observe(float64(checkpoints))
	m.checkpointCommit.Observe(took.Seconds())
}

// Handler serves the registry in the Prometheus text format (/v1/metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// A failing snapshot read must not hide every other series.
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Registerer lets other components (the module runtime) register their own
// collectors on the same registry.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Gatherer exposes the registry for tests and embedding.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// ObserveCall records one CSI call: the CSI client calls it for every RPC
// with the call's gRPC code (codes.OK on success).
func (m *Metrics) ObserveCall(method string, code codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	m.csiCalls.WithLabelValues(method, code.String()).Inc()
	m.csiDuration.WithLabelValues(method).Observe(d.Seconds())
}

// ClaimReleased counts a claim that reached ready-to-free and left its
// volume. With AttemptFailed, VolumeStuck and VolumeAssessed it implements
// watcher.Metrics; the volume and alloc are not labels (unbounded
// cardinality), the events table carries them.
func (m *Metrics) ClaimReleased(structs.VolumeRef, string) {
	if m == nil {
		return
	}
	m.released.Inc()
}

// AttemptFailed counts a failed release step by the claim error's step and
// code: the gRPC code name for a CSI error, the fault kind for a module
// fault, else the error kind.
func (m *Metrics) AttemptFailed(_ structs.VolumeRef, _ string, e *structs.ClaimError) {
	if m == nil {
		return
	}
	step, code := "unknown", "unknown"
	if e != nil {
		step = e.Step
		switch {
		case e.Kind == structs.ErrorModule && e.Fault != "":
			code = e.Fault
		case e.CodeName != "":
			code = e.CodeName
		case e.Kind == structs.ErrorCSI:
			code = codes.Code(e.Code).String()
		case e.Kind != "":
			code = string(e.Kind)
		}
	}
	m.releaseFailed.WithLabelValues(step, code).Inc()
}

// VolumeStuck counts a volume being marked stuck (s != nil); clearing
// (s == nil) is visible in the volhost_volumes_stuck gauge instead.
func (m *Metrics) VolumeStuck(_ structs.VolumeRef, s *structs.Stuck) {
	if m == nil || s == nil {
		return
	}
	m.markedStuck.Inc()
}

// VolumeAssessed counts a finished watcher pass over a volume.
func (m *Metrics) VolumeAssessed(structs.VolumeRef) {
	if m == nil {
		return
	}
	m.assessed.Inc()
}

// AutoForceDeregistered counts an automatic escape-hatch deregistration.
func (m *Metrics) AutoForceDeregistered() {
	if m == nil {
		return
	}
	m.autoForce.Inc()
}

// ForcedDetach counts a claim whose node steps were skipped because its
// node is fenced (watcher.ForcedDetachMetrics).
func (m *Metrics) ForcedDetach(source string) {
	if m == nil {
		return
	}
	m.forcedDetach.WithLabelValues(source + "-fence").Inc()
}

// ModuleCall records one Wasm module call: kind is the module
// kind, fault "" on success or the fault kind.
func (m *Metrics) ModuleCall(module, kind string, d time.Duration, fault string) {
	if m == nil {
		return
	}
	m.moduleCalls.WithLabelValues(module, kind).Inc()
	m.moduleDuration.WithLabelValues(module, kind).Observe(d.Seconds())
	if fault != "" {
		m.moduleFaults.WithLabelValues(module, fault).Inc()
	}
}

// snapshotSource reads a state snapshot without watching.
type snapshotSource struct{ snap *state.Snapshot }

func (s snapshotSource) VolumeStats() (state.VolumeStats, error) { return s.snap.VolumeStats() }
func (s snapshotSource) Leftovers() ([]*structs.Leftover, error) { return s.snap.Leftovers(nil) }
