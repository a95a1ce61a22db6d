package api_test

import (
	"io"
	"net/http"

	"github.com/volhost/volhost/host/api"
)

// answer is an HTTP answer read in the background.
type answer struct {
	code int
	body string
}

// getInBackground sends GET url (with token, when set) from a goroutine
// and hands its answer to the channel, a transport error as the body: a
// blocking query or a read held on the server, answered while the test
// changes what it waits on. It never touches a testing.T (only the test's
// goroutine may stop the test).
func getInBackground(url, token string) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			got <- answer{body: err.Error()}
			return
		}
		if token != "" {
			req.Header.Set(api.TokenHeader, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, string(b)}
	}()
	return got
}
