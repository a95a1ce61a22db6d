package csi

import (
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/structs"
)

func TestCapability(t *testing.T) {
	mount := func(mode csipb.VolumeCapability_AccessMode_Mode, fs string, flags ...string) *csipb.VolumeCapability {
		return &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fs, MountFlags: flags}},
		}
	}
	block := func(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
		return &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		}
	}
	tests := []struct {
		access structs.AccessMode
		attach structs.AttachmentMode
		fs     string
		flags  []string
		want   *csipb.VolumeCapability
	}{
		{structs.AccessSingleNodeReader, structs.AttachFilesystem, "ext4", []string{"ro"}, mount(csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, "ext4", "ro")},
		{structs.AccessSingleNodeWriter, structs.AttachFilesystem, "xfs", nil, mount(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs")},
		{structs.AccessMultiNodeReader, structs.AttachFilesystem, "", nil, mount(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "")},
		{structs.AccessMultiNodeSingleWrite, structs.AttachFilesystem, "ext4", []string{"noatime", "nodev"}, mount(csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "ext4", "noatime", "nodev")},
		{structs.AccessMultiNodeMultiWrite, structs.AttachFilesystem, "nfs", nil, mount(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "nfs")},
		// Block: fs type and flags do not apply (CSI spec).
		{structs.AccessSingleNodeWriter, structs.AttachBlockDevice, "ext4", []string{"ro"}, block(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		{structs.AccessMultiNodeMultiWrite, structs.AttachBlockDevice, "", nil, block(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
		// Unknown modes give what a driver rejects with InvalidArgument.
		{"bogus", structs.AttachFilesystem, "", nil, mount(csipb.VolumeCapability_AccessMode_UNKNOWN, "")},
		{structs.AccessSingleNodeWriter, "bogus", "", nil, &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
	}
	for _, tt := range tests {
		t.Run(string(tt.access)+"/"+string(tt.attach), func(t *testing.T) {
			got := Capability(tt.access, tt.attach, tt.fs, tt.flags)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Capability = %v, want %v", got, tt.want)
			}
		})
	}

	// The capability must not alias the caller's (the volume's) mount flags.
	flags := []string{"ro"}
	c := Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", flags)
	c.GetMount().MountFlags[0] = "rw"
	if flags[0] != "ro" {
		t.Errorf("Capability aliases the mount flags slice")
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		name                         string
		root, plugin, ns, vol, alloc string
		staging, target              string
	}{
		{"plain", "/var/lib/volhost", "pd", "default", "vol1", "a1",
			"/var/lib/volhost/csi/pd/staging/default/vol1",
			"/var/lib/volhost/csi/pd/per-alloc/a1/default/vol1"},
		{"slash in ids stays one element", "/r", "p/x", "ns", "a/b", "al/loc",
			"/r/csi/p%2Fx/staging/ns/a%2Fb",
			"/r/csi/p%2Fx/per-alloc/al%2Floc/ns/a%2Fb"},
		{"dot dot cannot escape", "/r", "..", "..", "..", ".",
			"/r/csi/%2E%2E/staging/%2E%2E/%2E%2E",
			"/r/csi/%2E%2E/per-alloc/%2E/%2E%2E/%2E%2E"},
		{"empty ids keep the depth", "/r", "p", "", "v", "",
			"/r/csi/p/staging/%/v",
			"/r/csi/p/per-alloc/%/%/v"},
		{"percent escaped so mapping is one to one", "/r", "p", "ns", "%2E%2E", "a",
			"/r/csi/p/staging/ns/%252E%252E",
			"/r/csi/p/per-alloc/a/ns/%252E%252E"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			staging, target := Paths(tt.root, tt.plugin, tt.ns, tt.vol, tt.alloc)
			if staging != tt.staging || target != tt.target {
				t.Errorf("Paths = %q, %q\nwant        %q, %q", staging, target, tt.staging, tt.target)
			}
			for _, p := range []string{staging, target} {
				if !strings.HasPrefix(p, filepath.Join(tt.root, "csi")+"/") {
					t.Errorf("%q escapes %q", p, tt.root)
				}
			}
		})
	}
}

func TestGRPCTarget(t *testing.T) {
	tests := []struct {
		endpoint, want string
	}{
		{"unix:///var/run/csi.sock", "unix:///var/run/csi.sock"},
		{"unix:///var/run/../run/csi.sock", "unix:///var/run/csi.sock"},
		{"tcp://127.0.0.1:9000", "passthrough:///127.0.0.1:9000"},
		{"tcp://csi.example:9000/", "passthrough:///csi.example:9000"},
		{"tcp://[::1]:9000", "passthrough:///[::1]:9000"},
		{"unix:relative.sock", ""},
		{"unix://host/csi.sock", ""},
		{"tcp://127.0.0.1", ""},
		{"tcp://127.0.0.1:9000?x=1", ""},
		{"https://127.0.0.1:9000", ""},
		{"127.0.0.1:9000", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			got, err := grpcTarget(tt.endpoint)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "endpoint") {
					t.Fatalf("grpcTarget(%q) = %q, %v; want an endpoint error", tt.endpoint, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("grpcTarget(%q) = %q, %v; want %q", tt.endpoint, got, err, tt.want)
			}
		})
	}
}
