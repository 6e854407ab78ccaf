package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestToolsWithoutTheControlPlane: every process reports the version it
// was built with (cachectl version, cachectl nodes, shardcache_build_info);
// then, with the control plane stopped, stats, top --once, log and
// inspect work from the nodes alone (--nodes naming one of them), and
// without --nodes the error says to use it.
func TestToolsWithoutTheControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: &countingOrigin{counts: map[string]int{}}})
	client := &http.Client{Timeout: 10 * time.Second}
	fetch := func(path string) {
		t.Helper()
		resp, err := client.Get("http://" + c.nodes[0].client + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 10 {
		fetch(fmt.Sprintf("/obj/t%d?size=100", i))
	}

	var v struct {
		Client       struct{ Version string }         `json:"client"`
		ControlPlane *struct{ Version string }        `json:"control_plane"`
		Nodes        []struct{ Node, Version string } `json:"nodes"`
	}
	if err := c.cachectl(ctx, &v, "version"); err != nil {
		t.Fatal(err)
	}
	if v.Client.Version != e2eVersion || v.ControlPlane == nil || v.ControlPlane.Version != e2eVersion || len(v.Nodes) != 3 {
		t.Fatalf("cachectl version: %+v; want %s everywhere, 3 nodes", v, e2eVersion)
	}
	for _, n := range v.Nodes {
		if n.Version != e2eVersion {
			t.Errorf("%s reports version %q, want %s", n.Node, n.Version, e2eVersion)
		}
	}
	var nodes struct {
		Nodes []struct {
			Member struct{ ID, Version string } `json:"member"`
		} `json:"nodes"`
	}
	if err := c.cachectl(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.Member.Version != e2eVersion {
			t.Errorf("cachectl nodes: %s has version %q, want %s", n.Member.ID, n.Member.Version, e2eVersion)
		}
	}
	label := `version="` + e2eVersion + `"`
	if got := metric(t, c.nodes[0], "shardcache_build_info", label, `component="node"`); got != 1 {
		t.Errorf("node shardcache_build_info{%s} = %v, want 1", label, got)
	}
	if got := metric(t, &node{id: "control", ops: c.controlOps}, "shardcache_build_info", label, `component="control"`); got != 1 {
		t.Errorf("control plane shardcache_build_info{%s} = %v, want 1", label, got)
	}

	if err := c.controlProc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "cachectl")
	out, err := exec.CommandContext(ctx, bin, "--control-plane", c.control, "--token", c.token, "--timeout", "1s", "stats").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--nodes") {
		t.Fatalf("cachectl stats, control plane down, no --nodes: %v\n%s\nwant a failure naming --nodes", err, out)
	}

	viaNodes := []string{"--nodes", c.nodes[1].ops}
	var st statsJSON
	if err := c.cachectl(ctx, &st, append(viaNodes, "stats")...); err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 3 || st.Total.Requests != 10 {
		t.Fatalf("cachectl --nodes stats: %+v; want 3 nodes, 10 requests", st)
	}
	for _, n := range st.Nodes {
		if !n.Live {
			t.Errorf("cachectl --nodes stats: %s not live: %s", n.Node, n.Unreachable)
		}
	}
	var top struct {
		Nodes []struct{ Node, Unreachable string } `json:"nodes"`
	}
	if err := c.cachectl(ctx, &top, append(viaNodes, "top", "--once", "--interval", "200ms")...); err != nil {
		t.Fatal(err)
	}
	if len(top.Nodes) != 3 {
		t.Fatalf("cachectl --nodes top --once: %+v; want 3 nodes", top)
	}
	for _, n := range top.Nodes {
		if n.Unreachable != "" {
			t.Errorf("cachectl --nodes top --once: %s unreachable: %s", n.Node, n.Unreachable)
		}
	}
	var in inspectJSON
	if err := c.cachectl(ctx, &in, append(viaNodes, "inspect", "http://127.0.0.1/obj/t1?size=100")...); err != nil {
		t.Fatal(err)
	}
	if !in.Stored || len(in.Owners) == 0 || len(in.Nodes) != 3 {
		t.Fatalf("cachectl --nodes inspect: %+v; want it stored on its owner, 3 nodes asked", in)
	}

	var vn struct {
		Nodes []struct{ Node, Version, Unreachable string } `json:"nodes"`
	}
	if err := c.cachectl(ctx, &vn, append(viaNodes, "version")...); err != nil {
		t.Fatal(err)
	}
	if len(vn.Nodes) != 3 {
		t.Fatalf("cachectl --nodes version: %+v; want 3 nodes", vn)
	}
	for _, n := range vn.Nodes {
		if n.Version != e2eVersion {
			t.Errorf("cachectl --nodes version: %s says %q (%s), want %s", n.Node, n.Version, n.Unreachable, e2eVersion)
		}
	}

	lines := &lineBuffer{}
	logs := exec.CommandContext(ctx, bin, append([]string{"--token", c.token}, append(viaNodes, "log", "--path-prefix", "/logged/")...)...)
	logs.Stdout = lines
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Process.Kill(); logs.Wait() })
	i := 0
	err = eventually(ctx, func() error {
		for _, nd := range c.nodes {
			resp, err := client.Get(fmt.Sprintf("http://%s/logged/%d", nd.client, i))
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		i++
		for _, nd := range c.nodes {
			if !strings.Contains(lines.String(), `"node":"`+nd.id+`"`) {
				return fmt.Errorf("no record of %s yet:\n%s", nd.id, lines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cachectl --nodes log: %v", err)
	}
}
