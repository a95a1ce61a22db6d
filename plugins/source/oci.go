package source

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/volhost/volhost/plugins"
)

// Media types of a module bundle and of its signature.
const (
	MediaTypeConfig   types.MediaType = "application/vnd.volhost.module.config.v1+json"
	MediaTypeWasm     types.MediaType = "application/vnd.volhost.module.wasm.v1"
	MediaTypeManifest types.MediaType = "application/vnd.volhost.module.manifest.v1+hcl"
	// MediaTypeSimpleSigning is cosign's signed payload.
	MediaTypeSimpleSigning types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
)

// cosign's signature annotation and payload type.
const (
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	simpleSigningType   = "cosign container image signature"
)

// maxManifestBytes bounds a bundle's manifest layer.
const maxManifestBytes = 1 << 20

// maxSignatureManifest and maxSignatures bound a signature tag's
// manifest: cosign adds one layer per signature, a few hundred bytes
// each, and a bundle is signed by a key or two.
const (
	maxSignatureManifest = 256 << 10
	maxSignatures        = 64
)

// Bundle is a module's two files.
type Bundle struct {
	Wasm     []byte
	Manifest []byte
}

// Typed errors, so callers (and tests) branch on what was refused.
var (
	ErrUnsigned     = errors.New("no signature")
	ErrBadSignature = errors.New("signature does not verify")
	ErrBadBundle    = errors.New("not a volhost module bundle")
)

// Pin returns the manifest with a sha256 pin of wasm: unchanged when it
// pins that already, with the pin set when it has none (an empty sha256
// attribute filled in, or one appended), and an error when it pins other
// code. A pinned bundle swaps in as one generation (README "Swapping code
// and manifest as one").
//
// The empty attribute is found in HCL's syntax tree, as the top-level
// attribute, and only its value's bytes are replaced: a textual rewrite (a
// regular expression over lines) also rewrote a `sha256 = ""` line inside
// a heredoc of the config, which changed the config and left the module
// unpinned (FuzzPin). The result is parsed again and must pin the wasm.
func Pin(name string, wasm, manifest []byte) ([]byte, error) {
	man, err := plugins.ParseManifest(name+".hcl", manifest)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	switch man.SHA256 {
	case sha:
		return manifest, nil
	case "":
	default:
		return nil, fmt.Errorf("manifest %s.hcl pins sha256 %s, but the module's is %s", name, man.SHA256, sha)
	}
	f, diags := hclsyntax.ParseConfig(manifest, name+".hcl", hcl.InitialPos)
	body, ok := f.Body.(*hclsyntax.Body)
	if diags.HasErrors() || !ok {
		return nil, fmt.Errorf("manifest %s.hcl: %w", name, diags)
	}
	var out []byte
	if attr := body.Attributes["sha256"]; attr != nil {
		// sha256 = "" (as the examples ship): filled in, since HCL
		// refuses a second attribute of the name.
		r := attr.Expr.Range()
		out = append(append(bytes.Clone(manifest[:r.Start.Byte]), fmt.Sprintf("%q", sha)...), manifest[r.End.Byte:]...)
	} else {
		out = append(bytes.TrimRight(bytes.Clone(manifest), "\n"), fmt.Sprintf("\nsha256 = %q\n", sha)...)
	}
	if got, err := plugins.ParseManifest(name+".hcl", out); err != nil || got.SHA256 != sha {
		return nil, fmt.Errorf("manifest %s.hcl could not be pinned (set sha256 = %q yourself): %v", name, sha, err)
	}
	return out, nil
}

// Push writes b to ref as an OCI artifact (config, wasm layer, manifest
// layer) and returns its manifest digest. The manifest must pin the wasm
// (Pin).
func Push(ctx context.Context, ref string, b Bundle) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reference %q: %w", ref, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, MediaTypeConfig)
	img, err = mutate.AppendLayers(img, static.NewLayer(b.Wasm, MediaTypeWasm), static.NewLayer(b.Manifest, MediaTypeManifest))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(r, img, remote.WithContext(ctx)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return img.Digest()
}

