package e2e

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCachectlExitCodes runs the real cachectl once for each kind of
// failure and checks the exit status its --help documents.
func TestCachectlExitCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, 2, "")
	nobody := freeAddr(t) // nothing listens here
	cp := []string{"--control-plane", c.control, "--token", c.token}
	paused := c.nodes[1]
	for _, tc := range []struct {
		name  string
		args  []string
		pause bool
		want  int
		say   string // what the output must say, when not empty
	}{
		{"success", append(cp, "ring"), false, 0, ""},
		{"unknown flag", append(cp, "ring", "--bogus"), false, 2, ""},
		{"unknown command", append(cp, "rnig"), false, 2, ""},
		{"missing argument", append(cp, "inspect"), false, 2, ""},
		{"bad output format", append(cp, "-o", "xml", "ring"), false, 2, ""},
		{"bad flag value", append(cp, "purge", "--prefix", "no-slash"), false, 2, ""},
		{"control plane unreachable", []string{"--control-plane", nobody, "--token", c.token, "--timeout", "1s", "ring"}, false, 3, ""},
		{"no node answers", append(cp, "--nodes", nobody, "stats"), false, 3, ""},
		{"wrong token", []string{"--control-plane", c.control, "--token", "wrong", "ring"}, false, 4, ""},
		{"no such policy", append(cp, "policy", "get", "nosuch"), false, 5, ""},
		{"no such node", append(cp, "drain", "nosuch"), false, 5, ""},
		{"no such epoch yet", append(cp, "ring", "diff", "9", "10"), false, 5, "there is no epoch 9 yet: the current epoch is "},
		{"a node does not acknowledge", append(cp, "purge", "http://127.0.0.1/x", "--wait", "1s"), true, 6, ""},
		{"bench requests fail", append(cp, "bench", "-q", "--targets", "http://"+nobody, "-n", "20", "-c", "2"), false, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pause {
				if err := paused.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				defer paused.proc.cmd.Process.Signal(syscall.SIGCONT)
			}
			out, err := exec.CommandContext(ctx, filepath.Join(binDir, "cachectl"), tc.args...).CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want || !strings.Contains(string(out), tc.say) {
				t.Fatalf("cachectl %v: exit %d, want %d saying %q\n%s", tc.args, code, tc.want, tc.say, out)
			}
			t.Logf("exit %d: %s", code, out)
		})
	}
}
