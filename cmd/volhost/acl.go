package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
)

// readAll reads a policy from stdin, bounded like the API's body limit.
func readAll(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, 1<<20))
}

// withClient runs fn with a client and a cancellable context.
func (m *Meta) withClient(fn func(ctx context.Context, cl *client.Client) error) int {
	cl, err := m.client()
	if err != nil {
		return m.fail(err)
	}
	ctx, stop := m.context()
	defer stop()
	if err := fn(ctx, cl); err != nil {
		return m.fail(err)
	}
	return 0
}

// ACLBootstrapCommand is `volhost acl bootstrap`.
type ACLBootstrapCommand struct{ *Meta }

func (c *ACLBootstrapCommand) Synopsis() string { return "Create the cluster's first management token" }
func (c *ACLBootstrapCommand) Help() string {
	return helpText("acl bootstrap [options]", `
  Create the first management token of an ACL-enabled cluster and print
  its accessor and secret IDs. It works once per cluster: a second
  bootstrap is refused. Keep the secret safe: it is shown only now (the
  cluster stores its SHA-256 only), and it grants everything.`, true)
}

func (c *ACLBootstrapCommand) Run(args []string) int {
	fs := c.flagSet("acl bootstrap", true)
	if _, err := c.parse(fs, args, 0, 0, "acl bootstrap [options]"); err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		tok, err := cl.ACLBootstrap(ctx)
		if err != nil {
			return err
		}
		c.showSecret(tok)
		return nil
	})
}

func (m *Meta) showSecret(t *api.ACLTokenSecret) {
	if m.json {
		m.printJSON(t)
		return
	}
	m.Ui.Output(kv(append(tokenPairs(t.ACLTokenView)[:1], append([][2]string{{"Secret ID", t.SecretID}}, tokenPairs(t.ACLTokenView)[1:]...)...)))
}

func tokenPairs(t api.ACLTokenView) [][2]string {
	exp := "never"
	if t.ExpirationTime != nil {
		exp = fmtTime(*t.ExpirationTime)
	}
	return [][2]string{
		{"Accessor ID", t.AccessorID},
		{"Name", orDash(t.Name)},
		{"Type", t.Type},
		{"Policies", orDash(strings.Join(t.Policies, ","))},
		{"Create Time", fmtTime(t.CreateTime)},
		{"Expiry Time", exp},
	}
}

// ACLPolicyApplyCommand is `volhost acl policy apply NAME FILE`.
type ACLPolicyApplyCommand struct{ *Meta }

func (c *ACLPolicyApplyCommand) Synopsis() string {
	return "Create or replace an ACL policy from an HCL file"
}
func (c *ACLPolicyApplyCommand) Help() string {
	return helpText("acl policy apply [options] <name> <file>", `
  Create or replace the policy NAME with the HCL rules in FILE ("-" reads
  stdin). Needs a management token. The policy named "anonymous" governs
  requests without a token. A policy:

    namespace "default" {
      capabilities = ["read", "register", "claim", "detach"]
    }
    namespace "*" { policy = "read" }    # read | write | deny
    node     { policy = "write" }        # read | write | deny
    operator { policy = "read" }         # read | write | deny
    modules  { policy = "read" }         # read | reload | deny
    events   { policy = "read" }         # read | deny

  Namespace capabilities: read, register, claim, detach, deregister,
  force-deregister (granted only by name, never by policy = "write").

Options:

  -description=<text>
    A description of the policy.`, false)
}

func (c *ACLPolicyApplyCommand) Run(args []string) int {
	fs := c.flagSet("acl policy apply", false)
	desc := fs.String("description", "", "")
	rest, err := c.parse(fs, args, 2, 2, "acl policy apply [options] <name> <file>")
	if err != nil {
		return c.fail(err)
	}
	var rules []byte
	if rest[1] == "-" {
		rules, err = readAll(os.Stdin)
	} else {
		rules, err = os.ReadFile(rest[1])
	}
	if err != nil {
		return c.fail(fmt.Errorf("read policy: %w", err))
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.ACLPolicyApply(ctx, rest[0], *desc, string(rules)); err != nil {
			return err
		}
		c.Ui.Output(fmt.Sprintf("Successfully wrote %q ACL policy!", rest[0]))
		return nil
	})
}

