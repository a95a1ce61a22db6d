package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// gatedStore holds the first run of the next blocking query, after it
// took its snapshot, until release is closed, telling woke when it got
// there: the writes the test commits meanwhile wake the query at once,
// and its next run reads them, as on a busy leader.
type gatedStore struct {
	api.Store
	once    sync.Once
	woke    chan struct{}
	release chan struct{}
}

func (g *gatedStore) Query(ctx context.Context, minIndex uint64, maxWait time.Duration, fn api.QueryFn) (uint64, error) {
	if minIndex == 0 {
		return g.Store.Query(ctx, minIndex, maxWait, fn)
	}
	runs := 0
	return g.Store.Query(ctx, minIndex, maxWait, func(ws memdb.WatchSet, r api.Reader) (uint64, error) {
		runs++
		if runs == 1 {
			g.once.Do(func() {
				close(g.woke)
				<-g.release
			})
		}
		return fn(ws, r)
	})
}

// A blocking event query is filtered by the token's policy as it is when
// the query runs, not as it was when it was authorized: after the policy
// loses a namespace, an event written there is not delivered to the
// query that was already waiting, and a deleted token ends it with 403.
func TestBlockingEventsReResolveTheACL(t *testing.T) {
	for _, tc := range []struct {
		name   string
		narrow func(t *testing.T, f *aclFixture, accessor string)
		code   int
	}{
		{"policy narrowed", func(t *testing.T, f *aclFixture, _ string) {
			f.policy(t, "p", `events { policy = "read" }
namespace "default" { policy = "read" }`)
		}, http.StatusOK},
		{"token deleted", func(t *testing.T, f *aclFixture, accessor string) {
			if resp, body := do(t, http.MethodDelete, f.ts.URL+"/v1/acl/token/"+accessor, "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
				t.Fatalf("delete token: %d %s", resp.StatusCode, body)
			}
		}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedStore{woke: make(chan struct{}), release: make(chan struct{})}
			f := newACLFixtureWith(t, func(s api.Store) api.Store { g.Store = s; return g })
			f.policy(t, "p", `events { policy = "read" }
namespace "default" { policy = "read" }
namespace "prod" { policy = "read" }`)
			secret, accessor := f.token(t, "", "p")
			resp, body := do(t, http.MethodGet, f.ts.URL+"/v1/events", "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("before: %d %s", resp.StatusCode, body)
			}
			index := resp.Header.Get(api.IndexHeader)
			type answer struct {
				code int
				body string
			}
			got := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodGet, f.ts.URL+"/v1/events?index="+index+"&wait=10m", nil)
				req.Header.Set(api.TokenHeader, secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- answer{body: err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- answer{resp.StatusCode, string(b)}
			}()
			// The query is authorized and running; the policy loses prod
			// and an event is written in prod before its next run.
			var a answer
			select {
			case <-g.woke:
				tc.narrow(t, f, accessor)
				evs := []*structs.Event{{Type: structs.EventClaimTransition, Namespace: "prod", VolumeID: "secret-vol", Message: "in-prod"}}
				if _, _, err := f.b.Apply(context.Background(), structs.EventAppendType, &structs.EventAppendRequest{Events: evs}); err != nil {
					t.Fatal(err)
				}
				close(g.release)
				a = <-got
			case a = <-got:
				t.Fatalf("the query answered before any change: %d %s", a.code, a.body)
			}
			if a.code != tc.code {
				t.Fatalf("the waiting query answered %d %s, want %d", a.code, a.body, tc.code)
			}
			if strings.Contains(a.body, "in-prod") || strings.Contains(a.body, "secret-vol") {
				t.Fatalf("the waiting query delivered the event of a namespace its policy lost: %s", a.body)
			}
			if tc.code != http.StatusOK {
				return
			}
			var out []*structs.Event
			if err := json.Unmarshal([]byte(a.body), &out); err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(out, func(e *structs.Event) bool { return e.Namespace == "prod" }) {
				t.Fatalf("prod events delivered: %s", a.body)
			}
		})
	}
}

// modules:read shows what a module is; what it serves is read like the
// volumes themselves: a token that may read only some namespaces sees
// only their served volumes, counted alone, and never another
// namespace's volume IDs or how many there are.
func TestModuleServedVolumesAreScoped(t *testing.T) {
	f := newACLFixture(t)
	for _, tc := range []struct {
		name, rules string
		want        []string
		scoped      bool
	}{
		{"modules only", `modules { policy = "read" }`, nil, true},
		{"one namespace", `modules { policy = "read" }
namespace "default" { policy = "read" }`, []string{"default/v1"}, true},
		{"every namespace", `modules { policy = "read" }
namespace "*" { policy = "read" }`, []string{"default/v1", "prod/secret-vol", "prod/secret-vol2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.policy(t, "p", tc.rules)
			secret, _ := f.token(t, "", "p")
			resp, body := do(t, http.MethodGet, f.ts.URL+"/v1/module/m1", "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var info api.ModuleInfo
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range info.ServedVolumes {
				got = append(got, v.Namespace+"/"+v.ID)
			}
			if !slices.Equal(got, tc.want) || info.ServedVolumeCount != len(tc.want) || info.ServedVolumesScoped != tc.scoped {
				t.Fatalf("served %q (count %d, scoped %v), want %q (count %d, scoped %v)", got, info.ServedVolumeCount,
					info.ServedVolumesScoped, tc.want, len(tc.want), tc.scoped)
			}
		})
	}
}
