package source

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Poller keeps one module's bundle in step with an OCI tag: each Poll
// resolves the tag and, when it names a digest not applied yet, pulls and
// verifies the bundle there and hands it to Apply. A refused digest is
// reported once and not fetched again until the tag moves; the module that
// serves keeps serving.
type Poller struct {
	Module  string
	Ref     string
	Key     *ecdsa.PublicKey
	MaxWasm int64
	// Apply installs a verified bundle (the module directory, or a shadow).
	Apply func(ctx context.Context, b Bundle, digest v1.Hash) error
	// Refused is told of a digest that was refused (or failed to apply).
	Refused func(digest v1.Hash, err error)
	// Serving, if set, is the version the module serves now: a bundle of
	// an older version is refused (ErrDowngrade, notOlder).
	Serving func() string

	applied, refused v1.Hash
	reported         string // the last refusal reported, digest and reason
}

// Poll checks the tag once and reports whether a new bundle was applied.
// A bundle refused for what it is (a bad signature, not a bundle, or one
// the runtime refused) is not fetched again until the tag moves; any other
// failure (no signature yet, the registry unreachable, a layer that does
// not match its digest) is tried again at the next poll. Each refusal is
// reported once.
func (p *Poller) Poll(ctx context.Context) (bool, error) {
	d, err := Resolve(ctx, p.Ref)
	if err != nil {
		return false, err
	}
	if d == p.applied || d == p.refused {
		return false, nil
	}
	b, err := Pull(ctx, p.Ref, d, p.Key, p.MaxWasm)
	// Unsigned is not final: `module sign` comes after `module push`, and
	// a poll in between must not refuse the digest for good.
	final := err != nil && (errors.Is(err, ErrBadSignature) || errors.Is(err, ErrBadBundle))
	if err == nil {
		if p.Serving != nil {
			err = notOlder(b, p.Module, p.Serving())
		}
		if err == nil {
			err = p.Apply(ctx, b, d)
		}
		if err != nil {
			final = true
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if final {
			p.refused = d
		}
		if r := d.String() + err.Error(); r != p.reported && p.Refused != nil {
			p.reported = r
			p.Refused(d, err)
		}
		return false, fmt.Errorf("module %s from %s@%s: %w", p.Module, p.Ref, d, err)
	}
	p.applied, p.refused, p.reported = d, v1.Hash{}, ""
	return true, nil
}
