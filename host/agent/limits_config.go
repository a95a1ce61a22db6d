package agent

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/state"
)

// EventsConfig is the retention of the events table (RATIONALE "State and
// log"): a ring per volume, one for events of no volume, one for audit
// events, and a cap on all volume events together. 0 takes the default.
type EventsConfig struct {
	PerVolume       int `hcl:"per_volume,optional"`
	Global          int `hcl:"global,optional"`
	Audit           int `hcl:"audit,optional"`
	MaxVolumeEvents int `hcl:"max_volume_events,optional"`
}

func mergeHTTPLimits(c, o *HTTPConfig) {
	if len(o.AllowedHosts) > 0 {
		c.AllowedHosts = append([]string(nil), o.AllowedHosts...)
	}
	setInt(&c.MaxConns, o.MaxConns)
	setInt(&c.MaxConnsPerClient, o.MaxConnsPerClient)
	setInt(&c.MaxBlockingQueries, o.MaxBlockingQueries)
	setInt(&c.MaxPerPage, o.MaxPerPage)
	setString(&c.ReadTimeout, o.ReadTimeout)
	setString(&c.WriteTimeout, o.WriteTimeout)
	setString(&c.IdleTimeout, o.IdleTimeout)
}

func mergeEvents(c *Config, o *EventsConfig) {
	if o == nil {
		return
	}
	if c.Events == nil {
		c.Events = &EventsConfig{}
	}
	setInt(&c.Events.PerVolume, o.PerVolume)
	setInt(&c.Events.Global, o.Global)
	setInt(&c.Events.Audit, o.Audit)
	setInt(&c.Events.MaxVolumeEvents, o.MaxVolumeEvents)
}

// validateLimits checks the HTTP limits and event retention and parses
// the HTTP timeouts into d.
func (c *Config) validateLimits(d *Durations) []error {
	var errs []error
	h := c.HTTP
	for name, v := range map[string]int{
		"http.max_conns": h.MaxConns, "http.max_conns_per_client": h.MaxConnsPerClient,
		"http.max_blocking_queries": h.MaxBlockingQueries, "http.max_per_page": h.MaxPerPage,
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", name, v))
		}
	}
	for name, p := range map[string]struct {
		v   string
		dst *time.Duration
	}{
		"http.read_timeout": {h.ReadTimeout, &d.HTTPRead}, "http.write_timeout": {h.WriteTimeout, &d.HTTPWrite},
		"http.idle_timeout": {h.IdleTimeout, &d.HTTPIdle},
	} {
		if err := optionalDuration(name, p.v, p.dst); err != nil {
			errs = append(errs, err)
		}
	}
	if e := c.Events; e != nil {
		for name, v := range map[string]int{"events.per_volume": e.PerVolume, "events.global": e.Global,
			"events.audit": e.Audit, "events.max_volume_events": e.MaxVolumeEvents} {
			if v < 0 {
				errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", name, v))
			}
		}
	}
	return errs
}

// apiLimits carries the HTTP limits into the API's configuration.
func (c *Config) apiLimits(cfg *api.Config, d Durations) {
	h := c.HTTP
	cfg.AllowedHosts = h.AllowedHosts
	if sv := c.Server; sv != nil && sv.AdvertiseHTTP != "" {
		// Followers forward to this name: it must pass the Host guard.
		cfg.AllowedHosts = append(append([]string(nil), h.AllowedHosts...), hostOnly(sv.AdvertiseHTTP))
	}
	cfg.MaxConns, cfg.MaxConnsPerClient = h.MaxConns, h.MaxConnsPerClient
	cfg.MaxBlockingQueries, cfg.MaxPerPage = h.MaxBlockingQueries, h.MaxPerPage
	cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout = d.HTTPRead, d.HTTPWrite, d.HTTPIdle
}

// storeOptions carries the event retention into the state store.
func (c *Config) storeOptions() []state.Option {
	e := c.Events
	if e == nil {
		return nil
	}
	return []state.Option{state.WithEventRetention(state.EventRetention{
		PerVolume: e.PerVolume, Global: e.Global, Audit: e.Audit, MaxVolumeEvents: e.MaxVolumeEvents,
	})}
}

// hostOnly strips the scheme and port of an address ("http://h:1" -> "h").
func hostOnly(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
