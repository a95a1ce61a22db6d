package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// TestClaimLeftoverRefusalNamesNoOtherNamespace: prod's volume db was
// force-deregistered while db-1 held it on n1, leaving a leftover of its
// disk. A token that may register and claim in default only registers a
// default volume on that disk (allowed: the disk has no volume now) and
// claims it on n1. The claim must wait for the leftover, but its refusal
// named the leftover "prod/db/db-1", prod's allocation db-1 and where it
// ran: a volume ID, an allocation ID and a namespace the token may not
// read, which the one-disk-one-volume refusal of the registration
// already takes care not to name. The refusal now says a leftover of
// another namespace holds the disk, and that its operator clears it.
func TestClaimLeftoverRefusalNamesNoOtherNamespace(t *testing.T) {
	f := allocReadFixture(t, nil)
	ctx := context.Background()
	db := testVolume("db")
	db.Namespace, db.ExternalID = "prod", "disk-db"
	if _, err := f.b.RegisterVolumes(ctx, []*structs.Volume{db}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.ClaimVolume(ctx, &structs.ClaimRequest{Namespace: "prod", VolumeID: "db", AllocID: "db-1", NodeID: "n1", Mode: structs.ClaimWrite}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.UpsertAllocs(ctx, []*structs.Alloc{{ID: "db-1", Namespace: "prod", NodeID: "n1", ClientStatus: structs.AllocComplete}}); err != nil {
		t.Fatal(err)
	}
	left, _, err := f.b.DeregisterVolume(ctx, "prod", "db", true)
	if err != nil || len(left) != 1 {
		t.Fatalf("force deregister: %v %+v", err, left)
	}
	f.policy(t, "default-user", `namespace "default" { capabilities = ["read", "register", "claim"] }`)
	user, _ := f.token(t, "", "default-user")
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/volumes",
		`{"volumes":[{"id":"x","namespace":"default","external_id":"disk-db","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}]}`,
		api.TokenHeader, user)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register x on the disk: %d %s", resp.StatusCode, out)
	}
	before := f.fingerprint(t)
	resp, out = do(t, http.MethodPut, f.ts.URL+"/v1/volume/x/claim",
		`{"alloc_id":"web-1","node_id":"n1","mode":"write"}`, api.TokenHeader, user)
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("claim over prod's leftover: %d %s, want 409", resp.StatusCode, out)
	}
	for _, secret := range []string{"prod", "db-1", `\"db\"`, "/db/"} {
		if strings.Contains(out, secret) {
			t.Errorf("the refusal names %s, of a namespace the token may not read: %s", secret, out)
		}
	}
	if !strings.Contains(out, "leftover") {
		t.Errorf("the refusal does not say a leftover holds the disk: %s", out)
	}
	if after := f.fingerprint(t); after != before {
		t.Fatal("a refused claim changed the state")
	}
}
