// Package kit is the module author's toolbox behind `volhost module run`,
// `module test` and `module new`: it loads one module offline through the
// same plugins.Manager path the agent uses (validation, instrumentation,
// limits, self-test), runs it on recorded views, applies the host's own
// checks to its answers (so a violation shows as the fault the watcher would
// record), matches answers against the partial expectations of case files,
// and scaffolds new module folders that build and pass their own cases.
//
// Views and answers travel as JSON in snake_case (View, Answer), the form
// `module record` writes, so a case can be recorded on a live agent, edited
// and replayed here. Nothing in this package acts on a volume.
package kit
