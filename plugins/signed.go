package plugins

import (
	"errors"
	"fmt"
)

// ErrSignatureRequired wraps the refusal of a shadow candidate for a
// module that runs only what a signed source verified (Options.Signed).
var ErrSignatureRequired = errors.New("module requires a signed candidate")

// checkSigned is the one rule for signed modules, below every way a
// shadow candidate comes in: a module listed in Options.Signed takes a
// candidate only from ShadowSigned, which its source calls once the
// bundle's signature verified against its key. An upload (Shadow) is
// unsigned code that a promote would serve, so a token allowed to upload
// would bypass the signature.
func (m *Manager) checkSigned(name string, signed bool) error {
	src, ok := m.opts.Signed[name]
	if !ok || signed {
		return nil
	}
	return fmt.Errorf("%w: module %s runs only what %s verified, and an uploaded candidate carries no signature: "+
		"push it, sign it with that source's key and let the source load it as the shadow candidate (shadow = true in its block)", ErrSignatureRequired, name, src)
}
