package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkRevocationBlockingQuery measures, over a real HTTP connection,
// how long after its token is deleted (or the resolver's clock reaches
// its expiry) a blocking query already waiting (?index=&wait=10m) ends
// with 403. t0 is when the deletion is issued; closed is when the 403
// reached the client.
//
//	go test -run '^$' -bench Revocation -benchtime 1x ./host/client/ ./host/api/
func BenchmarkRevocationBlockingQuery(b *testing.B) {
	for _, kind := range []string{"delete", "expiry"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				var closed []float64
				for range 7 {
					closed = append(closed, revokeQueryOnce(b, kind))
				}
				testutil.ReportSpread(b, closed, "ms-closed")
				b.Logf("%s: blocking query ended with 403 %s ms after t0 (median [min-max] of 7)", kind, testutil.SpreadOf(closed))
			}
		})
	}
}

func revokeQueryOnce(b *testing.B, kind string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	sb := apitest.NewStoreBackend()
	svc := acl.NewService(sb.Store, sb, clk)
	s := api.NewServer(api.Config{}, sb.Store, sb, nil)
	s.EnableACL(api.ACLConfig{Service: svc, Audit: sb})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	boot, _, err := svc.Bootstrap(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.UpsertPolicy(ctx, boot.AccessorID, &structs.ACLPolicy{Name: "r", Rules: `namespace "default" { policy = "read" }`}); err != nil {
		b.Fatal(err)
	}
	tok, secret, err := svc.CreateToken(ctx, boot.AccessorID, acl.NewToken{Policies: []string{"r"}, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	index := strconv.FormatUint(sb.Store.LatestIndex()+1000, 10)
	got := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/volumes?namespace=default&wait=10m&index="+index, nil)
		req.Header.Set(api.TokenHeader, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	// The query is authorized and its watch armed: the expiry timer is
	// the fake clock's only waiter.
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if kind == "expiry" {
		clk.Advance(time.Hour)
	} else if _, err := svc.DeleteToken(ctx, boot.AccessorID, tok.AccessorID); err != nil {
		b.Fatal(err)
	}
	if code := <-got; code != http.StatusForbidden {
		b.Fatalf("blocking query after revocation: %d, want 403", code)
	}
	return float64(time.Since(t0).Microseconds()) / 1000
}
