package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/GoogleCloudPlatform/k8s-cloud-provider/pkg/cloud/meta"
	computev1 "google.golang.org/api/compute/v1"
	gce "sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/pkg/gce-cloud-provider/compute"
)

// lockedCloud serialises the fake cloud: FakeCloudProvider keeps plain maps
// and slices, and the driver calls it from one goroutine per gRPC call, so
// concurrent publishes on one instance would race without this. It also
// routes armed detach failures through gce.FakeBlockingCloudProvider (the
// driver's own fault hook) and persists attachments to a state file so a
// killed and restarted driver sees the cloud as it was.
type lockedCloud struct {
	gce.GCECompute
	fake     *gce.FakeCloudProvider
	blocking *gce.FakeBlockingCloudProvider
	project  string
	zone     string

	mu           sync.Mutex
	detachErrors int // armed detach failures; <0 means every detach fails
	stateFile    string
	attached     map[string]map[string]bool // instance -> disk -> attached
}

func newLockedCloud(project, zone string, disks, instances []string, stateFile string) (*lockedCloud, error) {
	cds := make([]*gce.CloudDisk, 0, len(disks))
	for _, d := range disks {
		cds = append(cds, gce.CloudDiskFromV1(&computev1.Disk{
			Name:     d,
			Zone:     zone,
			SelfLink: fmt.Sprintf("https://www.googleapis.com/compute/v1/projects/%s/zones/%s/disks/%s", project, zone, d),
			Type:     fmt.Sprintf("https://www.googleapis.com/compute/v1/projects/%s/zones/%s/diskTypes/pd-standard", project, zone),
		}))
	}
	fake, err := gce.CreateFakeCloudProvider(project, zone, cds)
	if err != nil {
		return nil, fmt.Errorf("fake cloud: %w", err)
	}
	for _, name := range instances {
		fake.InsertInstance(&computev1.Instance{
			Name:        name,
			Zone:        zone,
			MachineType: fmt.Sprintf("zones/%s/machineTypes/n1-standard-4", zone),
			SelfLink:    fmt.Sprintf("https://www.googleapis.com/compute/v1/projects/%s/zones/%s/instances/%s", project, zone, name),
		}, zone, name)
	}
	ready := make(chan chan gce.Signal)
	c := &lockedCloud{
		GCECompute: fake, fake: fake, project: project, zone: zone,
		blocking:  &gce.FakeBlockingCloudProvider{FakeCloudProvider: fake, ReadyToExecute: ready},
		stateFile: stateFile, attached: map[string]map[string]bool{},
	}
	// Every call routed through the blocking provider is an armed failure:
	// answer it with ReportError. The goroutine lives as long as the process.
	go func() {
		for execute := range ready {
			execute <- gce.Signal{ReportError: true}
		}
	}()
	if err := c.restore(); err != nil {
		return nil, err
	}
	return c, nil
}

// restore re-attaches what the state file says was attached when the
// previous process died.
func (c *lockedCloud) restore() error {
	if c.stateFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading state: %w", err)
	}
	var st map[string][]string
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("state file %s: %w", c.stateFile, err)
	}
	for inst, disks := range st {
		for _, d := range disks {
			if err := c.fake.AttachDisk(context.Background(), c.project, meta.ZonalKey(d, c.zone), "READ_WRITE", "PERSISTENT", c.zone, inst, false); err != nil {
				return fmt.Errorf("restoring attachment of %s to %s: %w", d, inst, err)
			}
			c.markLocked(inst, d, true)
		}
	}
	return nil
}

func (c *lockedCloud) markLocked(inst, disk string, on bool) {
	if c.attached[inst] == nil {
		c.attached[inst] = map[string]bool{}
	}
	if on {
		c.attached[inst][disk] = true
	} else {
		delete(c.attached[inst], disk)
	}
}

func (c *lockedCloud) persistLocked() error {
	if c.stateFile == "" {
		return nil
	}
	st := map[string][]string{}
	for inst, disks := range c.attached {
		for d := range disks {
			st[inst] = append(st[inst], d)
		}
		sort.Strings(st[inst])
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := c.stateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.stateFile)
}

// armDetachErrors makes the next n detaches fail (n < 0: all of them, until
// re-armed with 0).
func (c *lockedCloud) armDetachErrors(n int) {
	c.mu.Lock()
	c.detachErrors = n
	c.mu.Unlock()
}

// isAttached reports whether disk is attached to instance in the fake cloud.
func (c *lockedCloud) isAttached(ctx context.Context, disk, instance string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.fake.GetInstanceOrError(ctx, c.project, c.zone, instance)
	if err != nil {
		return false, fmt.Errorf("instance %q: %w", instance, err)
	}
	for _, d := range inst.Disks {
		if d.DeviceName == disk {
			return true, nil
		}
	}
	return false, nil
}

func (c *lockedCloud) GetDisk(ctx context.Context, project string, key *meta.Key) (*gce.CloudDisk, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fake.GetDisk(ctx, project, key)
}

func (c *lockedCloud) RepairUnderspecifiedVolumeKey(ctx context.Context, project string, key *meta.Key, fallbackZone string) (string, *meta.Key, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fake.RepairUnderspecifiedVolumeKey(ctx, project, key, fallbackZone)
}

func (c *lockedCloud) GetInstanceOrError(ctx context.Context, project, zone, name string) (*computev1.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.fake.GetInstanceOrError(ctx, project, zone, name)
	if err != nil {
		return nil, err
	}
	// A copy: the driver reads Disks after we unlock.
	cp := *inst
	cp.Disks = append([]*computev1.AttachedDisk(nil), inst.Disks...)
	return &cp, nil
}

func (c *lockedCloud) AttachDisk(ctx context.Context, project string, key *meta.Key, readWrite, diskType, zone, name string, force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fake.AttachDisk(ctx, project, key, readWrite, diskType, zone, name, force); err != nil {
		return err
	}
	c.markLocked(name, key.Name, true)
	return c.persistLocked()
}

func (c *lockedCloud) WaitForAttach(ctx context.Context, project string, key *meta.Key, diskType, zone, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fake.WaitForAttach(ctx, project, key, diskType, zone, name)
}

func (c *lockedCloud) DetachDisk(ctx context.Context, project, device, zone, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detachErrors != 0 {
		if c.detachErrors > 0 {
			c.detachErrors--
		}
		// The driver's own fault hook: the blocking provider asks our
		// responder goroutine, which answers ReportError.
		return c.blocking.DetachDisk(ctx, project, device, zone, name)
	}
	if err := c.fake.DetachDisk(ctx, project, device, zone, name); err != nil {
		return err
	}
	c.markLocked(name, device, false)
	return c.persistLocked()
}
