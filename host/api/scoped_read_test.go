package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
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
			got := getInBackground(f.ts.URL+"/v1/events?index="+index+"&wait=10m", secret)
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

// A module's recent faults and last shadow disagreement quote the volume
// the call was about (a guest's own error text included): modules:read
// shows them, in GET /v1/modules and GET /v1/module/NAME, only for the
// namespaces the token may read, as it does the served volumes. The
// faults about no volume stay.
func TestModuleFaultsAndDisagreementsAreScoped(t *testing.T) {
	f := newACLFixture(t)
	for _, tc := range []struct {
		name, rules string
		faults      []string
		shadow      bool
	}{
		{"one namespace", `modules { policy = "read" }
namespace "default" { policy = "read" }`, []string{"guest: cannot decide default/v1", "call_timeout exceeded"}, false},
		{"every namespace", `modules { policy = "read" }
namespace "*" { policy = "read" }`, []string{"guest: cannot decide prod/secret-vol", "guest: cannot decide default/v1", "call_timeout exceeded"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.policy(t, "p", tc.rules)
			secret, _ := f.token(t, "", "p")
			check := func(where string, st plugins.Status, body string) {
				t.Helper()
				var got []string
				for _, x := range st.RecentFaults {
					got = append(got, x.Message)
				}
				if !slices.Equal(got, tc.faults) {
					t.Fatalf("%s: recent faults %q, want %q", where, got, tc.faults)
				}
				if shown := st.Shadow != nil && st.Shadow.LastDisagreement != ""; shown != tc.shadow {
					t.Fatalf("%s: last disagreement shown %v, want %v: %+v", where, shown, tc.shadow, st.Shadow)
				}
				if !tc.shadow && strings.Contains(body, "prod") {
					t.Fatalf("%s names prod to a token that may not read it: %s", where, body)
				}
			}
			resp, body := do(t, http.MethodGet, f.ts.URL+"/v1/module/m1", "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var info api.ModuleInfo
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatal(err)
			}
			check("GET /v1/module/m1", info.Status, body)
			resp, body = do(t, http.MethodGet, f.ts.URL+"/v1/modules", "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var list api.ModulesResponse
			if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Modules) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			check("GET /v1/modules", list.Modules[0], body)
		})
	}
}
