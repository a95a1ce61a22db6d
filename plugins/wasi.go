package plugins

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// wazeroWASI instantiates wasi_snapshot_preview1 in rt.
func wazeroWASI(ctx context.Context, rt wazero.Runtime) (api.Closer, error) {
	return wasi_snapshot_preview1.Instantiate(ctx, rt)
}
