package csi

import (
	"slices"
	"strings"

	"google.golang.org/grpc/status"
)

// redacted replaces a secret value in a driver's message, as the API
// shows a volume's secrets.
const redacted = "<redacted>"

// minRedacted is the shortest secret value searched for in a message:
// shorter ones would match ordinary words and are no secrets anyway.
const minRedacted = 4

// redactSecrets replaces, in a failed call's status message, every value
// of the secrets the call carried. A driver that echoes what it was sent
// ("login failed for password ...") would otherwise carry a volume's
// secret into the claimant's API answer, a claim's last error, events and
// logs, which readers of the namespace (or a claim-only token) see. The
// code is kept; the status details, which could carry the echo too, are
// dropped with it.
func redactSecrets(err error, secrets map[string]string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err // not the driver's answer: the transport's own error
	}
	vals := make([]string, 0, len(secrets))
	for _, v := range secrets {
		if len(v) >= minRedacted {
			vals = append(vals, v)
		}
	}
	// Longest first: a value inside another goes with it.
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	msg := st.Message()
	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, redacted)
	}
	if msg == st.Message() {
		return err
	}
	return status.New(st.Code(), msg).Err()
}
