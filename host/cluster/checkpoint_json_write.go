package cluster

import (
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// appendCheckpoint appends json.Marshal of a checkpoint request to b,
// byte for byte, when every string in it is plain (printable ASCII that
// json.Marshal writes as it is: no quote, backslash or HTML character it
// escapes) and every time one it can write; ok is false for anything else
// (what it appended is then to be dropped), which the caller marshals with
// encoding/json. The leader encodes every checkpoint it appends (by
// reflection a large part of a release's CPU: BenchmarkEncodeCheckpoint);
// TestEncodeCheckpointMatchesJSON and FuzzEncodeCheckpoint compare the
// bytes with json.Marshal's.
func appendCheckpoint(b []byte, req any) (out []byte, ok bool) {
	w := plainjson.Writer{B: b}
	switch r := req.(type) {
	case *structs.ClaimCheckpointRequest:
		appendOneCheckpoint(&w, r)
	case *structs.ClaimCheckpointBatchRequest:
		if r == nil {
			w.Raw("null")
			break
		}
		w.Open()
		w.Key("checkpoints")
		if r.Checkpoints == nil {
			w.Raw("null")
		} else {
			w.Raw("[")
			for i, c := range r.Checkpoints {
				if i > 0 {
					w.Raw(",")
				}
				appendOneCheckpoint(&w, c)
			}
			w.Raw("]")
		}
		w.Close()
	default:
		return nil, false
	}
	return w.B, w.OK()
}

func appendOneCheckpoint(w *plainjson.Writer, r *structs.ClaimCheckpointRequest) {
	if r == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Field("namespace", r.Namespace)
	w.Field("volume_id", r.VolumeID)
	w.Key("claim")
	r.Claim.AppendJSON(w)
	if r.Term != 0 {
		w.Key("term")
		w.Uint(r.Term)
	}
	w.Flag("unstaged", r.Unstaged)
	w.Flag("controller_unpublished", r.ControllerUnpublished)
	w.Flag("free", r.Free)
	w.Close()
}
