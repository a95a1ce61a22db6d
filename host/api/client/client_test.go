package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
)

func TestNewAddress(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{"", "http://127.0.0.1:4747", ""},
		{"127.0.0.1:9999", "http://127.0.0.1:9999", ""},
		{"https://volhost.example:4747/", "https://volhost.example:4747/", ""},
		{"ftp://x", "", "scheme must be http or https"},
		{"http://", "", "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c, err := client.New(tt.in, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.Address() != tt.want {
				t.Fatalf("New(%q) = %v, %v; want %s", tt.in, c, err, tt.want)
			}
		})
	}
}

func TestErrorsUnwrapToSentinels(t *testing.T) {
	b := apitest.NewStoreBackend()
	ts := apitest.Serve(t, b)
	c, err := client.New(ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = c.Volume(ctx, "", "nope", nil)
	var ae *client.APIError
	if !errors.Is(err, structs.ErrNotFound) || !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
		t.Errorf("missing volume: %v", err)
	}
	_, err = c.RegisterVolumes(ctx, []*structs.Volume{{ID: "v", ExternalID: "d", PluginID: "ghost",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}})
	if !errors.Is(err, structs.ErrNotFound) || !strings.Contains(err.Error(), `plugin "ghost"`) {
		t.Errorf("unknown plugin: %v", err)
	}
	_, err = c.RegisterVolumes(ctx, []*structs.Volume{{ID: "v", PluginID: "ghost"}})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Field == "" || errors.Unwrap(err) != nil {
		t.Errorf("invalid volume: %v (%+v)", err, ae)
	}
	if _, err := c.DeregisterVolume(ctx, "", "nope", false); !errors.Is(err, structs.ErrNotFound) {
		t.Errorf("deregister missing: %v", err)
	}
}

// An ID holding "/" (allowed by the store) stays one path segment.
func TestIDsAreEscaped(t *testing.T) {
	var got string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath() + "?" + r.URL.RawQuery
		w.Header().Set("X-Volhost-Index", "42")
		_, _ = w.Write([]byte(`{"id":"a/b"}`))
	}))
	defer ts.Close()
	c, err := client.New(ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.Volume(context.Background(), "prod", "a/b", &client.QueryOptions{Index: 7, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/v1/volume/a%2Fb?index=7&namespace=prod&wait=1m0s"; got != want {
		t.Errorf("request = %s, want %s", got, want)
	}
	if meta.Index != 42 {
		t.Errorf("index = %d, want 42", meta.Index)
	}
}

func TestBlockingRead(t *testing.T) {
	b := apitest.NewStoreBackend()
	ts := apitest.Serve(t, b)
	c, err := client.New(ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.Plugins(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []*structs.Plugin, 1)
	go func() {
		ps, _, err := c.Plugins(ctx, &client.QueryOptions{Index: meta.Index, Wait: 5 * time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- ps
	}()
	if _, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "q"}); err != nil {
		t.Fatal(err)
	}
	// Whether the read parked before the write or not, it answers with the
	// new plugin and never waits out its 5 minutes.
	if ps := <-done; len(ps) != 2 {
		t.Errorf("plugins after write = %d, want 2", len(ps))
	}
}

// TestOnWarning: each Warning header of an answer reaches the handler as
// its message (the CLI prints it), RFC 9111's quoted text unquoted.
func TestOnWarning(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 volhost "plugin \"p\" has no controller_endpoint"`)
		w.Header().Add("Warning", `not a 299 warning`)
		_, _ = io.WriteString(w, `[]`)
	}))
	defer ts.Close()
	c, err := client.New(ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	c.OnWarning(func(m string) { got = append(got, m) })
	if _, _, err := c.Nodes(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	want := []string{`plugin "p" has no controller_endpoint`, "not a 299 warning"}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings %q, want %q", got, want)
	}
}
