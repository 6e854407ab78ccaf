// Package command runs a program's cobra command tree the way every
// shardcache binary does: cancelled by SIGINT or SIGTERM, and an error
// printed as one line with an exit status that says what kind of failure
// it was, never a stack trace or usage.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit statuses, each a kind of failure a script can tell apart.
const (
	ExitOK = 0
	// ExitFailure: anything not below, such as requests that failed in a
	// load test.
	ExitFailure = 1
	// ExitUsage: a bad command line, or input refused as invalid.
	ExitUsage = 2
	// ExitUnreachable: the control plane or a node could not be reached.
	ExitUnreachable = 3
	// ExitUnauthenticated: the admin token or client certificate was
	// refused.
	ExitUnauthenticated = 4
	// ExitNotFound: the node, policy, purge, epoch or revision named does
	// not exist.
	ExitNotFound = 5
	// ExitPartial: done, but some nodes did not acknowledge it.
	ExitPartial = 6
)

// ExitCodes documents the statuses, for --help and the README.
const ExitCodes = `Exit status:
  0  success
  1  failure (such as requests that failed under cachectl bench)
  2  usage: a bad command line, or input refused as invalid
  3  unreachable: the control plane or a node could not be reached
  4  unauthenticated: the admin token or client certificate was refused
  5  not found: no such node, policy, purge, epoch or revision
  6  partial: done, but some nodes did not acknowledge it`

// Error is an error with the exit status it calls for.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// WithCode gives err the exit status code (nil stays nil).
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usage marks err as a usage error.
func Usage(err error) error { return WithCode(ExitUsage, err) }

// Main executes root and exits with the status Run returns.
func Main(name string, root *cobra.Command, classify func(error) int) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := Run(ctx, name, root, os.Args[1:], os.Stderr, classify)
	stop()
	os.Exit(code)
}

// Run executes root with args and returns the exit status: that of an
// *Error, else classify's (when not nil and not 0), else ExitUsage for
// cobra's own refusals of the command line, else ExitFailure. The error
// goes to stderr as one line.
func Run(ctx context.Context, name string, root *cobra.Command, args []string, stderr io.Writer, classify func(error) int) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	markUsage(root)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return Code(err, classify)
}

// Code is the exit status of err.
func Code(err error, classify func(error) int) int {
	var e *Error
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &e):
		return e.Code
	case classify != nil && classify(err) != 0:
		return classify(err)
	case strings.HasPrefix(err.Error(), "unknown command "), strings.HasPrefix(err.Error(), "required flag"):
		return ExitUsage // cobra's, returned before any of our code runs
	}
	return ExitFailure
}

// markUsage makes the errors of flag parsing and argument checks usage
// errors, in every command of the tree, and lists the exit statuses in
// the root's help.
func markUsage(root *cobra.Command) {
	if !strings.Contains(root.Long, ExitCodes) {
		root.Long = strings.TrimSpace(strings.TrimSpace(root.Long) + "\n\n" + ExitCodes)
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
		if c.HasParent() && c.HasSubCommands() {
			strictGroup(c)
		}
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error { return Usage(args(cmd, a)) }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// strictGroup makes a command below the root that has subcommands refuse
// a word that names none of them, as the root does: cobra takes it as an
// argument, and a group with no action of its own printed its help and
// exited 0, so a mistyped "cachectl policy aply" in a script succeeded.
// A group with no action of its own prints its help when given no word,
// or "help".
func strictGroup(c *cobra.Command) {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // as the root's suggestions
	}
	own := c.Runnable()
	if c.Args == nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || len(args) == 1 && args[0] == "help" && !own {
				return nil // "policy help" prints the group's help, as before
			}
			err := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return errors.New(err)
		}
	}
	if !own {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
