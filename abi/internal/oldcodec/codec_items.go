package oldcodec

import "google.golang.org/protobuf/encoding/protowire"

// Whole-message fast decoders for the messages a PolicyRequest carries
// and for a PolicyResponse's decisions, which the host decodes (issue 17). Each replaces *m with the message in b when b is in the
// usual encoding (the known fields in number order, each at most once,
// one-byte tags, one-byte string lengths, short varints, no map entries)
// and otherwise decodes it again from the start with merge into a zero m,
// so what is decoded never depends on which path ran
// (FuzzPolicyRequestPaths and TestDecodeFreshAgreesWithMerge compare the
// two).
//
// Why a second fast path beside merge's. In a Go wasm guest every taken
// branch is a jump through the function's dispatch loop, which is also
// where the host's preemption probe sits (ABI.md sections 9 and 12), and
// merge's field-by-field fast path took about five per field: the
// (value, length) pair of shortBytes merged with its not-found path, a
// write barrier test per string stored (taken when the barrier is off,
// which is always, outside a GC cycle) and a jump to the next field. Here
// a present field falls straight through, the strings are kept in locals
// and stored together at the end (one barrier test for the message), and
// an absent field costs one jump. They are for fresh values only (a
// repeated item; the first Volume of a request): a singular message field
// seen twice must merge, and merge does that.

