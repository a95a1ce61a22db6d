package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is one network namespace per server, each joined to a bridge in
// the test's own namespace by a veth pair: the test reaches every server,
// the servers reach each other through the bridge, and a link between two
// servers is cut by a blackhole route on both sides (the `ip` tool only:
// no nftables here). The CSI driver listens on unix sockets, which are
// not bound to a namespace: every server keeps reaching it, whatever is
// cut.
type netLab struct {
	t      *testing.T
	name   string // prefix of every namespace and link
	subnet string // 10.213.N
	ns     []string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newNetLab makes n namespaces, or skips the test when namespaces cannot
// be made here (not root, no CAP_NET_ADMIN, no ip tool).
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	id := os.Getpid() % 10000
	l := &netLab{t: t, name: fmt.Sprintf("vh%d", id), subnet: fmt.Sprintf("10.213.%d", id%250+1)}
	br := l.name + "b"
	if err := ipCmd("link", "add", br, "type", "bridge"); err != nil {
		t.Skipf("cannot make network namespaces for the partitions (needs root and CAP_NET_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		for _, ns := range l.ns {
			_ = ipCmd("netns", "del", ns)
		}
		_ = ipCmd("link", "del", br)
	})
	must := func(args ...string) {
		t.Helper()
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("addr", "add", l.subnet+".1/24", "dev", br)
	must("link", "set", br, "up")
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("%ss%d", l.name, i)
		must("netns", "add", ns)
		l.ns = append(l.ns, ns)
		host, peer := fmt.Sprintf("%sh%d", l.name, i), fmt.Sprintf("%sn%d", l.name, i)
		must("link", "add", host, "type", "veth", "peer", "name", peer)
		must("link", "set", peer, "netns", ns)
		must("link", "set", host, "master", br)
		must("link", "set", host, "up")
		must("netns", "exec", ns, "ip", "link", "set", "lo", "up")
		must("netns", "exec", ns, "ip", "addr", "add", l.ip(i)+"/24", "dev", peer)
		must("netns", "exec", ns, "ip", "link", "set", peer, "up")
	}
	return l
}

// ip is server i's address (1-based).
func (l *netLab) ip(i int) string { return fmt.Sprintf("%s.%d", l.subnet, 10+i) }

// cut drops every packet between servers a and b (1-based), both ways.
func (l *netLab) cut(a, b int) {
	l.t.Helper()
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if err := ipCmd("netns", "exec", l.ns[p[0]-1], "ip", "route", "add", "blackhole", l.ip(p[1])+"/32"); err != nil {
			l.t.Fatal(err)
		}
	}
}

// heal undoes cut.
func (l *netLab) heal(a, b int) {
	l.t.Helper()
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if err := ipCmd("netns", "exec", l.ns[p[0]-1], "ip", "route", "del", "blackhole", l.ip(p[1])+"/32"); err != nil {
			l.t.Fatal(err)
		}
	}
}
