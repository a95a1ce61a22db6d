package fault

import (
	"context"
	"runtime"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func ok(context.Context) (any, error) { return "driver", nil }

func TestArmRejectsBadRules(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
	}{
		{"no method", Rule{Code: "Unavailable"}},
		{"unknown code", Rule{Method: "Probe", Code: "Nope"}},
		{"bad hang", Rule{Method: "Probe", Hang: "soon"}},
		{"negative hang", Rule{Method: "Probe", Hang: "-1s"}},
		{"nothing to do", Rule{Method: "Probe"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := New()
			if err := in.Arm(Rule{Method: "Probe", Code: "Internal"}, tt.rule); err == nil {
				t.Fatal("accepted")
			}
			// A bad rule arms none of the batch.
			if _, err := in.Apply(context.Background(), "s", "Probe", nil, ok); err != nil {
				t.Fatalf("a rule from a refused batch was armed: %v", err)
			}
		})
	}
}

func TestApplySequenceAndRecording(t *testing.T) {
	in := New()
	if err := in.Arm(
		Rule{Method: "NodeUnpublishVolume", Code: "Unavailable", Count: 1},
		Rule{Method: "NodeUnpublishVolume", Code: "OK", Count: 1},
		Rule{Method: "NodeUnpublishVolume", Code: "DeadlineExceeded", Count: 1},
	); err != nil {
		t.Fatal(err)
	}
	want := []codes.Code{codes.Unavailable, codes.OK, codes.DeadlineExceeded, codes.OK}
	for i, w := range want {
		req := &csi.NodeUnpublishVolumeRequest{VolumeId: "v1"}
		_, err := in.Apply(context.Background(), "node1", "NodeUnpublishVolume", req, ok)
		if got := status.Code(err); got != w {
			t.Errorf("call %d: code %s, want %s", i, got, w)
		}
	}
	done, started := in.Calls()
	if len(done) != 4 || len(started) != 4 {
		t.Fatalf("recorded %d done, %d started; want 4, 4", len(done), len(started))
	}
	if done[0].VolumeID != "v1" || done[0].Service != "node1" || !done[0].Injected || done[1].Injected {
		t.Errorf("records: %+v", done)
	}
	in.ResetCalls()
	if done, _ := in.Calls(); len(done) != 0 {
		t.Errorf("reset kept %d calls", len(done))
	}
}

func TestPersistentRuleAndClear(t *testing.T) {
	in := New()
	if err := in.Arm(Rule{Method: "ControllerUnpublishVolume", Code: "Internal"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := in.Apply(context.Background(), "c", "ControllerUnpublishVolume", nil, ok); status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v, want Internal", i, err)
		}
	}
	if _, err := in.Apply(context.Background(), "c", "ControllerPublishVolume", nil, ok); err != nil {
		t.Fatalf("another method was failed: %v", err)
	}
	in.Clear()
	if _, err := in.Apply(context.Background(), "c", "ControllerUnpublishVolume", nil, ok); err != nil {
		t.Fatalf("cleared rule still applies: %v", err)
	}
}

// A hang ends when the test clears the faults, never by a timer the test
// has to guess, and the held call then reaches the driver.
func TestHangEndsOnClear(t *testing.T) {
	in := New()
	if err := in.Arm(Rule{Method: "ControllerUnpublishVolume", Hang: "1h", Count: 1}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp any
		err  error
	}
	res := make(chan result, 1)
	go func() {
		r, err := in.Apply(context.Background(), "c", "ControllerUnpublishVolume", nil, ok)
		res <- result{r, err}
	}()
	deadline := time.After(10 * time.Second)
	for {
		if _, started := in.Calls(); len(started) == 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the call never started")
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case r := <-res:
		t.Fatalf("the hang ended before Clear: %+v", r)
	default:
	}
	in.Clear()
	r := <-res
	if r.err != nil || r.resp != "driver" {
		t.Fatalf("after Clear: %v, %v; want the driver's answer", r.resp, r.err)
	}
}

// A hang also ends with the caller's deadline, answered DeadlineExceeded.
func TestHangEndsWithCallerDeadline(t *testing.T) {
	in := New()
	if err := in.Arm(Rule{Method: "NodeStageVolume", Hang: "1h"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := in.Apply(ctx, "n", "NodeStageVolume", nil, ok)
	if status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}

// A lost answer: the driver runs the call, the caller gets the injected
// code, and the record says the call ran and what the driver answered. A
// counted rule applies before a standing one of the same method, and the
// standing one applies again once the counted one is used up.
func TestLoseRunsTheCallAndLosesItsAnswer(t *testing.T) {
	in := New()
	if err := in.Arm(Rule{Method: "NodeUnstageVolume", Hang: "1ms"},
		Rule{Method: "NodeUnstageVolume", Code: "Unavailable", Lose: true, Count: 1}); err != nil {
		t.Fatal(err)
	}
	ran := 0
	driver := func(context.Context) (any, error) { ran++; return "driver", nil }
	if resp, err := in.Apply(context.Background(), "node1", "NodeUnstageVolume", nil, driver); status.Code(err) != codes.Unavailable || resp != nil {
		t.Fatalf("lost answer: %v, %v", resp, err)
	}
	if ran != 1 {
		t.Fatalf("the driver ran %d times, want 1", ran)
	}
	if resp, err := in.Apply(context.Background(), "node1", "NodeUnstageVolume", nil, driver); err != nil || resp != "driver" {
		t.Fatalf("after the lost answer: %v, %v", resp, err)
	}
	done, _ := in.Calls()
	if len(done) != 2 || !done[0].Ran || !done[0].Injected || done[0].DriverCode != "OK" || done[0].Code != "Unavailable" || done[1].Ran || done[1].Injected {
		t.Fatalf("records: %+v", done)
	}
	for _, bad := range []Rule{{Method: "NodeUnstageVolume", Lose: true}, {Method: "NodeUnstageVolume", Lose: true, Code: "OK"}} {
		if err := in.Arm(bad); err == nil {
			t.Errorf("armed %+v", bad)
		}
	}
}

// A Lose rule with a hang acts first and then holds the lost answer: the
// driver's effect is visible while the caller still waits (the window in
// which a node agent is killed between a step's effect and its answer).
func TestLoseWithHangActsBeforeItHolds(t *testing.T) {
	in := New()
	if err := in.Arm(Rule{Method: "NodePublishVolume", Code: "Unavailable", Lose: true, Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	driver := func(context.Context) (any, error) { close(ran); return "driver", nil }
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		_, err := in.Apply(ctx, "node1", "NodePublishVolume", nil, driver)
		answered <- err
	}()
	<-ran // the driver acted; the answer is still held
	deadline := time.Now().Add(10 * time.Second)
	for _, started := in.Calls(); len(started) != 1 || !started[0].Ran; _, started = in.Calls() {
		if time.Now().After(deadline) {
			t.Fatalf("the started record does not say the call ran: %+v", started)
		}
		runtime.Gosched()
	}
	select {
	case err := <-answered:
		t.Fatalf("answered before the hang ended: %v", err)
	default:
	}
	cancel() // the caller gives up (or dies)
	if err := <-answered; status.Code(err) != codes.Unavailable {
		t.Fatalf("held lost answer = %v, want Unavailable", err)
	}
	done, _ := in.Calls()
	if len(done) != 1 || !done[0].Ran || done[0].DriverCode != "OK" {
		t.Fatalf("records: %+v", done)
	}
}