// simpleSigning is cosign's signed payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// signatureTag is where cosign keeps the signatures of digest.
func signatureTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(digest.Algorithm + "-" + digest.Hex + ".sig")
}

// Sign signs the manifest ref resolves to with key and pushes the
// signature as cosign does; it returns the digest signed.
func Sign(ctx context.Context, ref string, key *ecdsa.PrivateKey) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reference %q: %w", ref, err)
	}
	desc, err := remote.Head(r, remote.WithContext(ctx))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	var p simpleSigning
	p.Critical.Identity.DockerReference = r.Context().Name()
	p.Critical.Image.DockerManifestDigest = desc.Digest.String()
	p.Critical.Type = simpleSigningType
	payload, err := json.Marshal(p)
	if err != nil {
		return v1.Hash{}, err
	}
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:       static.NewLayer(payload, MediaTypeSimpleSigning),
		Annotations: map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(signatureTag(r.Context(), desc.Digest), img, remote.WithContext(ctx)); err != nil {
		return v1.Hash{}, fmt.Errorf("push signature: %w", err)
	}
	return desc.Digest, nil
}

// Resolve returns the manifest digest ref names now (a HEAD request).
func Resolve(ctx context.Context, ref string) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reference %q: %w", ref, err)
	}
	desc, err := remote.Head(r, remote.WithContext(ctx))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return desc.Digest, nil
}

// Pull fetches the bundle at digest of ref's repository, after checking a
// signature by pub names that digest, and checks every layer's digest and
// the manifest's pin of the wasm. maxWasm bounds the wasm layer.
func Pull(ctx context.Context, ref string, digest v1.Hash, pub *ecdsa.PublicKey, maxWasm int64) (Bundle, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return Bundle{}, fmt.Errorf("reference %q: %w", ref, err)
	}
	repo := r.Context()
	if err := verifySignature(ctx, repo, digest, pub); err != nil {
		return Bundle{}, err
	}
	img, err := remote.Image(repo.Digest(digest.String()), remote.WithContext(ctx))
	if err != nil {
		return Bundle{}, fmt.Errorf("fetch %s@%s: %w", repo, digest, err)
	}
	if got, err := img.Digest(); err != nil || got != digest {
		return Bundle{}, fmt.Errorf("%w: manifest digest %v, want %s (%v)", ErrBadBundle, got, digest, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return Bundle{}, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	var b Bundle
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return Bundle{}, fmt.Errorf("%w: %v", ErrBadBundle, err)
		}
		switch mt {
		case MediaTypeWasm:
			b.Wasm, err = readLayer(l, maxWasm, "wasm")
		case MediaTypeManifest:
			b.Manifest, err = readLayer(l, maxManifestBytes, "manifest")
		default:
			return Bundle{}, fmt.Errorf("%w: unexpected layer of type %q", ErrBadBundle, mt)
		}
		if err != nil {
			return Bundle{}, err
		}
	}
	if b.Wasm == nil || b.Manifest == nil {
		return Bundle{}, fmt.Errorf("%w: want one %s and one %s layer", ErrBadBundle, MediaTypeWasm, MediaTypeManifest)
	}
	man, err := plugins.ParseManifest("bundle.hcl", b.Manifest)
	if err != nil {
		return Bundle{}, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	sum := sha256.Sum256(b.Wasm)
	if sha := hex.EncodeToString(sum[:]); man.SHA256 != sha {
		return Bundle{}, fmt.Errorf("%w: the manifest pins sha256 %q, the wasm layer's is %s", ErrBadBundle, man.SHA256, sha)
	}
	return b, nil
}

// readLayer reads a layer whole, within max bytes; go-containerregistry
// checks the bytes against the layer's digest as they are read.
func readLayer(l v1.Layer, max int64, what string) ([]byte, error) {
	if size, err := l.Size(); err == nil && size > max {
		return nil, fmt.Errorf("%w: %s layer of %d bytes, over %d", ErrBadBundle, what, size, max)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", what, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", what, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s layer over %d bytes", ErrBadBundle, what, max)
	}
	return b, nil
}

