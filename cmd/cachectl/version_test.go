package main

import (
	"errors"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/buildinfo"
)

func TestVersionOutput(t *testing.T) {
	v := &versions{
		Client:       build{Version: "v0.4.0", GoVersion: "go1.26.0"},
		ControlPlane: &build{Version: "0d9c1a2e5b7f", GoVersion: "go1.26.0", Replica: "cp-2"},
		Nodes:        []nodeVersion{{Node: "node-1", Version: "v0.4.0"}, {Node: "node-2", Version: "v0.3.9"}, {Node: "node-3"}},
	}
	goldenFormats(t, "version", v, func(tw *tabwriter.Writer, v *versions) { versionTable(tw, v, false) })
	t.Run("unreachable", func(t *testing.T) {
		goldenFormats(t, "version-unreachable", &versions{Client: v.Client, Nodes: []nodeVersion{}},
			func(tw *tabwriter.Writer, v *versions) { versionTable(tw, v, false) })
	})
}

// With the control plane down, version still prints cachectl's own and
// fails naming the control plane.
func TestVersionUnreachable(t *testing.T) {
	out, _, err := runCachectl(t, "version")
	if !errors.Is(err, admin.ErrUnavailable) || !strings.HasPrefix(err.Error(), "control plane version: ") {
		t.Fatalf("err = %v, want the control plane unavailable", err)
	}
	c := buildinfo.Read()
	if !strings.Contains(out, "client  ") || !strings.Contains(out, c.GoVersion) || !strings.Contains(out, "control plane  unreachable") {
		t.Fatalf("output:\n%s", out)
	}
}

// Off loopback without --ca, cachectl sends no token and names the flags
// that would let it.
func TestATokenIsNotSentInCleartextOffLoopback(t *testing.T) {
	_, _, err := runCachectl(t, "--control-plane", "cp.example:7070", "ring")
	if !errors.Is(err, admin.ErrCleartext) || exitCode(err) != exitCode(admin.ErrInvalid) ||
		!strings.Contains(err.Error(), "--ca") || !strings.Contains(err.Error(), "--insecure-plaintext") {
		t.Fatalf("err = %v, want the cleartext token refused naming --ca and --insecure-plaintext", err)
	}
	// Asked for on purpose, the call goes out (and fails to connect, here).
	_, _, err = runCachectl(t, "--control-plane", "0.0.0.0:1", "--insecure-plaintext", "--timeout", "50ms", "ring")
	if errors.Is(err, admin.ErrCleartext) || !errors.Is(err, admin.ErrUnavailable) {
		t.Fatalf("with --insecure-plaintext: err = %v, want the control plane unavailable", err)
	}
}