// ACLPolicyListCommand is `volhost acl policy list`.
type ACLPolicyListCommand struct{ *Meta }

func (c *ACLPolicyListCommand) Synopsis() string { return "List ACL policies" }
func (c *ACLPolicyListCommand) Help() string {
	return helpText("acl policy list [options]", `
  List the ACL policies. Needs a management token.`, true)
}

func (c *ACLPolicyListCommand) Run(args []string) int {
	fs := c.flagSet("acl policy list", true)
	if _, err := c.parse(fs, args, 0, 0, "acl policy list [options]"); err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		ps, err := cl.ACLPolicies(ctx)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(ps)
			return nil
		}
		if len(ps) == 0 {
			c.Ui.Output("No policies found")
			return nil
		}
		rows := [][]string{{"Name", "Description", "Modify Index"}}
		for _, p := range ps {
			rows = append(rows, []string{p.Name, orDash(p.Description), fmt.Sprint(p.ModifyIndex)})
		}
		c.Ui.Output(table(rows))
		return nil
	})
}

// ACLPolicyInfoCommand is `volhost acl policy info NAME`.
type ACLPolicyInfoCommand struct{ *Meta }

func (c *ACLPolicyInfoCommand) Synopsis() string { return "Show an ACL policy and its rules" }
func (c *ACLPolicyInfoCommand) Help() string {
	return helpText("acl policy info [options] <name>", `
  Show one ACL policy with its rules. Needs a management token.`, true)
}

func (c *ACLPolicyInfoCommand) Run(args []string) int {
	fs := c.flagSet("acl policy info", true)
	rest, err := c.parse(fs, args, 1, 1, "acl policy info [options] <name>")
	if err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		p, err := cl.ACLPolicy(ctx, rest[0])
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(p)
			return nil
		}
		c.Ui.Output(kv([][2]string{{"Name", p.Name}, {"Description", orDash(p.Description)}, {"Modify Index", fmt.Sprint(p.ModifyIndex)}}))
		c.Ui.Output("\nRules\n\n" + strings.TrimRight(p.Rules, "\n"))
		return nil
	})
}

// ACLPolicyDeleteCommand is `volhost acl policy delete NAME`.
type ACLPolicyDeleteCommand struct{ *Meta }

func (c *ACLPolicyDeleteCommand) Synopsis() string { return "Delete an ACL policy" }
func (c *ACLPolicyDeleteCommand) Help() string {
	return helpText("acl policy delete [options] <name>", `
  Delete an ACL policy. Tokens that name it lose what it granted at once.
  Needs a management token.`, false)
}

func (c *ACLPolicyDeleteCommand) Run(args []string) int {
	fs := c.flagSet("acl policy delete", false)
	rest, err := c.parse(fs, args, 1, 1, "acl policy delete [options] <name>")
	if err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.ACLPolicyDelete(ctx, rest[0]); err != nil {
			return err
		}
		c.Ui.Output(fmt.Sprintf("Successfully deleted %q ACL policy!", rest[0]))
		return nil
	})
}

// ACLTokenCreateCommand is `volhost acl token create`.
type ACLTokenCreateCommand struct{ *Meta }

func (c *ACLTokenCreateCommand) Synopsis() string { return "Create an ACL token" }
func (c *ACLTokenCreateCommand) Help() string {
	return helpText("acl token create [options]", `
  Create a token and print its accessor and secret IDs. The secret is shown
  only now. Needs a management token.

Options:

  -name=<name>
    A name for the token.

  -type=<client|management>
    A client token (default) has what its policies grant; a management
    token has every capability and takes no policies.

  -policy=<name>
    A policy of the token (repeatable; a client token needs at least one).

  -ttl=<duration>
    The token expires after this long (e.g. 8h); default: never.`, true)
}

func (c *ACLTokenCreateCommand) Run(args []string) int {
	fs := c.flagSet("acl token create", true)
	var req api.ACLTokenRequest
	var policies stringList
	var ttl time.Duration
	fs.StringVar(&req.Name, "name", "", "")
	fs.StringVar(&req.Type, "type", "client", "")
	fs.Var(&policies, "policy", "")
	fs.DurationVar(&ttl, "ttl", 0, "")
	if _, err := c.parse(fs, args, 0, 0, "acl token create [options]"); err != nil {
		return c.fail(err)
	}
	if ttl < 0 {
		return c.fail(fmt.Errorf("-ttl must not be negative, got %s", ttl))
	}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	req.Policies = policies
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		tok, err := cl.ACLTokenCreate(ctx, req)
		if err != nil {
			return err
		}
		c.showSecret(tok)
		return nil
	})
}

