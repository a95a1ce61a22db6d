package csi

import (
	"net/url"
	"path/filepath"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/structs"
)

var accessModes = map[structs.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	structs.AccessSingleNodeReader:     csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	structs.AccessSingleNodeWriter:     csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	structs.AccessMultiNodeReader:      csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	structs.AccessMultiNodeSingleWrite: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	structs.AccessMultiNodeMultiWrite:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// Capability maps a claim's modes onto the CSI VolumeCapability sent with
// publish and stage requests. fsType and mountFlags apply to file-system
// attachments only (CSI spec: a block capability carries neither).
//
// The modes are validated when the volume is registered; an unknown access
// mode maps to UNKNOWN and an unknown attachment mode to a capability without
// an access type, both of which a driver rejects with InvalidArgument.
func Capability(access structs.AccessMode, attach structs.AttachmentMode, fsType string, mountFlags []string) *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessModes[access]},
	}
	switch attach {
	case structs.AttachBlockDevice:
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	case structs.AttachFilesystem:
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
			FsType:     fsType,
			MountFlags: append([]string(nil), mountFlags...),
		}}
	}
	return c
}

// Paths derives a claim's staging and target paths under a node's root
// directory, laid out like the reference system:
//
//	<root>/csi/<plugin>/staging/<ns>/<vol>          (one per volume per node: NodeStage)
//	<root>/csi/<plugin>/per-alloc/<alloc>/<ns>/<vol> (one per claim: NodePublish)
//
// The namespace is part of the target too, since volume IDs are only unique
// within a namespace. Every ID is escaped into a single path element, so an
// ID such as "../x" or "a/b" can never leave its directory.
func Paths(rootDir, pluginID, ns, volID, allocID string) (staging, target string) {
	base := filepath.Join(rootDir, "csi", elem(pluginID))
	staging = filepath.Join(base, "staging", elem(ns), elem(volID))
	target = filepath.Join(base, "per-alloc", elem(allocID), elem(ns), elem(volID))
	return staging, target
}

// PathElem escapes s into one path element (never "", "." or ".."), the
// escaping Paths uses for every ID it places in a path.
func PathElem(s string) string { return elem(s) }

// elem escapes s into one path element. url.PathEscape escapes '/' and '%',
// so its output only needs "", "." and ".." handled; "%" and "%2E" can never
// come out of PathEscape, which keeps the mapping one to one.
func elem(s string) string {
	switch s {
	case "":
		return "%"
	case ".", "..":
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}
