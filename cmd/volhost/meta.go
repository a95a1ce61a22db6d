package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
)

// Meta holds what every operator command shares: the UI, the environment
// and the global flags (-address, and -json on reads).
type Meta struct {
	Ui  cli.Ui
	Env func(string) string
	// Ctx is the parent of every request's context (Background when nil);
	// tests cancel it to end a following command.
	Ctx context.Context

	address    string
	json       bool
	token      string
	caCert     string
	clientCert string
	clientKey  string
}

// Environment variables of the security flags.
const (
	envToken      = "VOLHOST_TOKEN"
	envCACert     = "VOLHOST_CACERT"
	envClientCert = "VOLHOST_CLIENT_CERT"
	envClientKey  = "VOLHOST_CLIENT_KEY"
)

// globalHelp is appended to every command's help.
const globalHelp = `
General Options:

  -address=<addr>
    The address of the volhost agent's HTTP API. Overrides the VOLHOST_ADDR
    environment variable. Default: http://127.0.0.1:4747 (use https:// when
    the agent serves TLS).

  -token=<secret>
    The ACL token's secret ID. Overrides the VOLHOST_TOKEN environment
    variable.

  -ca-cert=<file>
    CA certificate the agent's HTTPS certificate is verified against.
    Overrides VOLHOST_CACERT.

  -client-cert=<file>, -client-key=<file>
    Client certificate and key presented to the agent (needed when it sets
    verify_https_client). Override VOLHOST_CLIENT_CERT and
    VOLHOST_CLIENT_KEY.
`

const jsonHelp = `
  -json
    Print the answer as JSON (the API's own format) instead of a table.
`

// flagSet returns a flag set carrying the global flags; read adds -json.
// Parse errors are returned, never printed by the flag package.
func (m *Meta) flagSet(name string, read bool) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&m.address, "address", "", "")
	fs.StringVar(&m.token, "token", "", "")
	fs.StringVar(&m.caCert, "ca-cert", "", "")
	fs.StringVar(&m.clientCert, "client-cert", "", "")
	fs.StringVar(&m.clientKey, "client-key", "", "")
	if read {
		fs.BoolVar(&m.json, "json", false, "")
	}
	return fs
}

// parse parses args and checks the number of positional arguments is
// within [minArgs, maxArgs]; the error names what is wrong.
func (m *Meta) parse(fs *flag.FlagSet, args []string, minArgs, maxArgs int, usage string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%v (usage: volhost %s)", err, usage)
	}
	rest := fs.Args()
	switch {
	case len(rest) < minArgs:
		return nil, fmt.Errorf("not enough arguments (usage: volhost %s)", usage)
	case len(rest) > maxArgs:
		return nil, fmt.Errorf("unexpected argument %q (usage: volhost %s; flags go before arguments)", rest[maxArgs], usage)
	}
	return rest, nil
}

// begin is how a command that talks to an agent starts: it parses its
// flags and positional arguments, makes the client, and gives the context
// of its calls, which the command must stop.
func (m *Meta) begin(fs *flag.FlagSet, args []string, minArgs, maxArgs int, usage string) ([]string, *client.Client, context.Context, context.CancelFunc, error) {
	rest, err := m.parse(fs, args, minArgs, maxArgs, usage)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cl, err := m.client()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx, stop := m.context()
	return rest, cl, ctx, stop, nil
}

