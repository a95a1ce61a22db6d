package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
)

// BenchmarkACLRequest is the cost ACLs add to a request: the same read
// (GET /v1/node/n1 -> 404, through the whole handler chain, no network)
// with ACLs off, with a client token, and with a management token. The
// difference of ns/op and allocs/op is the check's cost (token hash,
// state lookups, cached ACL, capability check).
func BenchmarkACLRequest(b *testing.B) {
	for _, mode := range []string{"acl-off", "client-token", "management-token"} {
		b.Run(mode, func(b *testing.B) {
			sb := apitest.NewStoreBackend()
			s := api.NewServer(api.Config{}, sb.Store, sb, nil)
			var secret string
			if mode != "acl-off" {
				svc := acl.NewService(sb.Store, sb, nil)
				s.EnableACL(api.ACLConfig{Service: svc, Audit: sb})
				_, boot, err := svc.Bootstrap(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				secret = boot
				if mode == "client-token" {
					if _, err := svc.UpsertPolicy(context.Background(), "x", mkPolicy(`node { policy = "read" }`)); err != nil {
						b.Fatal(err)
					}
					_, secret, err = svc.CreateToken(context.Background(), "x", acl.NewToken{Policies: []string{"x"}})
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			h := s.Handler()
			req := httptest.NewRequest("GET", "/v1/node/n1", nil)
			// httptest's default Host, example.com, is not a name of this
			// agent: the DNS rebinding guard refuses it once ACLs are on.
			req.Host = "127.0.0.1:4646"
			if secret != "" {
				req.Header.Set(api.TokenHeader, secret)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusNotFound {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

// TestTLSLatency compares request latency over plain HTTP, HTTPS on a
// kept-alive connection and HTTPS with a new connection (full handshake)
// per request, interleaved in rounds so machine noise hits all three
// alike. Run it with:
//
//	VOLHOST_TLS_LATENCY=1 go test ./host/api/ -run TestTLSLatency -v
func TestTLSLatency(t *testing.T) {
	if os.Getenv("VOLHOST_TLS_LATENCY") == "" {
		t.Skip("set VOLHOST_TLS_LATENCY=1 to measure")
	}
	const rounds, perRound = 7, 500
	dir := t.TempDir()
	now := time.Now()
	ca, _ := tlsutil.CreateCA("bench", 1, now)
	srv, _ := tlsutil.CreateCert(tlsutil.CertRequest{Kind: tlsutil.KindServer, Days: 1, Now: now, CA: ca})
	cli, _ := tlsutil.CreateCert(tlsutil.CertRequest{Kind: tlsutil.KindClient, Days: 1, Now: now, CA: ca})
	files := map[string][]byte{"ca.pem": ca.Cert, "s.pem": srv.Cert, "s-key.pem": srv.Key, "c.pem": cli.Cert, "c-key.pem": cli.Key}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h, err := tlsutil.Load(tlsutil.Config{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "s.pem"),
		KeyFile: filepath.Join(dir, "s-key.pem"), VerifyHTTPSClient: true})
	if err != nil {
		t.Fatal(err)
	}
	sb := apitest.NewStoreBackend()
	handler := api.NewServer(api.Config{}, sb.Store, sb, nil).Handler()
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewUnstartedServer(handler)
	secure.TLS = h.HTTPServerConfig()
	secure.StartTLS()
	defer secure.Close()
	tc, err := tlsutil.ClientFiles(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "c-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clients := []struct {
		name string
		url  string
		hc   *http.Client
	}{
		{"http", plain.URL, &http.Client{Transport: &http.Transport{}}},
		{"https-keepalive", secure.URL, &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}},
		{"https-new-conn", secure.URL, &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone(), DisableKeepAlives: true}}},
	}
	results := map[string][]time.Duration{}
	for r := 0; r < rounds; r++ {
		for _, c := range clients {
			start := time.Now()
			for i := 0; i < perRound; i++ {
				resp, err := c.hc.Get(c.url + "/v1/status/leader")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			results[c.name] = append(results[c.name], time.Since(start)/perRound)
		}
	}
	out := map[string]map[string]string{}
	for _, c := range clients {
		d := results[c.name]
		slices.Sort(d)
		out[c.name] = map[string]string{"median": d[len(d)/2].String(), "min": d[0].String(), "max": d[len(d)-1].String()}
		t.Logf("%-16s median %-10s min %-10s max %s (per request; %d rounds of %d)", c.name, d[len(d)/2], d[0], d[len(d)-1], rounds, perRound)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func mkPolicy(rules string) *structs.ACLPolicy { return &structs.ACLPolicy{Name: "x", Rules: rules} }
