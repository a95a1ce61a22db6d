package testutil

import (
	"net/http"
	"sync/atomic"
)

// GetLoad keeps GETs of one URL flowing (Repeat) and counts them and
// those that failed (a transport error or a status other than 200): the
// certificate rotation tests of the agent and of the real binaries hold
// that not one request fails while the serving certificate changes.
type GetLoad struct {
	Requests, Failures atomic.Int64
	stop               func()
}

// StartGets starts GETs of url through hc until Stop.
func StartGets(hc *http.Client, url string) *GetLoad {
	l := &GetLoad{}
	l.stop = Repeat(func() bool {
		resp, err := hc.Get(url)
		l.Requests.Add(1)
		if err != nil || resp.StatusCode != http.StatusOK {
			l.Failures.Add(1)
		}
		if err == nil {
			resp.Body.Close()
		}
		return true
	})
	return l
}

// Stop ends the load; the counts are final once it returns.
func (l *GetLoad) Stop() { l.stop() }