// client returns an API client for -address, VOLHOST_ADDR or the default.
func (m *Meta) client() (*client.Client, error) {
	addr := m.address
	if addr == "" && m.Env != nil {
		addr = m.Env(client.EnvAddress)
	}
	env := func(flagValue, name string) string {
		if flagValue == "" && m.Env != nil {
			return m.Env(name)
		}
		return flagValue
	}
	var hc *http.Client
	ca, cert, key := env(m.caCert, envCACert), env(m.clientCert, envClientCert), env(m.clientKey, envClientKey)
	if ca != "" || cert != "" || key != "" {
		tc, err := tlsutil.ClientFiles(ca, cert, key)
		if err != nil {
			return nil, err
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
	}
	cl, err := client.New(addr, hc)
	if err != nil {
		return nil, err
	}
	cl.SetToken(m.secret())
	cl.OnWarning(func(msg string) { m.Ui.Warn("Warning: " + msg) })
	if m.secret() != "" && plainRemote(cl.Address()) {
		// The agent names its own tokens sent in clear INSECURE at start;
		// the CLI's goes in clear on every request to such an address.
		m.Ui.Warn("Warning: the ACL token goes over plain HTTP to " + cl.Address() +
			": anyone on the path can read it and act as you; use https (tls { http = true } on the agents)")
	}
	return cl, nil
}

// plainRemote reports whether address is plain http to another machine
// than this one (loopback is not on any network path).
func plainRemote(address string) bool {
	u, err := url.Parse(address)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// secret is the token the CLI sends: -token, else VOLHOST_TOKEN.
func (m *Meta) secret() string {
	if m.token == "" && m.Env != nil {
		return m.Env(envToken)
	}
	return m.token
}

// context is cancelled by an interrupt, so a long claim or blocking read
// ends cleanly on Ctrl-C.
func (m *Meta) context() (context.Context, context.CancelFunc) {
	parent := m.Ctx
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt)
}

// fail reports err as one line on stderr and returns exit code 1.
func (m *Meta) fail(err error) int {
	var ue *url.Error
	msg := err.Error()
	var ae *client.APIError
	if !errors.As(err, &ae) && errors.As(err, &ue) {
		// Transport failure: say which agent could not be reached.
		msg = fmt.Sprintf("cannot reach the volhost agent at %s: %v", hostOf(ue.URL), ue.Err)
	}
	if errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden {
		msg = m.denial(ae.Message)
	}
	m.Ui.Error("Error: " + oneLine(msg))
	return 1
}

// denial rewrites the API's 403 for a CLI user: its hints name HTTP
// headers and query parameters, which the CLI sets through flags. With no
// token sent it says so first: the anonymous policy was what refused.
func (m *Meta) denial(msg string) string {
	msg = strings.Replace(msg, api.HintListOneNamespace, " (pass -namespace=<ns> to ask for one)", 1)
	msg = strings.Replace(msg, api.HintNoToken, "", 1)
	if m.secret() == "" {
		msg += "; no ACL token was sent: pass -token=<secret> or set " + envToken
	}
	return msg
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}

// badChoice is the error of an enumerated flag or argument (name, e.g.
// "-mode") given a value it does not take: one wording for every command,
// naming every value it takes, as the API's 400s do.
func badChoice[T ~string](name string, got string, valid ...T) error {
	return fmt.Errorf("%s must be one of %s, got %q", name, structs.Choices(valid...), got)
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// printJSON prints v as indented JSON.
func (m *Meta) printJSON(v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return m.fail(fmt.Errorf("encode JSON: %w", err))
	}
	m.Ui.Output(string(b))
	return 0
}

// table renders rows (the first is the header) in aligned columns.
func table(rows [][]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// kv renders "Key = value" lines, aligned.
func kv(pairs [][2]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t= %s\n", p[0], p[1])
	}
	_ = tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func helpText(usage, body string, read bool) string {
	h := "Usage: volhost " + usage + "\n\n" + strings.Trim(body, "\n") + "\n" + globalHelp
	if read {
		h += jsonHelp
	}
	return strings.TrimRight(h, "\n")
}

// registerFile runs `volhost KIND register FILE`: it loads the spec file with
// load, connects, and hands the objects to send, which registers them and
// prints what it did. Every failure is one line and exit code 1.
func registerFile[T any](m *Meta, kind string, args []string, load func(string) ([]T, error),
	send func(context.Context, *client.Client, []T) error) int {
	fs := m.flagSet(kind+" register", false)
	rest, err := m.parse(fs, args, 1, 1, kind+" register [options] FILE")
	if err != nil {
		return m.fail(err)
	}
	objs, err := load(rest[0])
	if err != nil {
		return m.fail(err)
	}
	cl, err := m.client()
	if err != nil {
		return m.fail(err)
	}
	ctx, stop := m.context()
	defer stop()
	if err := send(ctx, cl, objs); err != nil {
		return m.fail(err)
	}
	return 0
}
