package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// CaseResult is one case's verdict.
type CaseResult struct {
	Name   string   `json:"name"`
	File   string   `json:"file"`
	Pass   bool     `json:"pass"`
	Diff   []string `json:"diff,omitempty"`
	Result *Result  `json:"result,omitempty"`
	// Error is a case that could not run (a view of the wrong kind).
	Error string `json:"error,omitempty"`
}

// Report is a test run's verdicts, in case order.
type Report struct {
	Module  string       `json:"module"`
	Version string       `json:"version"`
	Cases   []CaseResult `json:"cases"`
	Passed  int          `json:"passed"`
	Failed  int          `json:"failed"`
	Skipped int          `json:"skipped"`
}

// Test runs every case whose name matches run (nil: all) against mod.
func Test(ctx context.Context, mod *Module, cases []*Case, run *regexp.Regexp) (*Report, error) {
	rep := &Report{Module: mod.Name, Version: mod.Version, Cases: []CaseResult{}}
	for _, c := range cases {
		if run != nil && !run.MatchString(c.Name) {
			rep.Skipped++
			continue
		}
		cr := CaseResult{Name: c.Name, File: c.File}
		res, err := mod.Run(ctx, &c.View)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case err != nil:
			cr.Error = err.Error()
			cr.Diff = []string{err.Error()}
		case c.ExpectFault != "":
			cr.Result = res
			if res.Fault == nil {
				cr.Diff = []string{fmt.Sprintf("want fault %q, got answer %s", c.ExpectFault, show(res.Answer))}
			} else if res.Fault.Kind != c.ExpectFault {
				cr.Diff = []string{fmt.Sprintf("want fault %q, got fault %q: %s", c.ExpectFault, res.Fault.Kind, res.Fault.Message)}
			}
		default:
			cr.Result = res
			if res.Fault != nil {
				cr.Diff = []string{fmt.Sprintf("want an answer, got fault %q: %s", res.Fault.Kind, res.Fault.Message)}
			} else {
				cr.Diff = Match(c.Expect, res.Answer)
			}
		}
		cr.Pass = len(cr.Diff) == 0
		if cr.Pass {
			rep.Passed++
		} else {
			rep.Failed++
		}
		rep.Cases = append(rep.Cases, cr)
	}
	return rep, nil
}

// WriteText prints the report like `go test -v`: one PASS/FAIL line per
// case, the diff under a failure, and a closing count.
func (r *Report) WriteText(w io.Writer) {
	for _, c := range r.Cases {
		d := ""
		if c.Result != nil {
			d = fmt.Sprintf(" (%s)", c.Result.Duration.Round(time.Microsecond))
		}
		if c.Pass {
			fmt.Fprintf(w, "PASS %s%s\n", c.Name, d)
			continue
		}
		fmt.Fprintf(w, "FAIL %s%s\n", c.Name, d)
		fmt.Fprintf(w, "    %s\n", c.File)
		for _, l := range c.Diff {
			fmt.Fprintf(w, "    %s\n", l)
		}
		if c.Result != nil && c.Result.Answer != nil {
			b, _ := json.Marshal(c.Result.Answer)
			fmt.Fprintf(w, "    full answer: %s\n", b)
		}
	}
	s := fmt.Sprintf("%d passed, %d failed", r.Passed, r.Failed)
	if r.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", r.Skipped)
	}
	fmt.Fprintf(w, "%s %s: %s\n", r.Module, r.Version, s)
}

// OK reports whether every case that ran passed, and at least one ran.
func (r *Report) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// FormatResult renders one Result for `module run`.
func FormatResult(w io.Writer, r *Result) {
	if r.Answer != nil {
		b, _ := json.MarshalIndent(r.Answer, "", "  ")
		fmt.Fprintf(w, "%s\n", b)
	}
	if r.Fault != nil {
		fmt.Fprintf(w, "FAULT %s: %s\n", r.Fault.Kind, strings.TrimSpace(r.Fault.Message))
	}
	fmt.Fprintf(w, "call %s: %s, memory %d of %d pages\n", r.Call, r.Duration.Round(time.Microsecond), r.MemoryPages, r.MemoryLimitPages)
}
