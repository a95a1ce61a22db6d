package source

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/volhost/volhost/plugins/source/sourcetest"
)

// TestPullRefusesASignatureForAnotherRepository: one key often signs
// several modules. A signature names the repository it was made for
// (simple signing's docker-reference); whoever may push to another
// module's repository copied a bundle and its signature there (the digest
// is the same, so the signature verified), and that module ran the other
// one's code. A signature made for another repository is refused.
func TestPullRefusesASignatureForAnotherRepository(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ctx := context.Background()
	key := newKey(t)
	hold := host + "/modules/hold:stable"
	pushSigned(t, hold, key)
	d, err := Resolve(ctx, hold)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, hold, d, &key.PublicKey, 1<<20); err != nil {
		t.Fatalf("the signed bundle where it was signed: %v", err)
	}
	// The attacker copies the bundle and its signature to grace's tag.
	grace := host + "/modules/grace:stable"
	pushSigned(t, grace, nil)
	holdRef, _ := name.ParseReference(hold)
	graceRef, _ := name.ParseReference(grace)
	sig, err := remote.Image(signatureTag(holdRef.Context(), d), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(signatureTag(graceRef.Context(), d), sig, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	if gd, err := Resolve(ctx, grace); err != nil || gd != d {
		t.Fatalf("grace's tag: %s %v, want the copied digest %s", gd, err, d)
	}
	_, err = Pull(ctx, grace, d, &key.PublicKey, 1<<20)
	if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "modules/hold") {
		t.Fatalf("a signature made for modules/hold, pulled from modules/grace: %v, want it refused naming the repository it was made for", err)
	}
}