// verifySignature finds a signature by pub over a payload naming digest.
func verifySignature(ctx context.Context, repo name.Repository, digest v1.Hash, pub *ecdsa.PublicKey) error {
	tag := signatureTag(repo, digest)
	desc, err := remote.Get(tag, remote.WithContext(ctx))
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %s has no signature %s: sign it with volhost module sign", ErrUnsigned, digest, tag.TagStr())
		}
		return fmt.Errorf("fetch signature %s: %w", tag, err)
	}
	// Nothing vouches for the tag's manifest before a signature in it
	// verifies: it is bounded before it is decoded (go-containerregistry
	// reads up to 100 MiB, which as 33 million empty layers would make
	// Layers allocate gigabytes, and every poll would build an error
	// naming each of them).
	if len(desc.Manifest) > maxSignatureManifest {
		return fmt.Errorf("%w: %s: a signature manifest of %d bytes, over %d", ErrBadSignature, tag.TagStr(), len(desc.Manifest), maxSignatureManifest)
	}
	img, err := desc.Image()
	if err != nil {
		return fmt.Errorf("signature %s: %w", tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("signature %s: %w", tag, err)
	}
	if len(m.Layers) > maxSignatures {
		return fmt.Errorf("%w: %s holds %d signatures, over %d", ErrBadSignature, tag.TagStr(), len(m.Layers), maxSignatures)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != len(m.Layers) {
		return fmt.Errorf("signature %s: %v", tag, err)
	}
	var reasons []string
	for i, l := range layers {
		sig, err := base64.StdEncoding.DecodeString(m.Layers[i].Annotations[SignatureAnnotation])
		if err != nil || len(sig) == 0 {
			reasons = append(reasons, "a layer without a signature annotation")
			continue
		}
		payload, err := readLayer(l, 64<<10, "signature payload")
		if err != nil {
			if !errors.Is(err, ErrBadBundle) {
				// Not the signature's fault (a read that failed or did not
				// match its digest): tried again at the next poll.
				return fmt.Errorf("signature %s: %w", tag.TagStr(), err)
			}
			reasons = append(reasons, err.Error())
			continue
		}
		sum := sha256.Sum256(payload)
		if !ecdsa.VerifyASN1(pub, sum[:], sig) {
			reasons = append(reasons, "a signature the public key does not verify")
			continue
		}
		var p simpleSigning
		if err := json.Unmarshal(payload, &p); err != nil {
			reasons = append(reasons, "a payload that is not simple-signing JSON")
			continue
		}
		if p.Critical.Type != simpleSigningType || p.Critical.Image.DockerManifestDigest != digest.String() {
			reasons = append(reasons, fmt.Sprintf("a payload naming %q, not %s", p.Critical.Image.DockerManifestDigest, digest))
			continue
		}
		// The repository it was signed for: one key often signs several
		// modules, and a bundle copied with its signature into another
		// module's repository keeps its digest, so the digest alone let
		// that module run the other one's code.
		if p.Critical.Identity.DockerReference != repo.Name() {
			reasons = append(reasons, fmt.Sprintf("a signature made for %s, not %s (sign the bundle for this repository)", p.Critical.Identity.DockerReference, repo.Name()))
			continue
		}
		return nil
	}
	return fmt.Errorf("%w: %s: %d signature(s), none valid for this key and digest (%s)", ErrBadSignature, tag.TagStr(), len(layers), strings.Join(reasons, "; "))
}

// ParsePublicKey reads a PEM PKIX ECDSA P-256 public key (cosign.pub).
func ParsePublicKey(pemBytes []byte) (*ecdsa.PublicKey, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		return nil, errors.New("public key: no PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("public key: want ECDSA P-256, got %T", k)
	}
	return ek, nil
}

// ParsePrivateKey reads an unencrypted PKCS#8 PEM ECDSA P-256 private key.
func ParsePrivateKey(pemBytes []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		return nil, errors.New("private key: no PEM block")
	}
	if blk.Type == "ENCRYPTED COSIGN PRIVATE KEY" || blk.Type == "ENCRYPTED PRIVATE KEY" {
		return nil, errors.New("private key: encrypted keys are not read; use an unencrypted PKCS#8 PEM key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("private key: want ECDSA P-256, got %T", k)
	}
	return ek, nil
}
