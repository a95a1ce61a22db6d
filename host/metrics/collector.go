package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/volhost/volhost/host/structs"
)

// claimStates are reported on every scrape, zeros included, so a dashboard
// sees "no claims taken" rather than a missing series.
var claimStates = structs.ClaimStates

// stateCollector reads its gauges from one snapshot per scrape: the counts
// the store keeps in step with every write (state.VolumeStats), so a scrape
// costs the same at 10 volumes and at 1,000,000.
type stateCollector struct {
	snapshot func() Source

	volumes   *prometheus.Desc
	claims    *prometheus.Desc
	failing   *prometheus.Desc
	stuck     *prometheus.Desc
	leftovers *prometheus.Desc
}

func newStateCollector(snapshot func() Source) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &stateCollector{
		snapshot:  snapshot,
		volumes:   d("volumes", "Registered volumes."),
		claims:    d("claims", "Claims by release state.", "state"),
		failing:   d("claims_failing", "Claims whose last release attempt failed (they carry a last error)."),
		stuck:     d("volumes_stuck", "Volumes marked stuck: their claims cannot be released without an operator."),
		leftovers: d("leftovers", "Attachments force-deregistration may have left behind."),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.volumes
	ch <- c.claims
	ch <- c.failing
	ch <- c.stuck
	ch <- c.leftovers
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.snapshot()
	stats, err := src.VolumeStats()
	if err != nil {
		for _, d := range []*prometheus.Desc{c.volumes, c.claims, c.failing, c.stuck} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
	} else {
		ch <- prometheus.MustNewConstMetric(c.volumes, prometheus.GaugeValue, float64(stats.Volumes))
		for _, s := range claimStates {
			ch <- prometheus.MustNewConstMetric(c.claims, prometheus.GaugeValue, float64(stats.Claims[s]), string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(stats.Failing))
		ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(stats.Stuck))
	}
	left, err := src.Leftovers()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.leftovers, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.leftovers, prometheus.GaugeValue, float64(len(left)))
}
