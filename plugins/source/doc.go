// Package source owns where module bundles come from and how they are
// verified before they reach the module runtime: an OCI
// registry artifact holding a module's wasm and manifest as two layers,
// signed in sigstore/cosign's key-based offline format (ECDSA P-256 over
// the simple-signing JSON payload naming the manifest digest, stored as the
// sha256-<hex>.sig tag with the dev.cosignproject.cosign/signature
// annotation, public keys as PEM PKIX). A pulled bundle is checked against
// its signature, its layer digests (go-containerregistry verifies every
// blob it reads) and the manifest's sha256 pin of the wasm, and only then
// handed on; the agent writes it into the module directory (or loads it as
// a shadow candidate), so it enters through the same validation and hot
// swap as any module file.
//
// Private keys for Sign are unencrypted PKCS#8 PEM (openssl genpkey); cosign's
// own encrypted key format is not read.
package source