func (m *ClaimView) decodeFresh(d *decoder, b []byte) error {
	s := d.str(b)
	var fAllocID, fNodeID, fMode, fState, fLastErrorKind, fExternalNodeID, fAccessMode, fAttachmentMode string
	var fAttempts, fLastErrorCode uint32
	i := 0
	if i+1 < len(b) && b[i] == 1<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAllocID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 2<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fNodeID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 3<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fMode, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 4<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fState, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 5<<3 && b[i+1] < 0x80 {
		fAttempts, i = uint32(b[i+1]), i+2
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 6<<3 && b[i+1] < 0x80 {
		fLastErrorCode, i = uint32(b[i+1]), i+2
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 7<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fLastErrorKind, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 8<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fExternalNodeID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 9<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAccessMode, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 10<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAttachmentMode, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i != len(b) {
		goto slow
	}
done:
	m.AllocID = fAllocID
	m.NodeID = fNodeID
	m.Mode = fMode
	m.State = fState
	m.Attempts = fAttempts
	m.LastErrorCode = fLastErrorCode
	m.LastErrorKind = fLastErrorKind
	m.ExternalNodeID = fExternalNodeID
	m.AccessMode = fAccessMode
	m.AttachmentMode = fAttachmentMode
	return nil
slow:
	*m = ClaimView{}
	return m.merge(d, b)
}

func (m *AllocView) decodeFresh(d *decoder, b []byte) error {
	s := d.str(b)
	var fID, fClientStatus string
	var fTerminalAgeMs int64
	i := 0
	if i+1 < len(b) && b[i] == 1<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 2<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fClientStatus, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 3<<3 { // a time or age in ms: often two or three bytes
		if c := b[i+1]; c < 0x80 {
			fTerminalAgeMs, i = int64(c), i+2
		} else if i+2 < len(b) && b[i+2] < 0x80 {
			fTerminalAgeMs, i = int64(c&0x7f)|int64(b[i+2])<<7, i+3
		} else if i+3 < len(b) && b[i+3] < 0x80 {
			fTerminalAgeMs, i = int64(c&0x7f)|int64(b[i+2]&0x7f)<<7|int64(b[i+3])<<14, i+4
		} else {
			x, n := protowire.ConsumeVarint(b[i+1:])
			if n < 0 {
				goto slow
			}
			fTerminalAgeMs, i = int64(x), i+1+n
		}
		if i == len(b) {
			goto done
		}
	}
	if i != len(b) {
		goto slow
	}
done:
	m.ID = fID
	m.ClientStatus = fClientStatus
	m.TerminalAgeMs = fTerminalAgeMs
	return nil
slow:
	*m = AllocView{}
	return m.merge(d, b)
}

func (m *NodeView) decodeFresh(d *decoder, b []byte) error {
	s := d.str(b)
	var fID, fStatus, fExternalID string
	var fLastSeenAgeMs int64
	i := 0
	if i+1 < len(b) && b[i] == 1<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 2<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fStatus, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 3<<3 { // a time or age in ms: often two or three bytes
		if c := b[i+1]; c < 0x80 {
			fLastSeenAgeMs, i = int64(c), i+2
		} else if i+2 < len(b) && b[i+2] < 0x80 {
			fLastSeenAgeMs, i = int64(c&0x7f)|int64(b[i+2])<<7, i+3
		} else if i+3 < len(b) && b[i+3] < 0x80 {
			fLastSeenAgeMs, i = int64(c&0x7f)|int64(b[i+2]&0x7f)<<7|int64(b[i+3])<<14, i+4
		} else {
			x, n := protowire.ConsumeVarint(b[i+1:])
			if n < 0 {
				goto slow
			}
			fLastSeenAgeMs, i = int64(x), i+1+n
		}
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 5<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fExternalID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i != len(b) {
		goto slow
	}
done:
	m.ID = fID
	m.Status = fStatus
	m.LastSeenAgeMs = fLastSeenAgeMs
	m.ExternalID = fExternalID
	m.Meta = nil
	return nil
slow:
	*m = NodeView{}
	return m.merge(d, b)
}

func (m *VolumeView) decodeFresh(d *decoder, b []byte) error {
	s := d.str(b)
	var fNamespace, fID, fPluginID, fAccessMode, fAttachmentMode, fExternalID string
	i := 0
	if i+1 < len(b) && b[i] == 1<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fNamespace, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 2<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 3<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fPluginID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 4<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAccessMode, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 5<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAttachmentMode, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 6<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fExternalID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i != len(b) {
		goto slow
	}
done:
	m.Namespace = fNamespace
	m.ID = fID
	m.PluginID = fPluginID
	m.AccessMode = fAccessMode
	m.AttachmentMode = fAttachmentMode
	m.ExternalID = fExternalID
	m.Context = nil
	return nil
slow:
	*m = VolumeView{}
	return m.merge(d, b)
}

func (m *Decision) decodeFresh(d *decoder, b []byte) error {
	s := d.str(b)
	var fAllocID, fReason string
	var fAction uint32
	var fRetryAfterMs int64
	i := 0
	if i+1 < len(b) && b[i] == 1<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fAllocID, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 2<<3 && b[i+1] < 0x80 {
		fAction, i = uint32(b[i+1]), i+2
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 3<<3 { // a time or age in ms: often two or three bytes
		if c := b[i+1]; c < 0x80 {
			fRetryAfterMs, i = int64(c), i+2
		} else if i+2 < len(b) && b[i+2] < 0x80 {
			fRetryAfterMs, i = int64(c&0x7f)|int64(b[i+2])<<7, i+3
		} else if i+3 < len(b) && b[i+3] < 0x80 {
			fRetryAfterMs, i = int64(c&0x7f)|int64(b[i+2]&0x7f)<<7|int64(b[i+3])<<14, i+4
		} else {
			x, n := protowire.ConsumeVarint(b[i+1:])
			if n < 0 {
				goto slow
			}
			fRetryAfterMs, i = int64(x), i+1+n
		}
		if i == len(b) {
			goto done
		}
	}
	if i+1 < len(b) && b[i] == 4<<3|2 && b[i+1] < 0x80 {
		j := i + 2 + int(b[i+1])
		if j > len(b) {
			goto slow
		}
		fReason, i = s[i+2:j], j
		if i == len(b) {
			goto done
		}
	}
	if i != len(b) {
		goto slow
	}
done:
	m.AllocID = fAllocID
	m.Action = Action(fAction)
	m.RetryAfterMs = fRetryAfterMs
	m.Reason = fReason
	return nil
slow:
	*m = Decision{}
	return m.merge(d, b)
}
