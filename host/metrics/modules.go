package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volhost/volhost/plugins"
)

// Module lifecycle metrics: per module and generation, the
// latency and faults of every call by the role the generation played
// (serving, shadow, last known good), shadow disagreements, rollbacks, and
// at scrape time each module's breaker state, pool size and shadow
// agreement.
type moduleMetrics struct {
	genDuration   *prometheus.HistogramVec
	genFaults     *prometheus.CounterVec
	disagreements *prometheus.CounterVec
	rollbacks     *prometheus.CounterVec
}

func newModuleMetrics() *moduleMetrics {
	return &moduleMetrics{
		genDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "module_call_duration_seconds",
			Help:    "Wasm module call latency by module, generation and role (serving, shadow, last_known_good).",
			Buckets: []float64{1e-6, 5e-6, 25e-6, 1e-4, 5e-4, .0025, .01, .05, .25, 1},
		}, []string{"module", "generation", "role"}),
		genFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "module_call_faults_total",
			Help: "Wasm module call faults by module, generation, role and fault kind.",
		}, []string{"module", "generation", "role", "fault"}),
		disagreements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "module_shadow_disagreements_total",
			Help: "Calls on which a module's shadow candidate answered otherwise than its serving generation.",
		}, []string{"module"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "module_rollbacks_total",
			Help: "Returns of a module to its last known good generation (by the operator or automatic).",
		}, []string{"module"}),
	}
}

func (mm *moduleMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{mm.genDuration, mm.genFaults, mm.disagreements, mm.rollbacks}
}

// ModuleGenerationCall records one call on one generation
// (plugins.Options.OnCall).
func (m *Metrics) ModuleGenerationCall(c plugins.Call) {
	if m == nil {
		return
	}
	gen := strconv.FormatUint(c.Generation, 10)
	m.mods.genDuration.WithLabelValues(c.Module, gen, c.Role).Observe(c.Duration.Seconds())
	if c.Fault != "" {
		m.mods.genFaults.WithLabelValues(c.Module, gen, c.Role, string(c.Fault)).Inc()
	}
}

// ModuleEvent counts the rollout events that are metrics too.
func (m *Metrics) ModuleEvent(ev plugins.Event) {
	if m == nil {
		return
	}
	switch ev.Kind {
	case plugins.EventShadowDisagreed:
		m.mods.disagreements.WithLabelValues(ev.Module).Inc()
	case plugins.EventRolledBack:
		m.mods.rollbacks.WithLabelValues(ev.Module).Inc()
	}
}

// RegisterModuleStatus adds scrape-time gauges read from the module
// runtime's statuses: breaker state, pool size and shadow agreement.
func (m *Metrics) RegisterModuleStatus(statuses func() []plugins.Status) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&moduleCollector{statuses: statuses,
		breaker: prometheus.NewDesc(Namespace+"_module_breaker_open", "1 while a module's circuit breaker refuses calls.", []string{"module"}, nil),
		pool:    prometheus.NewDesc(Namespace+"_module_pool_size", "Instances a module's serving generation may keep (limits.pool_size).", []string{"module", "generation"}, nil),
		idle:    prometheus.NewDesc(Namespace+"_module_pool_idle", "Idle instances of a module's serving generation.", []string{"module", "generation"}, nil),
		agree:   prometheus.NewDesc(Namespace+"_module_shadow_agreement_ratio", "Share of calls on which the shadow candidate agreed with the serving generation.", []string{"module", "generation"}, nil),
	})
}

type moduleCollector struct {
	statuses                   func() []plugins.Status
	breaker, pool, idle, agree *prometheus.Desc
}

func (c *moduleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.breaker
	ch <- c.pool
	ch <- c.idle
	ch <- c.agree
}

func (c *moduleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.statuses() {
		open := 0.0
		if s.BreakerOpen {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, open, s.Name)
		if s.PoolSize > 0 {
			gen := strconv.FormatUint(s.Generation, 10)
			ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(s.PoolSize), s.Name, gen)
			ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(s.PoolIdle), s.Name, gen)
		}
		if sh := s.Shadow; sh != nil {
			ch <- prometheus.MustNewConstMetric(c.agree, prometheus.GaugeValue, sh.AgreementPercent/100, s.Name,
				strconv.FormatUint(sh.Generation, 10))
		}
	}
}