// ACLTokenListCommand is `volhost acl token list`.
type ACLTokenListCommand struct{ *Meta }

func (c *ACLTokenListCommand) Synopsis() string { return "List ACL tokens" }
func (c *ACLTokenListCommand) Help() string {
	return helpText("acl token list [options]", `
  List the tokens (accessor IDs; secrets are never shown). Needs a
  management token.`, true)
}

func (c *ACLTokenListCommand) Run(args []string) int {
	fs := c.flagSet("acl token list", true)
	if _, err := c.parse(fs, args, 0, 0, "acl token list [options]"); err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		ts, err := cl.ACLTokens(ctx)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(ts)
			return nil
		}
		rows := [][]string{{"Name", "Type", "Accessor ID", "Policies", "Expiry Time"}}
		for _, t := range ts {
			exp := "never"
			if t.ExpirationTime != nil {
				exp = fmtTime(*t.ExpirationTime)
			}
			rows = append(rows, []string{orDash(t.Name), t.Type, t.AccessorID, orDash(strings.Join(t.Policies, ",")), exp})
		}
		c.Ui.Output(table(rows))
		return nil
	})
}

// ACLTokenInfoCommand is `volhost acl token info ACCESSOR`.
type ACLTokenInfoCommand struct{ *Meta }

func (c *ACLTokenInfoCommand) Synopsis() string { return "Show an ACL token" }
func (c *ACLTokenInfoCommand) Help() string {
	return helpText("acl token info [options] <accessor-id>", `
  Show one token by accessor ID. Needs a management token.`, true)
}

func (c *ACLTokenInfoCommand) Run(args []string) int {
	fs := c.flagSet("acl token info", true)
	rest, err := c.parse(fs, args, 1, 1, "acl token info [options] <accessor-id>")
	if err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		t, err := cl.ACLToken(ctx, rest[0])
		if err != nil {
			return err
		}
		return c.showToken(*t)
	})
}

func (m *Meta) showToken(t api.ACLTokenView) error {
	if m.json {
		m.printJSON(t)
		return nil
	}
	m.Ui.Output(kv(tokenPairs(t)))
	return nil
}

// ACLTokenSelfCommand is `volhost acl token self`.
type ACLTokenSelfCommand struct{ *Meta }

func (c *ACLTokenSelfCommand) Synopsis() string { return "Show the token in use" }
func (c *ACLTokenSelfCommand) Help() string {
	return helpText("acl token self [options]", `
  Show the token given by -token or VOLHOST_TOKEN (the anonymous token
  without one).`, true)
}

func (c *ACLTokenSelfCommand) Run(args []string) int {
	fs := c.flagSet("acl token self", true)
	if _, err := c.parse(fs, args, 0, 0, "acl token self [options]"); err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		t, err := cl.ACLTokenSelf(ctx)
		if err != nil {
			return err
		}
		return c.showToken(*t)
	})
}

// ACLTokenDeleteCommand is `volhost acl token delete ACCESSOR`.
type ACLTokenDeleteCommand struct{ *Meta }

func (c *ACLTokenDeleteCommand) Synopsis() string { return "Revoke an ACL token" }
func (c *ACLTokenDeleteCommand) Help() string {
	return helpText("acl token delete [options] <accessor-id>", `
  Revoke a token by accessor ID: requests with its secret are denied from
  the moment the deletion commits. Needs a management token.`, false)
}

func (c *ACLTokenDeleteCommand) Run(args []string) int {
	fs := c.flagSet("acl token delete", false)
	rest, err := c.parse(fs, args, 1, 1, "acl token delete [options] <accessor-id>")
	if err != nil {
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.ACLTokenDelete(ctx, rest[0]); err != nil {
			return err
		}
		c.Ui.Output(fmt.Sprintf("Token %q deleted", rest[0]))
		return nil
	})
}
