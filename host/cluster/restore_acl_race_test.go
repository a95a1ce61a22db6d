package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
)

// TestRestoreKeepsATokenDeletedDuringTheUpload: a restore of this
// cluster's own snapshot keeps the cluster's ACL state ("tokens deleted
// since stay deleted", SECURITY.md Snapshots), as it is once the upload
// has been read whole: a PUT /v1/operator/snapshot upload may take
// minutes. The state used to be read when RestoreSnapshot was entered, so
// a token deleted while the upload ran (an administrator revoking a leaked
// token, or the restoring token itself) came back with the restore and
// its secret resolved again. (A helper's attack by role found it.)
func TestRestoreKeepsATokenDeletedDuringTheUpload(t *testing.T) {
	tc := newCluster(t, 1)
	l := tc.leader()
	loadBase(t, l.c)
	svc, boot := bootstrapOps(t, l)
	leaked, leakedSecret, err := svc.CreateToken(testCtx(t), boot.AccessorID, acl.NewToken{Name: "leaked", Policies: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	var saved bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &saved); err != nil {
		t.Fatal(err)
	}
	raw := saved.Bytes()
	nl := bytes.IndexByte(raw, '\n')
	if nl < 0 {
		t.Fatal("snapshot has no header line")
	}

	// The upload starts: its header reaches the decoder.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- l.c.RestoreSnapshot(testCtx(t), pr, RestoreOptions{}) }()
	if _, err := pw.Write(raw[:nl+1]); err != nil {
		t.Fatal(err)
	}

	// While it uploads, the leaked token is revoked, and is gone.
	if _, err := svc.DeleteToken(testCtx(t), boot.AccessorID, leaked.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Resolve(leakedSecret); !errors.Is(err, acl.ErrTokenNotFound) {
		t.Fatalf("right after the deletion the secret resolves: %v", err)
	}

	// The upload ends; the restore commits.
	go func() {
		_, err := pw.Write(raw[nl+1:])
		pw.CloseWithError(err)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("restore never finished")
	}

	if tok, _ := l.s.Snapshot().ACLTokenByAccessor(nil, leaked.AccessorID); tok != nil {
		t.Errorf("the restore brought back token %s, deleted while the restore's upload ran", leaked.AccessorID)
	}
	if id, err := svc.Resolve(leakedSecret); err == nil {
		t.Errorf("the revoked secret resolves again after the restore (accessor %s, operator:write=%v): a restore of this cluster's snapshot must keep tokens deleted since deleted",
			id.Accessor(), id.ACL.Allowed(acl.OperatorWrite, ""))
	}
}
